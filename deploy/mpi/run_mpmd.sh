#!/usr/bin/env bash
# Kestrel as one MPMD launch of an MPI launcher (Open MPI's mpirun, or MPICH/Intel MPI's Hydra mpiexec):
#
#   mpirun -np 1 <this> launch scheduler : -np S <this> launch server : -np W <this> launch worker
#
# The binaries are not MPI programs; the launcher only places and starts them. Each app context runs this
# script in `launch` mode, which turns the process's world rank into an explicit flag and execs the binary:
#
#   world rank 0                     kestrel_scheduler
#   world ranks 1 .. S               kestrel_server --rank=<world rank - 1>
#   world ranks S+1 .. S+W           kestrel_worker --rank=<world rank - 1 - S>   (or WORKER_CMD, below)
#
# The world rank comes from OMPI_COMM_WORLD_RANK (Open MPI), PMIX_RANK (PMIx) or PMI_RANK (Hydra); the offsets
# 1 and 1+S are the app contexts' first ranks (launchers number contexts in command-line order).
#
# Usage:
#   TRAIN_FILES=data/train.tsv TEST_FILES=data/test.tsv deploy/mpi/run_mpmd.sh [-s S] [-w W] [-- LAUNCHER_ARGS]
#   deploy/mpi/run_mpmd.sh --dry-run ...       print the launcher's command line instead of running it
# e.g. on two hosts:  deploy/mpi/run_mpmd.sh -s 2 -w 4 -- --hostfile hosts.txt
#
# Settings (environment, forwarded to every rank):
#   TRAIN_FILES, TEST_FILES   comma lists of data files every host can read (required)
#   NUM_SERVERS (-s, default 2), NUM_WORKERS (-w, default 4)
#   JOB_ID (default kestrel), CONFIG (default deploy/jobs/deepfm.pbtxt), DEVICE (auto, cpu, cuda; default auto)
#   CKPT_DIR                  checkpoint directory every host sees (default kestrel_ckpt/$JOB_ID)
#   CKPT_EVERY_CLOCKS         global checkpoint every N clocks (default 500)
#   OUT_DIR                   worker records, attempt-<n>/worker-<rank>.jsonl (default kestrel_out/mpi)
#   SCHEDULER_HOST            host of rank 0 (default: the first host of --hostfile/--host in LAUNCHER_ARGS,
#                             else this host); SCHEDULER_PORT (default 7000)
#   METRICS_PORT              base of --metrics_port: each process serves Prometheus metrics on METRICS_PORT +
#                             its world rank, so processes sharing a host never collide (default 9100; 0: any
#                             free port, logged; -1: off)
#   KESTREL_BIN               directory holding the binaries (default: where kestrel_scheduler is on PATH)
#   WORKER_CMD                the workers' command, given kestrel_worker's flags (default $KESTREL_BIN/kestrel_worker),
#                             e.g. a PyTorch worker: "python3 /opt/kestrel/examples/torch/deepfm.py --dense=allreduce";
#                             words split at spaces (no quoting: no word may hold one). A worker runs as
#                             `env PYTHONPATH=$KESTREL_PYTHON[:$PYTHONPATH] $WORKER_CMD <flags>`
#   KESTREL_PYTHON            with WORKER_CMD: the directory holding the kestrel Python package (kestrel/_kestrel.so,
#                             ...; `bazel build -c opt //python:site` makes it in bazel-bin/python/site), on every
#                             host (default: python/site beside KESTREL_BIN: $(dirname $KESTREL_BIN)/python/site)
#   MPIRUN                    the launcher (default mpirun); MAX_RESTARTS (default 3); FINAL_GRACE (default 15 s)
#   CERTS_DIR                 mutual TLS: a `kestrel certs` directory every host sees (ca.pem and scheduler-0,
#                             server-<shard>, worker-<rank> .pem/.key, keys readable by you only), made with
#                             --hosts naming SCHEDULER_HOST and every host as `hostname` prints it there. Default: a
#                             new CA and certificates made here at each start under $OUT_DIR/certs (the CA key
#                             deleted once they are issued), naming the launcher's hosts as they report themselves
#   CERT_HOSTS                more names for those certificates (comma list), e.g. other names of the hosts
#   KESTREL_CLI               the kestrel command that makes them (default scripts/kestrel: python3 and openssl)
#   INSECURE=1                plaintext, unauthenticated gRPC instead of mutual TLS (--insecure on every process)
#
# Transport: every process talks mutual TLS with its own certificate (--tls_ca/--tls_cert/--tls_key,
# docs/security.md). The processes all run as you, so each can read every key: the certificates keep out other
# users and anyone else on the network, not one process from another.
#
# The launcher ends the whole job when any process fails; this script then launches it again (up to
# MAX_RESTARTS times) and, the scheduler always running with --resume, the job continues from its latest
# checkpoint. When every worker has finished, it stops the scheduler and the servers (SIGTERM).
set -euo pipefail

