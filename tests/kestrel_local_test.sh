#!/usr/bin/env bash
# `kestrel local` end to end (the README's main job, shortened): a local cluster of 1 scheduler, 2 servers and
# 2 workers trains DeepFM on generated data to within 0.03 of the planted optimum AUC and commits checkpoints;
# its final checkpoint, exported, scores the test file exactly as the trainer's own evaluation did.
# Then the same job again, once with a server and once with the scheduler killed (SIGKILL) after the first
# checkpoint: the supervisor restarts it (the scheduler with --resume on its address; the members it refuses
# are restarted too), every server restores the checkpoint, and the job ends with the same predictions. With
# --replicas=2 a killed server fails over to its backup instead: no rollback, the same predictions. With --elastic
# and no restarts, a killed worker is removed from the job, which finishes with the other one.
set -euo pipefail

runfiles="${TEST_SRCDIR:-$PWD}/${TEST_WORKSPACE:-kestrel}"
export KESTREL_BIN="$runfiles"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
kestrel=("$runfiles/scripts/kestrel")
# shellcheck source=tests/local_job_kill.sh
source "$runfiles/tests/local_job_kill.sh"

"$runfiles/worker/data/kestrel_datagen" --small --out_dir="$tmp/data" 2>/dev/null
cat >"$tmp/job.pbtxt" <<'JOB'
model { type: DEEPFM embedding_dim: 8 hidden: [64, 32] }
data { format: CRITEO }
train { batch_size: 256 epochs: 2 log_every_steps: 50 }
JOB

summary_field() { python3 -c "import json,sys; print(json.load(open(sys.argv[1])).get(sys.argv[2], ''))" "$1" "$2"; }
check_auc() {
  python3 - "$1" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
assert s["ok"], s
assert s["auc"] > s["optimum_auc"] - 0.03, f"AUC {s['auc']} vs optimum {s['optimum_auc']}"
assert s["checkpoints_committed"] >= 1, s
print(f"AUC {s['auc']:.4f} (optimum {s['optimum_auc']:.4f}), {s['checkpoints_committed']} checkpoints, restarts {s['restarts']}")
PY
}

echo "== the main job, shortened"
"${kestrel[@]}" local --no_build --config="$tmp/job.pbtxt" --data="$tmp/data" --run_dir="$tmp/plain" \
  --device=cpu --compute_threads=1 --checkpoint_every_clocks=100 --heartbeat_interval=300ms
check_auc "$tmp/plain/summary.json"

echo "== over mutual TLS by default: every listener says so"
for log in "$tmp/plain/scheduler.log" "$tmp/plain/server0.log" "$tmp/plain/server1.log"; do
  grep -q "mutual TLS" "$log" || { echo "$log: not serving over mutual TLS"; exit 1; }
done

