#!/usr/bin/env bash
# `kestrel_worker --local` as a new user meets it: one process trains, writes the test files' predictions and an
# export that kestrel_predict scores to the same bits; --metrics_out starts empty unless --metrics_append; and a
# job that cannot train (bad flags, config or data) exits 2 naming the problem before training starts.
set -euo pipefail

runfiles="${TEST_SRCDIR:-$PWD}/${TEST_WORKSPACE:-kestrel}"
worker="$runfiles/cmd/kestrel_worker"
predict="$runfiles/export/kestrel_predict"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
fail() {
  echo "FAIL: $*"
  exit 1
}

"$runfiles/worker/data/kestrel_datagen" --train_rows=20000 --test_rows=4000 --max_vocab=2000 \
  --out_dir="$tmp/data" 2>/dev/null
cat >"$tmp/job.pbtxt" <<JOB
model { type: DEEPFM embedding_dim: 4 hidden: [16] }
data { format: CRITEO train_files: "$tmp/data/train.tsv" test_files: "$tmp/data/test.tsv" }
train { batch_size: 256 epochs: 1 log_every_steps: 20 }
JOB
local_run() { "$worker" --local --config="$tmp/job.pbtxt" --device=cpu --compute_threads=1 "$@"; }
records_of() { grep -c "\"kind\":\"$2\"" "$1" || true; }

echo "== one process trains, scores the test files and exports (two in-process servers: their rows merged)"
local_run --local_servers=2 --metrics_out="$tmp/metrics.jsonl" --predictions_out="$tmp/local.txt" \
  --export_dir="$tmp/model" 2>"$tmp/local.log" || fail "the local run failed: $(tail -5 "$tmp/local.log")"
[[ $(wc -l <"$tmp/local.txt") -eq 4000 ]] || fail "$(wc -l <"$tmp/local.txt") predictions for 4000 test rows"
"$predict" --model="$tmp/model" --input="$tmp/data/test.tsv" --output="$tmp/predict.txt" --device=cpu \
  --compute_threads=1 >"$tmp/predict.json" 2>"$tmp/predict.log" || fail "kestrel_predict: $(tail -3 "$tmp/predict.log")"
cmp -s "$tmp/local.txt" "$tmp/predict.txt" || fail "kestrel_predict on the export scores otherwise than the trainer"
eval_fingerprint="$(grep '"kind":"eval"' "$tmp/metrics.jsonl" | tail -1 | sed -E 's/.*"fingerprint":"([0-9a-f]+)".*/\1/')"
grep -q "\"fingerprint\":\"$eval_fingerprint\"" "$tmp/predict.json" ||
  fail "the export's fingerprint $(cat "$tmp/predict.json") is not the evaluation's $eval_fingerprint"
echo "predictions and export agree bit for bit (fingerprint $eval_fingerprint)"

echo "== libsvm with 85 features per line and the default config: train, score, export; the export scores alone"
python3 - "$tmp" <<'PY'
import random, sys
random.seed(7)
for split, rows in (("train", 3000), ("test", 600)):
    with open(f"{sys.argv[1]}/wide85_{split}.svm", "w") as out:
        for _ in range(rows):
            idx = [a * 8 + random.randrange(8) for a in range(85)]  # index 0 is a real feature
            label = "+1" if (idx[0] + idx[1]) % 3 == 0 else "-1"
            out.write(label + " " + " ".join(f"{i}:1" for i in idx) + "\n")
PY
cat >"$tmp/wide85.pbtxt" <<JOB
model { type: DEEPFM }
data { format: LIBSVM train_files: "$tmp/wide85_train.svm" test_files: "$tmp/wide85_test.svm" }
JOB
"$worker" --local --config="$tmp/wide85.pbtxt" --device=cpu --compute_threads=1 --predictions_out="$tmp/wide85.txt" \
  --export_dir="$tmp/wide85_model" 2>"$tmp/wide85.log" || fail "the libsvm run failed: $(tail -5 "$tmp/wide85.log")"