SELF="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")"
ROOT="$(cd "$(dirname "$SELF")/../.." && pwd)"

# The settings every rank needs (forwarded by the launcher).
SETTINGS=(NUM_SERVERS NUM_WORKERS JOB_ID CONFIG TRAIN_FILES TEST_FILES CKPT_DIR CKPT_EVERY_CLOCKS OUT_DIR DEVICE
  SCHEDULER_HOST SCHEDULER_PORT METRICS_PORT KESTREL_BIN WORKER_CMD KESTREL_PYTHON CERTS_DIR INSECURE)

# launch ROLE: on one rank, exec the role's binary with explicit flags (KESTREL_ECHO=1: print them instead).
launch() {
  local role="$1" world offset count index name
  for name in "${SETTINGS[@]}"; do
    if [ -z "${!name+set}" ]; then
      echo "run_mpmd.sh: $name is not set on this rank (the launcher did not forward it)" >&2
      exit 2
    fi
  done
  world="${OMPI_COMM_WORLD_RANK:-${PMIX_RANK:-${PMI_RANK:-}}}"
  if [ -z "$world" ]; then
    echo "run_mpmd.sh: no world rank (OMPI_COMM_WORLD_RANK, PMIX_RANK or PMI_RANK): run under mpirun" >&2
    exit 2
  fi
  case "$role" in
    scheduler) offset=0 count=1 ;;
    server) offset=1 count="$NUM_SERVERS" ;;
    worker) offset=$((1 + NUM_SERVERS)) count="$NUM_WORKERS" ;;
    *) echo "run_mpmd.sh: unknown role '$role'" >&2; exit 2 ;;
  esac
  index=$((world - offset))
  if [ "$index" -lt 0 ] || [ "$index" -ge "$count" ]; then
    echo "run_mpmd.sh: world rank $world is not a $role (expected ranks $offset..$((offset + count - 1)));" \
      "the launcher must number the app contexts in order" >&2
    exit 2
  fi
  local metrics_port="$METRICS_PORT"
  [ "$METRICS_PORT" -le 0 ] || metrics_port=$((METRICS_PORT + world))
  local scheduler="$SCHEDULER_HOST:$SCHEDULER_PORT"
  # Mutual TLS with this rank's own certificate; INSECURE=1, the explicit opt-out: plaintext.
  local tls=(--insecure)
  if [ "$INSECURE" != 1 ]; then
    tls=(--tls_ca="$CERTS_DIR/ca.pem" --tls_cert="$CERTS_DIR/$role-$index.pem" --tls_key="$CERTS_DIR/$role-$index.key")
  fi
  local cmd
  case "$role" in
    scheduler)
      cmd=("$KESTREL_BIN/kestrel_scheduler" --job_id="$JOB_ID" --port="$SCHEDULER_PORT"
        --num_servers="$NUM_SERVERS" --num_workers="$NUM_WORKERS" --consistency=bsp
        --checkpoint_dir="$CKPT_DIR" --checkpoint_every_clocks="$CKPT_EVERY_CLOCKS" --keep_checkpoints=3 --resume
        --metrics_port="$metrics_port" --metrics_host=0.0.0.0 "${tls[@]}")
      ;;
    server)
      # --port=0: a free port (several servers may share a host); the server registers its real address.
      cmd=("$KESTREL_BIN/kestrel_server" --job_id="$JOB_ID" --port=0 --num_servers="$NUM_SERVERS"
        --rank="$index" --bsp_workers="$NUM_WORKERS" --scheduler="$scheduler" --scheduler_timeout=5m
        --checkpoint_dir="$CKPT_DIR" --metrics_port="$metrics_port" --metrics_host=0.0.0.0 "${tls[@]}")
      ;;
    worker)
      worker_cmd "$KESTREL_BIN" "$WORKER_CMD" "$KESTREL_PYTHON"
      cmd=("${WORKER[@]}" --config="$CONFIG" --job_id="$JOB_ID" --scheduler="$scheduler"
        --scheduler_timeout=10m --rank="$index" --device="$DEVICE" --train_files="$TRAIN_FILES"
        --test_files="$TEST_FILES" --metrics_out="$OUT_DIR/worker-$index.jsonl" --metrics_port="$metrics_port" --metrics_host=0.0.0.0
        "${tls[@]}")
      ;;
  esac
  if [ "${KESTREL_ECHO:-0}" = 1 ]; then
    printf '%s\n' "${cmd[@]}"
    exit 0
  fi
  exec "${cmd[@]}"
}

