#!/usr/bin/env bash
# Preset parity: the Criteo and libsvm presets of the feature schema train exactly what the dedicated readers
# trained. Trains LR, FM, DeepFM and DLRM in one process (kestrel_worker --local, 3 epochs) on the demo data
# (kestrel_datagen --small) and on the same data written as libsvm, with two builds of kestrel_worker — a
# baseline built from an older commit and the current one — and compares the final test AUC and prediction
# fingerprints. Writes bench/results/preset_parity.md.
#
#   [BASE_LABEL="built at <commit>"] bench/run_preset_parity.sh BASE_BIN_DIR NEW_BIN_DIR
# Each dir holds kestrel_worker; NEW_BIN_DIR also kestrel_datagen. Build the baseline with e.g.
#   git worktree add /tmp/base/src <commit> && (cd /tmp/base/src && bazel build //cmd:kestrel_worker)
# The current build trains the last partial batch by default; the runs set train.drop_last so both read the
# same lines (the demo's 80k lines fill whole batches of 256 anyway). DLRM's default embedding initializer
# differs between the builds (bench/results/dlrm_defaults.md), so every run names NORMAL(0, 0.01): the readers
# are compared, not the defaults.
set -euo pipefail
cd "$(dirname "$0")/.."
BASE="$1"
NEW="$2"
OUT="$(mktemp -d /tmp/preset_parity.XXXXXX)"
trap 'rm -rf "$OUT"' EXIT
"$NEW/kestrel_datagen" --small --out_dir="$OUT/data" >/dev/null
# libsvm: label, a constant feature at index 0, integer j at index 1 + j (log1p value, absent when missing),
# categorical f's token at 100 + f * 1000003 + (token mod 1000003) with value 1.
python3 - "$OUT/data" <<'PY'
import math, sys
d = sys.argv[1]
for split in ("train", "test"):
    with open(f"{d}/{split}.tsv") as src, open(f"{d}/{split}.svm", "w") as dst:
        for line in src:
            c = line.rstrip("\n").split("\t")
            feats = ["0:1"]
            for j in range(13):
                if c[1 + j] != "":
                    feats.append(f"{1 + j}:{math.log1p(max(int(c[1 + j]), 0)):.6g}")
            for f in range(26):
                t = c[14 + f]
                if t != "":
                    feats.append(f"{100 + f * 1000003 + int(t, 16) % 1000003}:1")
            dst.write(c[0] + " " + " ".join(feats) + "\n")
PY
config() {  # model format drop_last
  local extra="" init="embedding_initializer { type: NORMAL stddev: 0.01 }"
  [ "$3" = 1 ] && extra="drop_last: true"
  if [ "$2" = criteo ]; then
    printf 'model { type: %s embedding_dim: 8 hidden: [64, 32] %s }\ndata { format: CRITEO train_files: "%s/data/train.tsv" test_files: "%s/data/test.tsv" }\ntrain { batch_size: 256 epochs: 3 log_every_steps: 1000 %s }\n' "$1" "$init" "$OUT" "$OUT" "$extra"
  else
    printf 'model { type: %s embedding_dim: 8 hidden: [64, 32] %s }\ndata { format: LIBSVM libsvm_slots: 64 train_files: "%s/data/train.svm" test_files: "%s/data/test.svm" }\ntrain { batch_size: 256 epochs: 3 log_every_steps: 1000 %s }\n' "$1" "$init" "$OUT" "$OUT" "$extra"
  fi
}
run() {  # bin model format drop_last -> "auc fingerprint"
  local name
  name="$OUT/$(basename "$(dirname "$1/x")")_$2_$3_$4"
  config "$2" "$3" "$4" > "$name.pbtxt"
  "$1/kestrel_worker" --local --device=cpu --compute_threads=1 --config="$name.pbtxt" \
    --metrics_out="$name.jsonl" > "$name.log" 2>&1 || { tail -5 "$name.log" >&2; echo "FAILED"; return; }
  python3 -c '
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1]) if "\"eval\"" in l][-1]
print("%.9f %s" % (ev["auc"], ev["fingerprint"]))' "$name.jsonl"
}
RESULT=bench/results/preset_parity.md
{
  echo "# Preset parity: Criteo and libsvm through the feature schema vs the dedicated readers"
  echo
  echo "\`bench/run_preset_parity.sh $BASE $NEW\`, $(date -u +%Y-%m-%d), $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs))."
  echo "Baseline: ${BASE_LABEL:-$BASE}; current: the tree at $(git rev-parse --short HEAD)$(git diff --quiet || echo -dirty)."
  echo "kestrel_worker --local, 1 compute thread, demo data (kestrel_datagen --small: 80k train, 10k test), 3 epochs, batch 256."
  echo
  echo "| format | model | baseline AUC | current AUC | abs diff | fingerprints |"
  echo "|---|---|---|---|---|---|"
} > "$RESULT.tmp"
for format in criteo libsvm; do
  for model in LOGISTIC_REGRESSION FM DEEPFM DLRM; do
    read -r base_auc base_fp <<< "$(run "$BASE" "$model" "$format" 0)"
    read -r new_auc new_fp <<< "$(run "$NEW" "$model" "$format" 1)"
    diff=$(python3 -c "print('%.2g' % abs(float('$base_auc') - float('$new_auc')))" 2>/dev/null || echo "n/a")
    same=$([ "$base_fp" = "$new_fp" ] && echo "equal" || echo "differ")
    echo "| $format | $model | $base_auc | $new_auc | $diff | $same |" | tee -a "$RESULT.tmp"
  done
done
mv "$RESULT.tmp" "$RESULT"
echo "wrote $RESULT"
