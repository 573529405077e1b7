#!/usr/bin/env bash
# A cluster job with a validation split ends with its best validation's model (`kestrel local`): the scheduler
# keeps a checkpoint at every validation's clock (--checkpoint_at_clocks, from kestrel_worker
# --validation_clocks_for), and the launcher exports the best one and scores the test file with it. On data small
# enough to overfit, DeepFM's validation logloss turns up after a few epochs; the job's export then scores the
# test file bit for bit as the same job stopped at that epoch by hand does (BSP, 2 servers, 2 workers).
set -euo pipefail

runfiles="${TEST_SRCDIR:-$PWD}/${TEST_WORKSPACE:-kestrel}"
export KESTREL_BIN="$runfiles"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
kestrel=("$runfiles/scripts/kestrel")

"$runfiles/worker/data/kestrel_datagen" --small --out_dir="$tmp/data" 2>/dev/null
head -n 20000 "$tmp/data/train.tsv" >"$tmp/train.tsv"
head -n 5000 "$tmp/data/test.tsv" >"$tmp/test.tsv"
job() {  # $1: epochs, $2: early_stopping_patience
  cat <<JOB
model { type: DEEPFM embedding_dim: 8 hidden: [64, 32] }
data { format: CRITEO validation_every: 5 }
train { batch_size: 256 epochs: $1 early_stopping_patience: $2 log_every_steps: 50 }
JOB
}
job 5 2 >"$tmp/job.pbtxt"
run() {  # $1: run name, then kestrel local flags
  local name=$1
  shift
  "${kestrel[@]}" local --no_build --train_files="$tmp/train.tsv" --test_files="$tmp/test.tsv" \
    --run_dir="$tmp/$name" --device=cpu --compute_threads=1 --heartbeat_interval=300ms "$@"
}

echo "== 5 epochs, validated after each: the best validation's checkpoint is the job's model"
run best --config="$tmp/job.pbtxt"
best_epochs=$(python3 - "$tmp/best/summary.json" "$tmp/best/ckpt" <<'PY'
import json, os, re, sys
s = json.load(open(sys.argv[1]))
assert s["ok"], s
steps = [v["step"] for v in s["validation"]]
per_epoch = steps[0]
assert steps == [per_epoch * (e + 1) for e in range(5)], steps
losses = [v["logloss"] for v in s["validation"]]
best = steps[losses.index(min(losses))]
assert s["step"] == best < steps[-1], (s["step"], best, steps, "the data must overfit before the last epoch")
assert s["last_model"]["step"] == steps[-1], s["last_model"]
# Every validation clock's checkpoint was kept, whatever --keep_checkpoints says.
clocks = set()
for name in os.listdir(sys.argv[2]):
    manifest = os.path.join(sys.argv[2], name, "MANIFEST")
    if os.path.isfile(manifest):
        clocks.add(int(re.search(r"^clock: (\d+)$", open(manifest).read(), re.M).group(1)))
assert set(steps[:-1]) <= clocks, (steps, sorted(clocks))
print(f"validation logloss by epoch {losses}: best after step {best} of {steps[-1]}, "
      f"AUC {s['auc']:.4f} (the last model's {s['last_model']['auc']:.4f}); checkpoints at {sorted(clocks)}",
      file=sys.stderr)
print(best // per_epoch)
PY
)
grep -q "a listed clock" "$tmp/best/scheduler.log"

echo "== the same job stopped after epoch $best_epochs by hand, exported"
job "$best_epochs" -1 >"$tmp/hand.pbtxt"
run hand --config="$tmp/hand.pbtxt" --export="$tmp/hand_model"
"${kestrel[@]}" predict --no_build --compute_threads=1 --model="$tmp/best/best_model" --input="$tmp/test.tsv" \
  --output="$tmp/best_scores.txt" >"$tmp/best_predict.json"
"${kestrel[@]}" predict --no_build --compute_threads=1 --model="$tmp/hand_model" --input="$tmp/test.tsv" \
  --output="$tmp/hand_scores.txt" >"$tmp/hand_predict.json"
cmp "$tmp/best_scores.txt" "$tmp/hand_scores.txt"
python3 - "$tmp/best/summary.json" "$tmp/hand/summary.json" "$tmp/hand_predict.json" <<'PY'
import json, sys
best, hand = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
predicted = json.loads(open(sys.argv[3]).read().strip().splitlines()[-1])
assert best["fingerprint"] == hand["fingerprint"] == predicted["fingerprint"], (best, hand, predicted)
assert best["auc"] == predicted["auc"] and best["logloss"] == predicted["logloss"], (best, predicted)
assert "best_model" not in hand, hand
print(f"the best validation's model = the job stopped by hand: fingerprint {best['fingerprint']}, "
      f"AUC {best['auc']:.4f}")
PY
echo "PASS"