# worker_cmd BIN WORKER_CMD KESTREL_PYTHON: sets WORKER to the words that start a worker: BIN/kestrel_worker, or
# WORKER_CMD (split at spaces) run with the kestrel Python package first on PYTHONPATH.
worker_cmd() {
  if [ -z "$2" ]; then
    WORKER=("$1/kestrel_worker")
    return
  fi
  local words
  read -r -a words <<<"$2"
  WORKER=(env "PYTHONPATH=$3${PYTHONPATH:+:$PYTHONPATH}" "${words[@]}")
}

# Every host named by --hostfile/--machinefile/-f FILE or --host/-H a,b in the launcher's arguments, in order.
launcher_hosts() {
  while [ "$#" -gt 0 ]; do
    case "$1" in
      --hostfile | -hostfile | --machinefile | -machinefile | -f)
        [ "$#" -lt 2 ] || awk '!/^[[:space:]]*(#|$)/ { sub(/:.*/, "", $1); print $1 }' "$2"
        ;;
      --host | -host | -H)
        [ "$#" -lt 2 ] || tr ',' '\n' <<<"$2" | sed 's/:.*//'
        ;;
    esac
    shift
  done
}

# True when every worker has written its final record.
workers_done() {
  local rank
  for ((rank = 0; rank < NUM_WORKERS; rank++)); do
    grep -qs '"kind":"done"' "$OUT_DIR/worker-$rank.jsonl" || return 1
  done
}

if [ "${1:-}" = launch ]; then
  launch "${2:-}"
fi

dry_run=0
while [ "$#" -gt 0 ]; do
  case "$1" in
    -s) NUM_SERVERS="$2"; shift 2 ;;
    -w) NUM_WORKERS="$2"; shift 2 ;;
    --dry-run) dry_run=1; shift ;;
    --) shift; break ;;
    -h | --help) sed -n '2,/^set -euo/p' "$SELF" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "run_mpmd.sh: unknown argument '$1' (launcher arguments go after --)" >&2; exit 2 ;;
  esac
done
launcher_args=("$@")

export NUM_SERVERS="${NUM_SERVERS:-2}" NUM_WORKERS="${NUM_WORKERS:-4}"
export JOB_ID="${JOB_ID:-kestrel}"
export CONFIG="${CONFIG:-$ROOT/deploy/jobs/deepfm.pbtxt}"
export TRAIN_FILES="${TRAIN_FILES:?set TRAIN_FILES (comma list of training files every host can read)}"
export TEST_FILES="${TEST_FILES:?set TEST_FILES (comma list of test files every host can read)}"
export CKPT_DIR="${CKPT_DIR:-$PWD/kestrel_ckpt/$JOB_ID}"
export CKPT_EVERY_CLOCKS="${CKPT_EVERY_CLOCKS:-500}"
OUT_BASE="${OUT_DIR:-$PWD/kestrel_out/mpi}"
export OUT_DIR="$OUT_BASE/attempt-0"
export DEVICE="${DEVICE:-auto}"
export SCHEDULER_PORT="${SCHEDULER_PORT:-7000}"
export METRICS_PORT="${METRICS_PORT:-9100}"
mapfile -t hosts < <(launcher_hosts "${launcher_args[@]}")
if [ -z "${SCHEDULER_HOST:-}" ]; then
  SCHEDULER_HOST="${hosts[0]:-$(hostname)}"
