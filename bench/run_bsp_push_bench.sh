#!/usr/bin/env bash
# Builds and runs bench/bsp_push_bench (Shard::Push applied on arrival vs BSP aggregation with 1 and 2 workers,
# 1e5 keys x 16 floats) and writes bench/results/bsp_push_bench.md.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bazel build -c opt //bench:bsp_push_bench
bin="$(bazel info -c opt bazel-bin 2>/dev/null)/bench/bsp_push_bench"
out=bench/results/bsp_push_bench.md
{
  echo "# Shard::Push: applied on arrival (arg 0) vs BSP aggregation with 1 and 2 workers (args 1, 2)"
  echo
  echo "Machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs),"\
       "$(uname -sr), $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)."
  echo "Command: bench/run_bsp_push_bench.sh (medians of 5 repetitions; items = keys pushed by all workers)."
  echo
  echo '```'
  "${bin}" --benchmark_repetitions=5 --benchmark_report_aggregates_only=true --benchmark_min_time=0.3 "$@" 2>&1 |
    grep -E 'Benchmark|----|_median'
  echo '```'
} | tee "${out}"
