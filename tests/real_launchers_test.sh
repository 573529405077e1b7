#!/usr/bin/env bash
# //tests:real_launchers_test: the Slurm and MPI launchers under the real Slurm and Open MPI (Debian's slurm-wlm,
# munge, openmpi-bin), each training the test data's DeepFM job (1 scheduler, 2 servers, 2 workers, mutual TLS
# with the certificates the scripts make) to the AUC and prediction fingerprint `kestrel local` gives:
#
#   slurm_job            a private single-node Slurm (munged, slurmctld, slurmd on free ports, state in a temporary
#                        directory) runs deploy/slurm/kestrel.sbatch + kestrel.multi-prog.conf as submitted with
#                        sbatch (5 tasks overcommitted onto this machine's cores)
#   slurm_server_killed  the same with server 1 killed (SIGKILL) after the first committed checkpoint: the step
#                        ends (--kill-on-bad-exit), the script starts it again, the scheduler resumes from the
#                        checkpoint and the job ends with the same predictions
#   slurm_requeued       the same job requeued (`scontrol requeue`, as a node failure does) after the first
#                        checkpoint: Slurm runs the script again (#SBATCH --requeue, SLURM_RESTART_COUNT=1), which
#                        makes new certificates and resumes from the checkpoint
#   mpi_job              deploy/mpi/run_mpmd.sh under mpirun (--oversubscribe; as root with Open MPI's consent
#                        variables)
#
# Each job's test AUC must be within 0.03 of the planted optimum and equal `kestrel local --no_build`'s on the
# same config, data and compute threads (to 1e-6), with the same fingerprint (BSP is bitwise deterministic).
# The Slurm cases need root (the private slurmd starts the tasks as their user). Missing tools are installed once
# with apt-get (as root); a case whose tools are still missing, or that needs root without it, is skipped saying
# why (JUnit `skipped`). Every daemon and job process is killed on exit, also on failure, found by a marker in
# its environment. About 2 minutes on 2 cores.
set -euo pipefail

runfiles="${TEST_SRCDIR:-$PWD}/${TEST_WORKSPACE:-kestrel}"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
export PATH="$PATH:/usr/sbin:/sbin"  # slurmctld, slurmd and munged live in sbin, which Bazel's PATH lacks
for f in scheduler/kestrel_scheduler server/kestrel_server cmd/kestrel_worker worker/data/kestrel_datagen \
    scripts/kestrel deploy/slurm/kestrel.sbatch deploy/mpi/run_mpmd.sh; do
  if [[ ! -e "$runfiles/$f" ]]; then
    echo "real_launchers_test: $runfiles/$f is missing (run it with bazel test)" >&2
    exit 1
  fi
done

# ------------------------------------------------------------------------------------------ results, JUnit
CASES=(slurm_job slurm_server_killed slurm_requeued mpi_job)
declare -A result=() reason=() seconds=()
current="" started=0

begin() {
  current=$1 started=$SECONDS
  echo "== $1: $2"
}
finish() {  # finish pass | finish skip REASON
  result[$current]=$1 reason[$current]="${2:-}" seconds[$current]=$((SECONDS - started))
  [[ $1 == skip ]] && echo "SKIP: $current: $2"
  current=""
}
skip_all() {
  local name
  for name in "${CASES[@]}"; do
    [[ -n "${result[$name]:-}" ]] || { current=$name started=$SECONDS; finish skip "$1"; }
  done
}
xml_escape() { sed -e 's/&/\&amp;/g' -e 's/</\&lt;/g' -e 's/>/\&gt;/g' -e 's/"/\&quot;/g' <<<"$1"; }
write_xml() {
  [[ -n "${XML_OUTPUT_FILE:-}" ]] || return 0
  local name failures=0 skipped=0
  for name in "${CASES[@]}"; do
    case "${result[$name]:-}" in
      pass) ;;
      skip) skipped=$((skipped + 1)) ;;
      *) failures=$((failures + 1)) ;;
    esac
  done
  {
    echo '<?xml version="1.0" encoding="utf-8"?>'
    echo "<testsuites><testsuite name=\"real_launchers_test\" tests=\"${#CASES[@]}\" failures=\"$failures\"" \
      "skipped=\"$skipped\">"
    for name in "${CASES[@]}"; do
      printf '<testcase name="%s" classname="real_launchers_test" time="%s">' "$name" "${seconds[$name]:-0}"
      case "${result[$name]:-}" in
        pass) ;;
        skip) printf '<skipped message="%s"/>' "$(xml_escape "${reason[$name]}")" ;;
        fail) printf '<failure message="%s"/>' "$(xml_escape "${reason[$name]}")" ;;
        *) printf '<failure message="not run: an earlier case failed"/>' ;;
      esac
      echo '</testcase>'
    done
    echo '</testsuite></testsuites>'
  } >"$XML_OUTPUT_FILE"
}