fi
export SCHEDULER_HOST
if [ -z "${KESTREL_BIN:-}" ]; then
  KESTREL_BIN="$(dirname "$(command -v kestrel_scheduler || echo /usr/local/bin/kestrel_scheduler)")"
fi
export KESTREL_BIN
export WORKER_CMD="${WORKER_CMD:-}"
export KESTREL_PYTHON="${KESTREL_PYTHON:-$(dirname "$KESTREL_BIN")/python/site}"
export INSECURE="${INSECURE:-0}"
if [ "$INSECURE" != 0 ] && [ "$INSECURE" != 1 ]; then
  echo "run_mpmd.sh: INSECURE=$INSECURE: 1 for plaintext gRPC, 0 (the default) for mutual TLS" >&2
  exit 2
fi
CERTS_DIR_GIVEN="${CERTS_DIR:+1}"
export CERTS_DIR="${CERTS_DIR:-$OUT_BASE/certs}"
KESTREL_CLI="${KESTREL_CLI:-$ROOT/scripts/kestrel}"
# The binaries' environment contract, for anything that reads it; every value is also passed as a flag.
export KESTREL_SCHEDULER="$SCHEDULER_HOST:$SCHEDULER_PORT" KESTREL_NUM_SERVERS="$NUM_SERVERS"
export KESTREL_NUM_WORKERS="$NUM_WORKERS"
MPIRUN="${MPIRUN:-mpirun}"

# Forward the settings: Open MPI takes -x NAME per variable, Hydra (MPICH, Intel MPI) -genvlist a,b,c.
forward=()
if "$MPIRUN" --version 2>&1 | grep -qi 'open mpi\|openrte\|prrte'; then
  for name in "${SETTINGS[@]}" KESTREL_SCHEDULER KESTREL_NUM_SERVERS KESTREL_NUM_WORKERS; do
    forward+=(-x "$name")
  done
else
  list="$(IFS=,; echo "${SETTINGS[*]}"),KESTREL_SCHEDULER,KESTREL_NUM_SERVERS,KESTREL_NUM_WORKERS"
  forward=(-genvlist "$list")
fi
command_line=("$MPIRUN" "${forward[@]}" "${launcher_args[@]}"
  -np 1 "$SELF" launch scheduler :
  -np "$NUM_SERVERS" "$SELF" launch server :
  -np "$NUM_WORKERS" "$SELF" launch worker)
if [ "$dry_run" = 1 ]; then
  echo "# scheduler at $KESTREL_SCHEDULER; binaries in $KESTREL_BIN"
  [ -z "$WORKER_CMD" ] || echo "# workers: $WORKER_CMD, with PYTHONPATH=$KESTREL_PYTHON"
  printf '%q ' "${command_line[@]}"
  echo
  exit 0
fi

# The host names clients dial, for the certificates: SCHEDULER_HOST, each host's name as its servers advertise it
# (its `hostname`, asked through the launcher with the same arguments and process count, so the same hosts),
# the launcher's host list, this host's name and CERT_HOSTS.
cert_hosts() {
  {
    printf '%s\n' "$SCHEDULER_HOST"
    if ! "$MPIRUN" "${launcher_args[@]}" -np "$((1 + NUM_SERVERS + NUM_WORKERS))" hostname; then
      echo "run_mpmd.sh: could not ask the hosts their names; the certificates name the launcher's host list" >&2
    fi
    printf '%s\n' "${hosts[@]}"
    hostname
    tr ',' '\n' <<<"${CERT_HOSTS:-}"
  } | awk 'NF && !seen[$0]++' | paste -sd, -
}

# A new CA and a certificate per process in CERTS_DIR (replacing an earlier start's), keys readable by you only.
make_certs() {
  local names
  names="$(cert_hosts)"
  rm -rf -- "$CERTS_DIR"
  (umask 077 && "$KESTREL_CLI" certs --job "$JOB_ID" --out "$CERTS_DIR" --servers "$NUM_SERVERS" \
    --workers "$NUM_WORKERS" --hosts "$names" >/dev/null)
  rm -f -- "$CERTS_DIR/ca.key"  # nothing else will be signed by this run's CA
  echo "run_mpmd.sh: mutual TLS, a new CA and a certificate per process in $CERTS_DIR, for $names"
}

