#!/usr/bin/env bash
# Builds and runs Kestrel's copy-on-write checkpoint benchmark (bench/cow_checkpoint_bench.cc): how long a checkpoint
# holds training at 1M and 10M dirty rows (rows written inside the cut vs copy-on-write), training throughput while
# a checkpoint is written vs without, and compact (Q8) checkpoint bytes per row; writes
# bench/results/cow_checkpoint_bench.md. Extra arguments go to cow_checkpoint_bench, e.g.
#
#   bench/run_cow_checkpoint_bench.sh                                   # 1M and 10M rows, 3 runs (about 4 minutes)
#   bench/run_cow_checkpoint_bench.sh --rows=1000000 --runs=1 --output=/tmp/quick.md
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

bazel build -c opt //bench:cow_checkpoint_bench
# Ask Bazel for the -c opt output tree: the bazel-bin symlink follows whichever build ran last.
bin="$(bazel info -c opt bazel-bin 2>/dev/null)"

# shellcheck source=bench/bench_env.sh
source bench/bench_env.sh
commit="$(bench_commit)"
invocation="$(bench_invocation bench/run_cow_checkpoint_bench.sh "$@")"

exec "${bin}/bench/cow_checkpoint_bench" \
  --git_commit="${commit}" \
  --invocation="${invocation}" \
  "$@"
