#!/usr/bin/env bash
# Builds and runs the bounded-table benchmark (bench/bounded_table_bench.cc): memory over time against the
# budget (plot), pull/push keys/s at memory hit ratios 100/90/50% against the all-in-memory table (the disk
# tier's files in the page cache, read through RocksDB instead, and not cached) with the index's memory per disk
# row, admission and eviction cost. Writes bench/results/bounded_tables.{md,svg}. Extra arguments go to
# bounded_table_bench, e.g.
#
#   bench/run_bounded_table_bench.sh                          # about nine minutes on 2 cores
#   bench/run_bounded_table_bench.sh --sections=2             # hit ratios alone (about five), the rest kept
#   bench/run_bounded_table_bench.sh --rows=200000 --runs=3 --stream_pushes=500 --output=/tmp/quick.md
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

bazel build -c opt //bench:bounded_table_bench
# Ask Bazel for the -c opt output tree: the bazel-bin symlink follows whichever build ran last.
bin="$(bazel info -c opt bazel-bin 2>/dev/null)"

# shellcheck source=bench/bench_env.sh
source bench/bench_env.sh
commit="$(bench_commit)"
invocation="$(bench_invocation bench/run_bounded_table_bench.sh "$@")"

exec "${bin}/bench/bounded_table_bench" \
  --git_commit="${commit}" \
  --invocation="${invocation}" \
  "$@"
