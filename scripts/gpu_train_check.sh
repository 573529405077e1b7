#!/usr/bin/env bash
# Runs on a lent GPU machine, from the repository root, over a bundle that scripts/gpu_bundle.sh made with
# //cmd:kestrel_worker and //worker/data:kestrel_datagen added: trains the same job with kestrel_worker --local
# on the CPU backend and on the CUDA backend, on generated data, and reports each one's test AUC, logloss,
# prediction fingerprint and examples/s:
#   demo       DeepFM, embedding dim 8, MLP 64-32, batch 512, 200k rows, 2 epochs
#   realistic  DeepFM, embedding dim 16, MLP 256-128, batch 4096, 1M rows, 1 epoch
# Writes $OUT/gpu_train_check.md (and each run's log). Exits non-zero if a run fails or the two backends' test
# AUCs differ by more than 0.002.
#
# Usage (device tool): run(command="scripts/gpu_train_check.sh", carry=["gpu_bundle"])
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
BUNDLE="$PWD/gpu_bundle"
OUT=${OUT:-$(mktemp -d)}
export LD_LIBRARY_PATH="$BUNDLE/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
work=$(mktemp -d)
report="$OUT/gpu_train_check.md"
echo "| size | backend | test AUC | logloss | fingerprint | examples/s |" >"$report"
echo "|---|---|---:|---:|---|---:|" >>"$report"
failed=0
for size in demo realistic; do
  case "$size" in
    demo) rows=200000 model='model { type: DEEPFM embedding_dim: 8 hidden: [64, 32] }'
          train='train { batch_size: 512 epochs: 2 }' ;;
    realistic) rows=1000000 model='model { type: DEEPFM embedding_dim: 16 hidden: [256, 128] }'
               train='train { batch_size: 4096 epochs: 1 }' ;;
  esac
  "$BUNDLE/bin/kestrel_datagen" --train_rows="$rows" --test_rows=100000 --max_vocab=100000 \
    --out_dir="$work/$size" 2>/dev/null || { echo "datagen failed"; exit 1; }
  printf '%s\ndata { format: CRITEO train_files: "%s" test_files: "%s" }\n%s\n' "$model" \
    "$work/$size/train.tsv" "$work/$size/test.tsv" "$train" >"$work/$size.pbtxt"
  aucs=()
  for device in cpu cuda; do
    log="$OUT/${size}_${device}.log"
    if ! timeout 240 "$BUNDLE/bin/kestrel_worker" --local --device="$device" --config="$work/$size.pbtxt" >"$log" 2>&1; then
      echo "FAIL $size on $device"; tail -5 "$log"; failed=1; continue
    fi
    line=$(grep "finished:" "$log" | tail -1)
    auc=$(sed -n 's/.*AUC \([0-9.]*\).*/\1/p' <<<"$line")
    logloss=$(sed -n 's/.*test logloss \([0-9.]*\).*/\1/p' <<<"$line")
    fp=$(sed -n 's/.*fingerprint \([0-9a-f]*\).*/\1/p' <<<"$line")
    eps=$(sed -n 's/.*(\([0-9]*\) examples\/s).*/\1/p' <<<"$line")
    echo "| $size | $device | $auc | $logloss | $fp | $eps |" >>"$report"
    echo "$size $device: $line"
    aucs+=("$auc")
  done
  if [ "${#aucs[@]}" -eq 2 ] && ! awk -v a="${aucs[0]}" -v b="${aucs[1]}" 'BEGIN { d = a - b; exit !(d < 0.002 && d > -0.002) }'; then
    echo "FAIL $size: CPU AUC ${aucs[0]} vs CUDA ${aucs[1]}"; failed=1
  fi
done
cat "$report"
exit "$failed"
