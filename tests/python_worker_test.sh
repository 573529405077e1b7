#!/usr/bin/env bash
# PyTorch workers in a cluster: `kestrel local --worker_cmd "python3 examples/torch/deepfm.py"` runs 1 scheduler,
# 2 kestrel_server and 2 Python workers (kestrel.Worker: the C++ session, over mutual TLS) training DeepFM in PyTorch.
#   dense weights on the servers (BSP): two runs end with bitwise identical predictions (the same fingerprint); a
#     server killed with SIGKILL after the first checkpoint (the job rolls back), and a Python worker killed the
#     same way (the supervisor restarts it and it rejoins), end with those predictions too. SSP and ASP train.
#   dense weights allreduced among the workers (gloo): a killed server, and a killed worker, roll the job back to
#     the checkpoint; the run ends within 0.002 AUC of the uninterrupted one, and the clock log shows every clock
#     trained by every worker in the final timeline exactly once: the clocks after the checkpoint are redone
#     once, in the rolled-back generation, none is lost.
set -euo pipefail

runfiles="${TEST_SRCDIR:-$PWD}/${TEST_WORKSPACE:-kestrel}"
export KESTREL_BIN="$runfiles"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
kestrel=("$runfiles/scripts/kestrel")
# shellcheck source=tests/local_job_kill.sh
source "$runfiles/tests/local_job_kill.sh"
python=/usr/bin/python3
if ! "$python" -c "import torch" 2>/dev/null; then
  echo "SKIP: $python has no PyTorch (python3-torch)"
  exit 0
fi

"$runfiles/worker/data/kestrel_datagen" --small --out_dir="$tmp/data" 2>/dev/null
cat >"$tmp/job.pbtxt" <<'JOB'
model { type: DEEPFM embedding_dim: 8 hidden: [64, 32] }
data { format: CRITEO }
train { batch_size: 512 epochs: 1 log_every_steps: 20 }
JOB

summary_field() { "$python" -c "import json,sys; print(json.load(open(sys.argv[1])).get(sys.argv[2], ''))" "$1" "$2"; }

# Runs the job in $tmp/<name> with the Python worker's extra flags in $worker_flags; with a victim (a pids.json
# name) kills it with SIGKILL right after the first checkpoint is committed. Returns once the job has ended.
run_job() {
  local name=$1 victim=${2:-}
  "${kestrel[@]}" local --no_build --config="$tmp/job.pbtxt" --data="$tmp/data" --run_dir="$tmp/$name" \
    --worker_cmd="$python $runfiles/examples/torch/deepfm.py $worker_flags --clock_log=$tmp/$name.clocks" \
    --compute_threads=1 --checkpoint_every_clocks=20 --heartbeat_interval=300ms ${local_flags:-} &
  local local_pid=$!
  if [[ -n "$victim" ]]; then
    kill_after_first_checkpoint "$tmp/$name" "$victim" "${kill_delay:-0}"
  fi
  wait "$local_pid" || { echo "$name: kestrel local failed"; for f in "$tmp/$name"/worker*.log; do tail -n 20 "$f"; done; exit 1; }
  echo "$name: AUC $(summary_field "$tmp/$name/summary.json" auc) fingerprint" \
    "$(summary_field "$tmp/$name/summary.json" fingerprint) restarts $(summary_field "$tmp/$name/summary.json" restarts)"
}

same_predictions() {
  [[ "$(summary_field "$tmp/$1/summary.json" fingerprint)" == "$(summary_field "$tmp/$2/summary.json" fingerprint)" ]] ||
    { echo "$1: predictions differ from $2's"; exit 1; }
}

restarted() {
  [[ "$(summary_field "$tmp/$1/summary.json" restarts)" == *"$2"* ]] || { echo "$1: $2 was not restarted"; exit 1; }
}

