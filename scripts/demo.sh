#!/usr/bin/env bash
# The main job: a local Kestrel cluster (1 scheduler, 2 servers, 2 workers on loopback) training a model on
# built-in generated data, then printing the test figures next to the planted Bayes-optimal ones.
#
#   scripts/demo.sh [lr|deepfm] [bsp|ssp|asp]     (defaults: deepfm bsp)
#
# Installs what it needs (scripts/setup.sh), builds with Bazel, and leaves logs and records in demo_out/.
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL="${1:-deepfm}"
CONSISTENCY="${2:-bsp}"
scripts/setup.sh
bazel build -c opt //server:kestrel_server //scheduler:kestrel_scheduler //worker:kestrel_worker \
  //worker/data:kestrel_datagen
BIN="$(bazel info -c opt bazel-bin)"
OUT=demo_out
rm -rf "$OUT" && mkdir -p "$OUT"
"$BIN/worker/data/kestrel_datagen" --small --out_dir="$OUT/data"

BSP_WORKERS=0
STALENESS=0
[ "$CONSISTENCY" = bsp ] && BSP_WORKERS=2
[ "$CONSISTENCY" = ssp ] && STALENESS=2
pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; }
trap cleanup EXIT
"$BIN/scheduler/kestrel_scheduler" --host=127.0.0.1 --port=0 --port_file="$OUT/scheduler.port" \
  --num_servers=2 --num_workers=2 --consistency="$CONSISTENCY" --staleness="$STALENESS" \
  --checkpoint_dir="$OUT/ckpt" --checkpoint_every_clocks=100 2>"$OUT/scheduler.log" &
pids+=($!)
for _ in $(seq 100); do [ -s "$OUT/scheduler.port" ] && break; sleep 0.1; done
SCHED="127.0.0.1:$(cat "$OUT/scheduler.port")"
for s in 0 1; do
  "$BIN/server/kestrel_server" --host=127.0.0.1 --port=0 --num_shards=2 --shard_index=$s \
    --bsp_workers=$BSP_WORKERS --scheduler="$SCHED" --checkpoint_dir="$OUT/ckpt" 2>"$OUT/server$s.log" &
  pids+=($!)
done
workers=()
for w in 0 1; do
  "$BIN/worker/kestrel_worker" --config="deploy/jobs/$MODEL.pbtxt" --scheduler="$SCHED" --rank=$w \
    --device=auto --train_files="$OUT/data/train.tsv" --test_files="$OUT/data/test.tsv" \
    --metrics_out="$OUT/metrics.jsonl" 2> >(tee "$OUT/worker$w.log" | sed "s/^/[worker $w] /" >&2) &
  workers+=($!)
done
status=0
for p in "${workers[@]}"; do wait "$p" || status=1; done
echo "planted ground truth:"
cat "$OUT/data/truth.txt"
grep '"kind":"eval"' "$OUT/metrics.jsonl" | tail -1
sleep 1  # the scheduler cuts the final checkpoint once every worker is done
echo "checkpoints committed (in $OUT/ckpt):"
grep -h "committed at clock" "$OUT/scheduler.log" | sed 's/^.*checkpoint /  checkpoint /'
exit $status