# -------------------------------------------------------------------------------------------------- cleanup
# Everything this test starts (munged, slurmctld, slurmd and through them slurmstepd and the job's tasks,
# mpirun and its ranks, kestrel local) carries MARK in its environment, which this shell itself does not.
# slurmstepd detaches from slurmd, so the marker, not the process tree, finds them all.
short=""  # short paths (unix sockets): munged's, slurmd's and Open MPI's
MARK=""
conf=""
marked_pids() {
  local dir pid
  [[ -n "$MARK" ]] || return 0
  for dir in /proc/[0-9]*; do
    pid=${dir#/proc/}
    [[ $pid == "$$" || $pid == "$BASHPID" ]] && continue
    if { tr '\0' '\n' <"$dir/environ"; } 2>/dev/null | grep -qxF "$MARK"; then
      echo "$pid"
    fi
  done
}
cleanup() {
  local rc=$? pid pids ids
  trap - EXIT
  if [[ -n "$current" ]]; then
    result[$current]=fail reason[$current]="failed (exit $rc); see the log" seconds[$current]=$((SECONDS - started))
  fi
  [[ $rc == 0 ]] || echo "real_launchers_test: FAILED (exit $rc)${current:+ in $current}" >&2
  if [[ -n "$conf" ]]; then  # let Slurm end its jobs first, then stop whatever is left
    ids=$(SLURM_CONF="$conf" timeout 10 squeue -h -o %i 2>/dev/null || true)
    if [[ -n "$ids" ]]; then
      # shellcheck disable=SC2086  # job ids, one word each
      SLURM_CONF="$conf" timeout 10 scancel $ids 2>/dev/null || true
      for _ in $(seq 20); do
        [[ -z "$(SLURM_CONF="$conf" timeout 5 squeue -h -o %i 2>/dev/null)" ]] && break
        sleep 0.5
      done
    fi
  fi
  pids="$(marked_pids)"
  if [[ -n "$pids" ]]; then
    echo "cleanup: stopping $(wc -w <<<"$pids") processes: $(ps -o comm= -p "${pids//$'\n'/,}" | sort |
      uniq -c | awk '{print $2 " x" $1}' | paste -sd, -)"
  fi
  for pid in $pids; do kill -TERM "$pid" 2>/dev/null || true; done
  for _ in $(seq 30); do
    [[ -z "$(marked_pids)" ]] && break
    sleep 0.2
  done
  for pid in $(marked_pids); do kill -KILL "$pid" 2>/dev/null || true; done
  [[ -z "$short" ]] || rm -rf -- "$short"
  write_xml
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 143' TERM INT  # Bazel's timeout: clean up too
# background LOG CMD...: runs CMD, its output to LOG, and waits for it; a signal interrupts `wait` (not a
# foreground command), so a timeout's SIGTERM cleans up at once (and reports to this shell's own output).
background() {
  local log=$1
  shift
  "$@" >"$log" 2>&1 &
  wait "$!"
}

# ----------------------------------------------------------------------------------------------- can we run
slurm_tools=(munged slurmctld slurmd sbatch srun scontrol sinfo squeue scancel)
missing_tools() {
  local tool
  for tool in "$@"; do command -v "$tool" >/dev/null || echo "$tool"; done
}
root=0
[[ "$(id -u)" != 0 ]] || root=1
missing="$(missing_tools "${slurm_tools[@]}" mpirun | paste -sd' ')"
if [[ -n "$missing" ]] && ((root)); then
  echo "real_launchers_test: $missing missing; installing slurm-wlm munge openmpi-bin"
  packages=(slurm-wlm munge openmpi-bin)
  export DEBIAN_FRONTEND=noninteractive
  if ! timeout 240 apt-get install -y -q --no-install-recommends "${packages[@]}" >"$tmp/apt.log" 2>&1; then
    if ! { timeout 120 apt-get update -q && timeout 240 apt-get install -y -q --no-install-recommends \
        "${packages[@]}"; } >>"$tmp/apt.log" 2>&1; then
      echo "real_launchers_test: apt-get could not install them:"
      tail -n 5 "$tmp/apt.log"
    fi
  fi
fi
slurm_skip="" mpi_skip=""
missing="$(missing_tools "${slurm_tools[@]}" | paste -sd' ')"
if ((!root)); then
  slurm_skip="needs root (the private slurmd runs as root to start the job's tasks)"
elif [[ -n "$missing" ]]; then
  slurm_skip="$missing missing, and apt-get could not install them (slurm-wlm, munge)"
fi
if [[ -n "$(missing_tools mpirun)" ]]; then
  mpi_skip="mpirun is missing, and apt-get could not install it (openmpi-bin)"
  ((root)) || mpi_skip="mpirun is missing (openmpi-bin; not root, so not installed)"
fi

host="$(hostname)"
host_short="$(hostname -s)"
# The launchers' processes find each other by this host's name (the scheduler's host, the servers' advertised
# address, the certificates' names): it must resolve to an address of this machine, so nothing leaves it.
if ! python3 - "$host" "$host_short" <<'PY'; then
import socket, sys
for name in sys.argv[1:]:
    try:
        addresses = {a[4][0] for a in socket.getaddrinfo(name, None, socket.AF_INET)}
    except OSError as e:
        sys.exit(f"{name} does not resolve ({e})")
    for address in addresses:
        s = socket.socket()
        try:
            s.bind((address, 0))  # only an address of this machine binds
        except OSError:
            sys.exit(f"{name} resolves to {address}, not an address of this machine")
        finally:
            s.close()
PY
  skip_all "this host's name does not resolve to one of its own addresses (the launchers' processes dial it)"
  exit 0
fi

short="$(mktemp -d /tmp/kestrel-launchers.XXXXXX)"
chmod 755 "$short"  # munged wants its socket's directories searchable by everyone
MARK="KESTREL_REAL_LAUNCHERS_TEST=$short"
free_ports() {  # N free TCP ports (bound on every address, as the daemons and the scheduler bind)
  python3 - "$1" <<'PY'
import socket, sys
socks = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in socks:
    s.bind(("", 0))
print(" ".join(str(s.getsockname()[1]) for s in socks))
PY
}

# --------------------------------------------------------------------------------------- data and reference
"$runfiles/worker/data/kestrel_datagen" --small --out_dir="$tmp/data" 2>/dev/null
cat >"$tmp/job.pbtxt" <<'JOB'
model { type: DEEPFM embedding_dim: 8 hidden: [64, 32] }
data { format: CRITEO }
train { batch_size: 256 epochs: 2 log_every_steps: 50 }
JOB
# KESTREL_BIN for the launchers: the three binaries as flat files of one directory.
mkdir -p "$tmp/bin"
for f in scheduler/kestrel_scheduler server/kestrel_server cmd/kestrel_worker; do
  ln -sf "$runfiles/$f" "$tmp/bin/$(basename "$f")"
done
# Every job: this config and data, CPU workers, a checkpoint every 100 of its 314 clocks.
job_env=(TRAIN_FILES="$tmp/data/train.tsv" TEST_FILES="$tmp/data/test.tsv" CONFIG="$tmp/job.pbtxt"
  KESTREL_BIN="$tmp/bin" DEVICE=cpu CKPT_EVERY_CLOCKS=100 FINAL_GRACE=3 METRICS_PORT=0)

# reference THREADS: `kestrel local` on the same job with THREADS compute threads per worker (the GEMM library
# blocks by the thread count, so only the same count gives the same bits); prints its summary.json.
reference() {
  local run="$tmp/local-$1"
  if [[ ! -s "$run/summary.json" ]]; then
    echo "-- reference: kestrel local --compute_threads=$1" >&2
    background "$tmp/local-$1.log" env "$MARK" KESTREL_BIN="$runfiles" timeout -k 10 240 \
      "$runfiles/scripts/kestrel" local --no_build --config="$tmp/job.pbtxt" --data="$tmp/data" --run_dir="$run" \
      --device=cpu --compute_threads="$1" --checkpoint_every_clocks=100 ||
      { tail -n 20 "$tmp/local-$1.log" >&2; return 1; }
  fi
  echo "$run/summary.json"
}

# check_job NAME LOG: the launcher's log says where the final attempt's records are ("done (records in DIR)");
# the workers' compute threads (their logs, in LOG) pick the reference; the evaluation in the records must be
# within 0.03 of the planted optimum and equal the reference's AUC and fingerprint.
check_job() {
  local name=$1 log=$2 records threads summary
  records="$(sed -n 's/.*: done (records in \(.*\))$/\1/p' "$log" | tail -n 1)"
  [[ -n "$records" && -d "$records" ]] || { echo "$name: the launcher did not report its records"; return 1; }
  threads="$(sed -n 's/.*compute backend: cpu (\([0-9]*\) threads.*/\1/p' "$log" | sort -u)"
  [[ "$threads" =~ ^[0-9]+$ ]] || { echo "$name: the workers' compute threads: '$threads'"; return 1; }
  summary="$(reference "$threads")"
  python3 - "$name" "$records" "$summary" "$tmp/data/truth.txt" <<'PY'
import glob, json, sys
name, records, summary, truth = sys.argv[1:]
evals = []
for path in sorted(glob.glob(records + "/worker-*.jsonl")):
    for line in open(path):
        record = json.loads(line)
        if record.get("kind") == "eval":
            evals.append(record)
assert evals, f"{name}: no evaluation record in {records}"
got = evals[-1]
ref = json.load(open(summary))
assert ref.get("ok") and "auc" in ref, f"kestrel local failed: {ref}"
optimum = float(next(l.split(":")[1] for l in open(truth) if l.startswith("bayes_auc")))
print(f"{name}: test AUC {got['auc']:.6f}, fingerprint {got['fingerprint']} (step {got['step']}); "
      f"kestrel local: AUC {ref['auc']:.6f}, fingerprint {ref['fingerprint']}; planted optimum {optimum:.4f}")
assert abs(got["auc"] - optimum) <= 0.03, f"{name}: AUC {got['auc']} is not within 0.03 of the optimum {optimum}"
assert abs(got["auc"] - ref["auc"]) <= 1e-6, f"{name}: AUC {got['auc']} != kestrel local's {ref['auc']}"
assert got["fingerprint"] == ref["fingerprint"], \
    f"{name}: fingerprint {got['fingerprint']} != kestrel local's {ref['fingerprint']}"
PY
}

# ----------------------------------------------------------------------------------------------------- Slurm
start_slurm() {
  local dir="$short/slurm" node_line ctld_port slurmd_port
  mkdir -p "$dir/state" "$dir/spool" "$dir/munge" "$dir/log"
  mkdir -m 700 "$dir/key"
  chmod 755 "$dir" "$dir/munge"
  dd if=/dev/urandom bs=1 count=1024 of="$dir/key/munge.key" status=none
  chmod 400 "$dir/key/munge.key"
  env "$MARK" munged -F --socket="$dir/munge/munge.socket" --key-file="$dir/key/munge.key" \
    --pid-file="$dir/munge/munged.pid" --log-file="$dir/log/munged.log" --seed-file="$dir/munge/munged.seed" \
    >"$dir/log/munged.out" 2>&1 &
  for _ in $(seq 100); do [[ -S "$dir/munge/munge.socket" ]] && break; sleep 0.1; done
  [[ -S "$dir/munge/munge.socket" ]] || { echo "munged did not start:"; cat "$dir/log/munged"*; return 1; }

  read -r ctld_port slurmd_port < <(free_ports 2)
  # This machine as slurmd sees it (name, CPUs, sockets, memory), reached on loopback only.
  node_line="$(slurmd -C 2>/dev/null | grep -m1 '^NodeName=' || true)"
  [[ -n "$node_line" ]] || node_line="NodeName=$host_short CPUs=$(nproc)"
  conf="$dir/slurm.conf"
  cat >"$conf" <<EOF
ClusterName=kestreltest
SlurmctldHost=$host_short(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# cred_expire: also how long a requeued job waits before it may start again (default 120 s)
AuthInfo=socket=$dir/munge/munge.socket,cred_expire=10
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
JobRequeue=1
KillWait=10
$node_line NodeAddr=127.0.0.1 State=UNKNOWN
PartitionName=kestrel Nodes=ALL Default=YES MaxTime=30 State=UP
EOF
  env "$MARK" SLURM_CONF="$conf" slurmctld -D >"$dir/log/slurmctld.out" 2>&1 &
  env "$MARK" SLURM_CONF="$conf" slurmd -D >"$dir/log/slurmd.out" 2>&1 &
  local state=""
  for _ in $(seq 60); do
    state="$(SLURM_CONF="$conf" timeout 5 sinfo -h -N -o %T 2>/dev/null || true)"
    [[ "$state" == idle ]] && break
    sleep 0.5
  done
  if [[ "$state" != idle ]]; then
    echo "the private Slurm's node is not idle (sinfo: '$state'):"
    tail -n 20 "$dir"/log/*
    return 1
  fi
  echo "private Slurm: slurmctld :$ctld_port, slurmd :$slurmd_port, node $host_short (${node_line%% Boards*}), $conf"
}

# submit NAME [VAR=VALUE...]: sbatch's the job from the runfiles root (the script finds its multi-prog template
# and scripts/kestrel there); prints the job id. 5 tasks: 1 scheduler, 2 servers, 2 workers, overcommitted (the
# script asks 4 CPUs and 4G per CPU for each task, more than this machine has).
submit() {
  local name=$1 port
  shift
  port="$(free_ports 1)"
  mkdir -p "$tmp/$name"
  (cd "$runfiles" && env "$MARK" SLURM_CONF="$conf" "${job_env[@]}" JOB_ID="$name-$$" SCHEDULER_PORT="$port" \
    OUT_DIR="$tmp/$name/out" CKPT_DIR="$tmp/$name/ckpt" "$@" \
    sbatch --parsable --job-name="$name" --ntasks=5 --overcommit --cpus-per-task=1 --mem-per-cpu=100M --time=10 \
    --output="$tmp/$name/slurm-%j.out" deploy/slurm/kestrel.sbatch)
}

# wait_job ID: waits (up to 180 s) until the job has ended; prints its final state.
wait_job() {
  local state="" deadline=$((SECONDS + 180))
  while ((SECONDS < deadline)); do
    state="$(SLURM_CONF="$conf" scontrol show job "$1" -o 2>/dev/null | grep -o 'JobState=[A-Z_]*' | cut -d= -f2)"
    case "$state" in
      COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY | PREEMPTED | BOOT_FAIL | DEADLINE)
        echo "$state"
        return
        ;;
    esac
    sleep 1
  done
  echo "still ${state:-unknown} after 180 s"
}

# wait_first_checkpoint LOG: until the job's output says a checkpoint was committed (up to 120 s).
wait_first_checkpoint() {
  for _ in $(seq 1200); do
    grep -qs "committed at clock" "$1" && return
    sleep 0.1
  done
  echo "no checkpoint was committed:"
  tail -n 20 "$1"
  return 1
}

# expect_completed NAME ID LOG: the job ended COMPLETED with exit 0; else its output, and fail.
expect_completed() {
  local state
  state="$(wait_job "$2")"
  echo "$1: job $2 $state ($(SLURM_CONF="$conf" scontrol show job "$2" -o | grep -o 'ExitCode=[0-9:]*'))"
  if [[ "$state" != COMPLETED ]] || ! grep -q "kestrel.sbatch: done" "$3"; then
    grep -v '^I[0-9]' "$3" | tail -n 30
    return 1
  fi
  grep '^kestrel.sbatch:' "$3"
}

if [[ -n "$slurm_skip" ]]; then
  for name in slurm_job slurm_server_killed slurm_requeued; do
    current=$name started=$SECONDS
    finish skip "$slurm_skip"
  done
else
  begin slurm_job "a private Slurm, then deploy/slurm/kestrel.sbatch submitted with sbatch"
  start_slurm
  id="$(submit slurm_job)"
  log="$tmp/slurm_job/slurm-$id.out"
  expect_completed slurm_job "$id" "$log"
  # One step of 5 tasks on the allocation: the scheduler, 2 servers and 2 workers each ran as their task.
  for role in "scheduler rank 0 (SLURM_PROCID=0)" "server rank 0 (--rank=0)" "server rank 1 (--rank=1)" \
      "worker rank 0 (--rank=0)" "worker rank 1 (--rank=1)"; do
    grep -qF "$role" "$log" || { echo "slurm_job: no '$role' in the job's output"; exit 1; }
  done
  grep -qF "mutual TLS (CA $tmp/slurm_job/out/certs/ca.pem)" "$log" ||
    { echo "slurm_job: the scheduler does not serve mutual TLS with the script's certificates"; exit 1; }
  check_job slurm_job "$log"
  finish pass

  begin slurm_server_killed "server 1 killed with SIGKILL after the first checkpoint; the script restarts the step"
  id="$(submit slurm_server_killed)"
  log="$tmp/slurm_server_killed/slurm-$id.out"
  wait_first_checkpoint "$log"
  victim="$(pgrep -f -- "/kestrel_server --job_id=slurm_server_killed-$$ .*--rank=1 " || true)"
  [[ "$victim" =~ ^[0-9]+$ ]] || { echo "server 1 of the job: pids '$victim'"; exit 1; }
  kill -KILL "$victim"
  echo "killed server 1 (pid $victim) once a checkpoint was $(grep -m1 -o 'committed at clock [0-9]*' "$log")"
  expect_completed slurm_server_killed "$id" "$log"
  # The restart: a second step, whose scheduler resumed from the checkpoint and whose servers restored it.
  for want in "kestrel.sbatch: restart 1 of" "resuming from checkpoint" "every server restored"; do
    grep -q "$want" "$log" || { echo "slurm_server_killed: no '$want' in the job's output"; exit 1; }
  done
  grep -qF "done (records in $tmp/slurm_server_killed/out/run-0.1)" "$log" ||
    { echo "slurm_server_killed: the job did not end in its second step (run-0.1)"; exit 1; }
  check_job slurm_server_killed "$log"
  finish pass

  begin slurm_requeued "the job requeued after the first checkpoint; Slurm runs the script again"
  id="$(submit slurm_requeued)"
  log="$tmp/slurm_requeued/slurm-$id.out"
  wait_first_checkpoint "$log"
  SLURM_CONF="$conf" scontrol requeue "$id"
  echo "requeued job $id once a checkpoint was $(grep -m1 -o 'committed at clock [0-9]*' "$log")"
  expect_completed slurm_requeued "$id" "$log"
  restarts="$(SLURM_CONF="$conf" scontrol show job "$id" -o | grep -o 'Restarts=[0-9]*')"
  [[ "$restarts" == Restarts=1 ]] || { echo "slurm_requeued: $restarts, want Restarts=1"; exit 1; }
  echo "slurm_requeued: $restarts"
  # Both runs of the script in the output (--open-mode=append): two CAs, the second run resuming.
  [[ "$(grep -c "kestrel.sbatch: mutual TLS, a new CA" "$log")" == 2 ]] ||
    { echo "slurm_requeued: the script did not run twice"; exit 1; }
  grep -q "resuming from checkpoint" "$log" || { echo "slurm_requeued: the second run did not resume"; exit 1; }
  grep -qF "done (records in $tmp/slurm_requeued/out/run-1.0)" "$log" ||
    { echo "slurm_requeued: the job did not end in its requeued run (run-1.0)"; exit 1; }
  check_job slurm_requeued "$log"
  finish pass
fi

# ------------------------------------------------------------------------------------------------------- MPI
if [[ -n "$mpi_skip" ]]; then
  current=mpi_job started=$SECONDS
  finish skip "$mpi_skip"
else
  begin mpi_job "deploy/mpi/run_mpmd.sh under mpirun, 1 scheduler + 2 servers + 2 workers"
  mkdir -p "$tmp/mpi_job" "$short/mpi"
  # As root Open MPI wants both consent variables; 5 processes on fewer cores need --oversubscribe. TMPDIR: its
  # session directory holds unix sockets, whose paths Bazel's TEST_TMPDIR would make too long.
  rc=0
  background "$tmp/mpi_job/run.log" env "$MARK" "${job_env[@]}" JOB_ID="mpi_job-$$" \
    SCHEDULER_PORT="$(free_ports 1)" OUT_DIR="$tmp/mpi_job/out" CKPT_DIR="$tmp/mpi_job/ckpt" \
    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 TMPDIR="$short/mpi" \
    timeout -k 10 180 "$runfiles/deploy/mpi/run_mpmd.sh" -s 2 -w 2 -- --oversubscribe || rc=$?
  if [[ $rc != 0 ]]; then
    echo "mpi_job: run_mpmd.sh exited $rc:"
    grep -v '^I[0-9]' "$tmp/mpi_job/run.log" | tail -n 30
    exit 1
  fi
  grep '^run_mpmd.sh:' "$tmp/mpi_job/run.log"
  for role in "scheduler rank 0" "server rank 0 (--rank=0)" "server rank 1 (--rank=1)" \
      "worker rank 0 (--rank=0)" "worker rank 1 (--rank=1)"; do
    grep -qF "$role" "$tmp/mpi_job/run.log" || { echo "mpi_job: no '$role' in the launch's output"; exit 1; }
  done
  check_job mpi_job "$tmp/mpi_job/run.log"
  finish pass
fi

for name in "${CASES[@]}"; do
  printf 'real_launchers_test: %-20s %s (%s s)\n' "$name" "${result[$name]}${reason[$name]:+: ${reason[$name]}}" \
    "${seconds[$name]}"
done