# Every clock of the job trained once by each of the 2 workers in the timeline that counts: for each worker and
# clock, the last generation that trained it; a clock trained in two generations was rolled back from the first.
# Prints the sequence around the rollback.
check_clocks() {
  "$python" - "$tmp/$1.clocks" "$(summary_field "$tmp/$1/summary.json" steps)" <<'PY'
import collections, sys
lines = [tuple(map(int, l.split())) for l in open(sys.argv[1])]
total = max(c for _, c, _ in lines) + 1
final = {}
for worker, clock, generation in lines:
    final[(worker, clock)] = generation
for w in (0, 1):
    missing = [c for c in range(total) if (w, c) not in final]
    assert not missing, f"worker {w} never trained clocks {missing[:10]}"
# Within one generation no worker trains a clock twice.
counts = collections.Counter(lines)
twice = [k for k, n in counts.items() if n > 1]
assert not twice, f"trained twice in one generation: {twice[:10]}"
redone = sorted({c for (w, c, g) in lines if final[(w, c)] != g})
generations = sorted({g for _, _, g in lines})
print(f"{len(lines)} steps for {total} clocks x 2 workers; generations {generations}; "
      f"clocks redone after the rollback: {redone[:1]}..{redone[-1:]} ({len(redone)})")
PY
}

worker_flags="--dense=servers"
echo "== dense on the servers, BSP: two runs"
run_job servers_a
run_job servers_b
same_predictions servers_b servers_a
auc=$(summary_field "$tmp/servers_a/summary.json" auc)
"$python" -c "import sys; assert float(sys.argv[1]) > 0.7, sys.argv[1]" "$auc"
for log in "$tmp/servers_a/server0.log" "$tmp/servers_a/scheduler.log"; do
  grep -q "mutual TLS" "$log" || { echo "$log: not over mutual TLS"; exit 1; }
done

echo "== dense on the servers: a server killed mid-run"
run_job servers_killed_server "server 1"
grep -q "every server restored" "$tmp/servers_killed_server/scheduler.log" || { echo "no rollback"; exit 1; }
same_predictions servers_killed_server servers_a

echo "== dense on the servers: a Python worker killed mid-run is restarted and rejoins"
run_job servers_killed_worker "worker 1"
restarted servers_killed_worker "worker 1"
grep -q "registered as worker 1" "$tmp/servers_killed_worker/worker1.log"
same_predictions servers_killed_worker servers_a

echo "== dense on the servers under SSP(2) (reads through the row cache) and ASP"
for mode in ssp asp; do
  local_flags="--consistency=$mode --staleness=2"
  run_job "servers_$mode"
  "$python" -c "import sys; assert float(sys.argv[1]) > 0.7, sys.argv[1]" "$(summary_field "$tmp/servers_$mode/summary.json" auc)"
done
local_flags=""

worker_flags="--dense=allreduce"
echo "== dense by allreduce"
run_job allreduce
"$python" -c "import sys; assert float(sys.argv[1]) > 0.7, sys.argv[1]" "$(summary_field "$tmp/allreduce/summary.json" auc)"

close_auc() {
  "$python" -c "
import sys
a, b = float(sys.argv[1]), float(sys.argv[2])
assert abs(a - b) <= 0.002, f'AUC {a} vs {b}'" "$(summary_field "$tmp/$1/summary.json" auc)" "$(summary_field "$tmp/$2/summary.json" auc)"
}

echo "== dense by allreduce: a server killed mid-run (a few clocks after the checkpoint)"
kill_delay=0.5 run_job allreduce_killed_server "server 1"
close_auc allreduce_killed_server allreduce
check_clocks allreduce_killed_server

echo "== dense by allreduce: a worker killed mid-run (its replacement asks for a rollback)"
run_job allreduce_killed_worker "worker 1"
restarted allreduce_killed_worker "worker 1"
grep -q "rolls back\|rollback" "$tmp/allreduce_killed_worker/scheduler.log"
close_auc allreduce_killed_worker allreduce
check_clocks allreduce_killed_worker
echo "PASS"