[[ $(wc -l <"$tmp/wide85.txt") -eq 600 ]] || fail "$(wc -l <"$tmp/wide85.txt") predictions for 600 test rows"
grep -q "libsvm_slots: 85" "$tmp/wide85_model/MODEL" || fail "the export does not pin the 85 counted slots"
mv "$tmp/wide85_train.svm" "$tmp/wide85_train.moved"  # scoring an export needs no training file
"$predict" --model="$tmp/wide85_model" --input="$tmp/wide85_test.svm" --output="$tmp/wide85_predict.txt" \
  --device=cpu --compute_threads=1 >/dev/null 2>"$tmp/wide85_predict.log" ||
  fail "kestrel_predict on the libsvm export: $(tail -3 "$tmp/wide85_predict.log")"
cmp -s "$tmp/wide85.txt" "$tmp/wide85_predict.txt" || fail "the libsvm export scores otherwise than the trainer"
echo "85 features per line: trained, scored and exported with the default config"

echo "== --metrics_out starts empty; --metrics_append adds"
local_run --metrics_out="$tmp/metrics.jsonl" 2>/dev/null || fail "second run"
[[ $(records_of "$tmp/metrics.jsonl" "done") -eq 1 ]] || fail "--metrics_out kept an earlier run's records"
local_run --metrics_out="$tmp/metrics.jsonl" --metrics_append 2>/dev/null || fail "third run"
[[ $(records_of "$tmp/metrics.jsonl" "done") -eq 2 ]] || fail "--metrics_append lost an earlier run's records"

# expect_config_error NAME PATTERN ARGS...: exit 2, the log matching PATTERN, nothing trained.
expect_config_error() {
  local name="$1" pattern="$2"
  shift 2
  local code=0
  "$worker" --device=cpu --compute_threads=1 "$@" >"$tmp/$name.log" 2>&1 || code=$?
  [[ $code -eq 2 ]] || fail "$name: exit $code, expected 2: $(tail -3 "$tmp/$name.log")"
  grep -q -- "$pattern" "$tmp/$name.log" || fail "$name: the log does not name the problem ($pattern): $(tail -3 "$tmp/$name.log")"
  if grep -q "iterations of" "$tmp/$name.log"; then fail "$name: training started before the problem was found"; fi
  echo "ok: $name exits 2: $(grep -- "$pattern" "$tmp/$name.log" | head -1 | sed -E 's/^[^]]*\] //')"
}

echo "== problems found before training, exit 2"
printf '1 1:1 2:1 3:0.5\n0 4:1\n' >"$tmp/wide.svm"
cat >"$tmp/libsvm.pbtxt" <<JOB
model { type: LOGISTIC_REGRESSION }
data { format: LIBSVM libsvm_slots: 2 train_files: "$tmp/wide.svm" test_files: "$tmp/wide.svm" }
JOB
expect_config_error slots "wide.svm:1.*libsvm_slots" --local --config="$tmp/libsvm.pbtxt"
expect_config_error format "wide.svm:1" --local --config="$tmp/job.pbtxt" --train_files="$tmp/wide.svm"
expect_config_error missing_file "$tmp/absent.tsv" --local --config="$tmp/job.pbtxt" --test_files="$tmp/absent.tsv"
echo 'model { type: DEEPFM' >"$tmp/broken.pbtxt"
expect_config_error broken_config "not a valid JobConfig" --local --config="$tmp/broken.pbtxt"
expect_config_error export_exists "already holds an export" --local --config="$tmp/job.pbtxt" --export_dir="$tmp/model"
expect_config_error predictions_dir "cannot create" --local --config="$tmp/job.pbtxt" \
  --predictions_out="$tmp/no_such_dir/scores.txt"
expect_config_error cluster_export "are for --local runs" --config="$tmp/job.pbtxt" --scheduler=127.0.0.1:1 \
  --rank=0 --predictions_out="$tmp/x.txt"
echo "PASS"
