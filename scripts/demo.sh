#!/usr/bin/env bash
# The main job: `kestrel local` runs a local Kestrel cluster (1 scheduler, 2 servers, 2 workers on loopback)
# that trains a model on built-in generated data, checkpointing as it goes, and prints the test AUC / logloss
# next to the planted optimum.
#
#   scripts/demo.sh [deepfm|lr|fm|dlrm] [bsp|ssp|asp]     (defaults: deepfm bsp)
#
# Installs what it needs (scripts/setup.sh), builds with Bazel, generates the data with kestrel_datagen, and
# leaves the run (every process's log, records, checkpoints, summary.json) in demo_out/.
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL="${1:-deepfm}"
CONSISTENCY="${2:-bsp}"
scripts/setup.sh
bazel build -c opt //server:kestrel_server //scheduler:kestrel_scheduler //scheduler:kestrel_ctl \
  //cmd:kestrel_worker //export:kestrel_export //export:kestrel_predict //worker/data:kestrel_datagen
BIN="$(bazel info -c opt bazel-bin)"
OUT=demo_out
rm -rf "$OUT" && mkdir -p "$OUT"
"$BIN/worker/data/kestrel_datagen" --small --out_dir="$OUT/data"
KESTREL_BIN="$BIN" scripts/kestrel local --no_build --servers 2 --workers 2 --consistency "$CONSISTENCY" \
  --config "deploy/jobs/$MODEL.pbtxt" --data "$OUT/data" --run_dir "$OUT/run" --checkpoint_every_clocks 100
