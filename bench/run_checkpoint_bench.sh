#!/usr/bin/env bash
# Builds and runs Kestrel's checkpoint benchmark (bench/checkpoint_bench.cc): ShardStore full and incremental
# checkpoints and restore of a 1M-row ADAM table against RocksDB's own batched write rate, and writes
# bench/results/checkpoint_bench.md. Extra arguments go to checkpoint_bench, e.g.
#
#   bench/run_checkpoint_bench.sh                                   # 1M rows, 5 runs (about a minute)
#   bench/run_checkpoint_bench.sh --rows=100000 --runs=3 --output=/tmp/quick.md
#   bench/run_checkpoint_bench.sh --dir=/mnt/nvme --output=bench/results/checkpoint_bench_nvme.md
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

bazel build -c opt //bench:checkpoint_bench
# Ask Bazel for the -c opt output tree: the bazel-bin symlink follows whichever build ran last.
bin="$(bazel info -c opt bazel-bin 2>/dev/null)"

# shellcheck source=bench/bench_env.sh
source bench/bench_env.sh
commit="$(bench_commit)"
invocation="$(bench_invocation bench/run_checkpoint_bench.sh "$@")"

exec "${bin}/bench/checkpoint_bench" \
  --git_commit="${commit}" \
  --invocation="${invocation}" \
  "$@"
