#!/usr/bin/env bash
# Compact checkpoints (bench/compact_checkpoint_bench.py says what is measured): the realistic DeepFM 2+2 BSP job
# run by `kestrel local` with fp32 and with Q8 embedding checkpoints (ModelConfig.embedding_checkpoint_codec),
# each uninterrupted and with server 1 killed after a checkpoint mid-training; test AUC and prediction fingerprints,
# and the bytes each checkpoint writes per row (manifests, and a scan of the final checkpoint per table)
# -> bench/results/compact_checkpoint.md. About 3 minutes on 2 cores.
#
#   bench/run_compact_checkpoint_bench.sh [--checkpoint_every_clocks=50] [--kill_after_clock=100]
#       [--kill_delay=0.5] [--train_rows=1000000] [--work_dir=DIR] [--output=FILE]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bazel build -c opt //scheduler:kestrel_scheduler //server:kestrel_server //cmd:kestrel_worker \
  //worker/data:kestrel_datagen
bin="$(bazel info -c opt bazel-bin 2>/dev/null)"
# shellcheck source=bench/bench_env.sh
source bench/bench_env.sh
python3 bench/compact_checkpoint_bench.py --bin="${bin}" --kestrel=scripts/kestrel --commit="$(bench_commit)" \
  --invocation="$(bench_invocation bench/run_compact_checkpoint_bench.sh "$@")" "$@"