# Exits 2 unless CERTS_DIR holds every process's files and no key that others can read.
check_certs() {
  local name i missing=() names=(scheduler-0)
  for ((i = 0; i < NUM_SERVERS; i++)); do names+=("server-$i"); done
  for ((i = 0; i < NUM_WORKERS; i++)); do names+=("worker-$i"); done
  [ -r "$CERTS_DIR/ca.pem" ] || missing+=(ca.pem)
  for name in "${names[@]}"; do
    [ -r "$CERTS_DIR/$name.pem" ] || missing+=("$name.pem")
    [ -r "$CERTS_DIR/$name.key" ] || missing+=("$name.key")
  done
  if [ "${#missing[@]}" -gt 0 ]; then
    echo "run_mpmd.sh: CERTS_DIR=$CERTS_DIR lacks ${missing[*]} (scripts/kestrel certs --job $JOB_ID" \
      "--servers $NUM_SERVERS --workers $NUM_WORKERS --hosts ... makes them)" >&2
    exit 2
  fi
  name="$(find "$CERTS_DIR/" -maxdepth 1 -name '*.key' -perm /077 -print -quit)"
  if [ -n "$name" ]; then
    echo "run_mpmd.sh: $name can be read by other users: chmod 600 $CERTS_DIR/*.key" >&2
    exit 2
  fi
}

if [ -n "$WORKER_CMD" ] && [ ! -e "$KESTREL_PYTHON/kestrel/_kestrel.so" ]; then
  echo "run_mpmd.sh: WORKER_CMD is set but KESTREL_PYTHON=$KESTREL_PYTHON holds no kestrel package" \
    "(kestrel/_kestrel.so): bazel build -c opt //python:site makes it in \$(bazel info -c opt bazel-bin)/python/site;" \
    "set KESTREL_PYTHON to a copy every host sees" >&2
  exit 2
fi
mkdir -p "$CKPT_DIR" "$OUT_BASE"
if [ "$INSECURE" = 1 ]; then
  echo "run_mpmd.sh: INSECURE=1: plaintext, unauthenticated gRPC between the processes" >&2
else
  [ -n "$CERTS_DIR_GIVEN" ] || make_certs
  check_certs
  echo "run_mpmd.sh: as the job's admin: scripts/kestrel status --scheduler $KESTREL_SCHEDULER --job_id $JOB_ID" \
    "--certs $CERTS_DIR"
fi
echo "run_mpmd.sh: job $JOB_ID, scheduler $KESTREL_SCHEDULER, $NUM_SERVERS servers, $NUM_WORKERS workers," \
  "checkpoints in $CKPT_DIR"
MAX_RESTARTS="${MAX_RESTARTS:-3}"
FINAL_GRACE="${FINAL_GRACE:-15}"
for ((attempt = 0; attempt <= MAX_RESTARTS; attempt++)); do
  # Each attempt's records apart: an earlier attempt's must not count as this one's.
  export OUT_DIR="$OUT_BASE/attempt-$attempt"
  mkdir -p "$OUT_DIR"
  "${command_line[@]}" &
  job=$!
  while kill -0 "$job" 2>/dev/null; do
    if workers_done; then
      echo "run_mpmd.sh: every worker finished; stopping the scheduler and servers in ${FINAL_GRACE}s"
      sleep "$FINAL_GRACE"
      kill -TERM "$job" 2>/dev/null || true
      break
    fi
    sleep 5
  done
  rc=0
  wait "$job" || rc=$?
  if workers_done; then
    echo "run_mpmd.sh: done (records in $OUT_DIR)"
    exit 0
  fi
  echo "run_mpmd.sh: the launch ended (exit $rc) before every worker finished" >&2
  if [ "$attempt" -lt "$MAX_RESTARTS" ]; then
    echo "run_mpmd.sh: restart $((attempt + 1)) of $MAX_RESTARTS, from the latest checkpoint" >&2
  fi
done
echo "run_mpmd.sh: giving up after $MAX_RESTARTS restarts" >&2
exit 1