echo "== the workers' TensorBoard event files read back (TFRecord framing, masked CRC-32C, Event protos)"
python3 - "$tmp/plain/tensorboard" <<'PY'
import glob, struct, sys
POLY = 0x82F63B78
def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (POLY if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF
def masked(data):
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF
files = glob.glob(sys.argv[1] + "/worker*/events.out.tfevents.*")
assert len(files) == 2, files
tags = set()
for path in files:
    data, at, records = open(path, "rb").read(), 0, 0
    while at < len(data):
        header = data[at:at + 8]
        (length,) = struct.unpack("<Q", header)
        assert struct.unpack("<I", data[at + 8:at + 12])[0] == masked(header), f"{path}: bad length crc"
        body = data[at + 12:at + 12 + length]
        assert struct.unpack("<I", data[at + 12 + length:at + 16 + length])[0] == masked(body), f"{path}: bad crc"
        for tag in (b"train/logloss", b"train/examples_per_second", b"eval/auc", b"eval/logloss", b"brain.Event:2"):
            if tag in body:
                tags.add(tag.decode())
        at += 16 + length
        records += 1
    assert records > 3, (path, records)
assert {"train/logloss", "eval/auc", "brain.Event:2"} <= tags, tags
print(f"TensorBoard: {len(files)} event files, tags {sorted(tags)}")
PY

echo "== export the final checkpoint and score the test file with it: the trainer's own evaluation, bit for bit"
"${kestrel[@]}" export --no_build --checkpoint_dir="$tmp/plain/ckpt" --config="$tmp/job.pbtxt" --out="$tmp/model"
# The workers computed with 1 thread each; the GEMM library blocks by the thread count, so the same count
# reproduces their evaluation bit for bit.
"${kestrel[@]}" predict --no_build --compute_threads=1 --model="$tmp/model" --input="$tmp/data/test.tsv" \
  --output="$tmp/scores.txt" \
  >"$tmp/predict.json"
python3 - "$tmp/plain/summary.json" "$tmp/predict.json" "$tmp/scores.txt" <<'PY'
import json, sys
trained = json.load(open(sys.argv[1]))
predicted = json.loads(open(sys.argv[2]).read().strip().splitlines()[-1])
scores = open(sys.argv[3]).read().split()
assert len(scores) == predicted["examples"] == 10000, (len(scores), predicted)
assert predicted["fingerprint"] == trained["fingerprint"], (predicted, trained)
assert abs(predicted["auc"] - trained["auc"]) < 1e-6 and abs(predicted["logloss"] - trained["logloss"]) < 1e-6
print(f"predict: {predicted['examples']} scores, fingerprint {predicted['fingerprint']} = the trainer's evaluation")
PY

# Starts `kestrel local` in $tmp/<name> (extra flags after the name) and kills <victim> (a pids.json name) with
# SIGKILL right after the first checkpoint is committed (tests/local_job_kill.sh); returns once the job has ended.
# run_with_kill: the supervisor restarts the victim and the job must end with the plain run's predictions, bit
# for bit (BSP).
run_and_kill() {
  local name=$1 victim=$2
  "${kestrel[@]}" local --no_build --config="$tmp/job.pbtxt" --data="$tmp/data" --run_dir="$tmp/$name" \
    --device=cpu --compute_threads=1 --checkpoint_every_clocks=100 --heartbeat_interval=300ms "${@:3}" &
  local local_pid=$!
  kill_after_first_checkpoint "$tmp/$name" "$victim"
  wait "$local_pid"
}

run_with_kill() {
  local name=$1 victim=$2
  echo "== $victim killed mid-run ${*:3}"
  run_and_kill "$@"
  check_auc "$tmp/$name/summary.json"
  local restarts
  restarts=$(summary_field "$tmp/$name/summary.json" restarts)
  [[ "$restarts" == *"$victim"* ]] || { echo "$victim was not restarted: $restarts"; exit 1; }
  [[ "$(summary_field "$tmp/$name/summary.json" fingerprint)" == "$(summary_field "$tmp/plain/summary.json" fingerprint)" ]] ||
    { echo "$name: predictions differ from the uninterrupted run"; exit 1; }
}

run_with_kill killed_server "server 1"
grep -q "every server restored" "$tmp/killed_server/scheduler.log" || { echo "no rollback in the scheduler log"; exit 1; }
run_with_kill killed_scheduler "scheduler"
# Two copies of every range: the killed server fails over to its backup, with no rollback.
run_with_kill replicated_server "server 1" --replicas=2
[[ "$(summary_field "$tmp/replicated_server/summary.json" failovers)" == "1" ]] ||
  { echo "replicated: no failover in the scheduler log"; exit 1; }
[[ -z "$(summary_field "$tmp/replicated_server/summary.json" rollbacks)" ]] ||
  { echo "replicated: the job rolled back"; exit 1; }

echo "== worker 1 killed for good in an elastic job (--elastic, no restarts)"
run_and_kill elastic "worker 1" --elastic --elastic_timeout=1s --max_restarts=0
check_auc "$tmp/elastic/summary.json"
[[ "$(summary_field "$tmp/elastic/summary.json" elastic_removals)" == "1" ]] ||
  { echo "elastic: worker 1 was not removed"; exit 1; }
grep -q "elastic: removing server ranks \[\] and worker ranks \[1\]" "$tmp/elastic/scheduler.log" ||
  { echo "elastic: no removal in the scheduler log"; exit 1; }
echo "PASS"
