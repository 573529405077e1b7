#!/usr/bin/env bash
# A job that follows a growing directory, end to end: `kestrel local` trains the files of a directory as they
# arrive (renamed in, in name order) while kestrel_publish publishes its checkpoints as a chain of exports; a
# worker dies (SIGKILL) mid-file, before pushing iteration 16 of the 20 its first two files make (a fault point,
# so the death is mid-file however fast the workers run; 16 ends a lease, so the scheduler holds the worker's
# state at 16), and its replacement resumes from the reader position it reported there; `kestrel stop` ends the stream after the files present (a file added after it is not trained).
# Every line of every file is trained exactly once (the workers' line logs, the last run of each clock), and the
# served model (kestrel_serve following the serving directory, asked through the Python client) scores every
# test example bit for bit as kestrel_predict does with the newest export of the chain.
set -euo pipefail

runfiles="${TEST_SRCDIR:-$PWD}/${TEST_WORKSPACE:-kestrel}"
bin="$runfiles"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
run="$tmp/run"
in="$tmp/in"
fail() {
  echo "FAIL: $*"
  for f in "$run"/scheduler.log "$run"/worker0.log "$run"/worker1.log "$tmp"/publish.log "$tmp"/serve.log; do
    [[ -f "$f" ]] && { echo "== $f"; tail -n 15 "$f"; }
  done
  exit 1
}
"$bin/worker/data/kestrel_datagen" --train_rows=12000 --test_rows=1500 --max_vocab=800 --out_dir="$tmp/data" 2>/dev/null
mkdir -p "$in"
# part-00 .. part-05, 2000 lines each: 10 iterations of 2 workers' batches of 100, so that the clocks where
# workers report their state (leases of 8) fall mid-file.
split -l 2000 -d "$tmp/data/train.tsv" "$tmp/part-"
add() { mv "$tmp/part-$1" "$in/part-$1"; }           # a rename: complete when it appears
add 00
add 01
cat >"$tmp/job.pbtxt" <<JOB
model { type: DEEPFM embedding_dim: 4 hidden: [16] }
data { format: CRITEO train_stream: "$in" stream_poll_ms: 50 test_files: "$tmp/data/test.tsv" }
train { batch_size: 100 log_every_steps: 4 }
JOB

export KESTREL_BIN="$bin"
# One worker (whichever gets there first) dies before its 17th push: iteration 16, mid part-01; its replacement
# (which inherits the environment) does not (common/fault_injection.h).
KESTREL_FAULT_POINT=worker.push.before@17 KESTREL_FAULT_ONCE="$tmp/died" "$runfiles/scripts/kestrel" local --no_build --config="$tmp/job.pbtxt" --servers 2 --workers 2 --device cpu \
  --compute_threads 1 --run_dir "$run" --checkpoint_every_clocks 4 --line_logs >"$tmp/local.log" 2>&1 &
job=$!
"$bin/serving/kestrel_publish" --checkpoint_dir="$run/ckpt" --config="$tmp/job.pbtxt" --serving_dir="$tmp/serving" \
  --poll=200ms --full_every=4 >"$tmp/publish.log" 2>&1 &
publisher=$!
trap 'kill $job $publisher 2>/dev/null || true; [[ -n "${serve:-}" ]] && kill $serve 2>/dev/null || true' EXIT

for _ in $(seq 600); do grep -q "restarting it" "$tmp/local.log" && break; sleep 0.1; done
grep -q "restarting it" "$tmp/local.log" || fail "no worker died at the fault point: $(tail -n 5 "$tmp/local.log")"
add 02
add 03
"$runfiles/scripts/kestrel" stop --no_build "$in" >"$tmp/stop.txt" || fail "kestrel stop"
[[ "$(cat "$tmp/stop.txt")" == "part-03" ]] || fail "kestrel stop named $(cat "$tmp/stop.txt"), not part-03"
add 04  # after the stop: never trained
code=0
wait "$job" || code=$?
[[ $code -eq 0 ]] || fail "the job exited $code: $(tail -n 5 "$tmp/local.log")"
grep -q "fault injection: dying at worker.push.before" "$run"/worker*.log || fail "no worker died at the fault point"
grep -q "resumes .*part-01 (epoch 1) for iteration 16" "$run"/worker*.log ||
  fail "no worker resumed mid-file from its saved position"
kill -TERM "$publisher"
wait "$publisher" || fail "kestrel_publish exited $?"

echo "== every line of part-00 .. part-03 trained exactly once"
/usr/bin/python3 - "$run" <<'PY' || fail "the line logs"
import collections, sys
run = sys.argv[1]
last = {}  # (worker, clock) -> (epoch, lines): a clock run again after the rollback replaces its first run
for w in (0, 1):
    for line in open(f"{run}/worker{w}.lines"):
        f = line.split()
        last[(w, int(f[0]))] = (int(f[1]), [int(x) for x in f[2:]])
seen = collections.Counter((e, l) for e, lines in last.values() for l in lines)
want = {(e, l) for e in range(4) for l in range(2000)}
assert set(seen) == want, f"lines trained: {len(seen)}, files {sorted({e for e, _ in seen})}; want 4 x 2000"
assert max(seen.values()) == 1, [k for k, n in seen.items() if n > 1][:5]
clocks = sorted({c for _, c in last})
assert clocks == list(range(len(clocks))), "a clock is missing"
print(f"{len(seen)} lines over {len(clocks)} clocks, each once")
PY

echo "== the served model scores as kestrel_predict on the newest export of the chain"
newest="$(sed -nE 's/^  dir: "(.*)"$/\1/p' "$tmp/serving/MANIFEST" | tail -n 1)"
entries="$(grep -c '^entries' "$tmp/serving/MANIFEST")"
[[ -n "$newest" && $entries -ge 2 ]] || fail "the manifest lists $entries exports: $(cat "$tmp/serving/MANIFEST")"
grep -q "full: true" "$tmp/serving/MANIFEST" || fail "no full export in the manifest"
"$bin/export/kestrel_predict" --model="$tmp/serving/$newest" --input="$tmp/data/test.tsv" --output="$tmp/predict.txt" \
  --device=cpu --compute_threads=1 >/dev/null 2>"$tmp/predict.log" || fail "kestrel_predict: $(tail -3 "$tmp/predict.log")"
"$bin/serving/kestrel_serve" --serving_dir="$tmp/serving" --address=127.0.0.1:0 --port_file="$tmp/port" \
  --compute_threads=1 --poll_ms=100 2>"$tmp/serve.log" &
serve=$!
for _ in $(seq 200); do [[ -s "$tmp/port" ]] && break; sleep 0.1; done
[[ -s "$tmp/port" ]] || fail "kestrel_serve did not start"
PYTHONPATH="$runfiles/python/site" /usr/bin/python3 - "$tmp" "127.0.0.1:$(cat "$tmp/port")" "$newest" <<'PY' ||
import sys
import kestrel
tmp, address, newest = sys.argv[1:4]
client = kestrel.PredictClient(address)
lines = [line.rstrip("\n") for line in open(f"{tmp}/data/test.tsv")]
scores, model = [], None
for at in range(0, len(lines), 300):
    answer = client.predict(lines[at:at + 300])
    scores += ["%.9g" % s for s in answer["scores"].tolist()]
    model = answer["model"]
assert model == newest, (model, newest)
expected = [line.strip() for line in open(f"{tmp}/predict.txt")]
assert scores == expected, f"{sum(a != b for a, b in zip(scores, expected))} of {len(expected)} scores differ"
print(f"{len(scores)} served scores of {newest} equal kestrel_predict's bit for bit")
PY
  fail "serving"
echo "PASS"
