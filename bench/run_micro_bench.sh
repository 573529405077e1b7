#!/usr/bin/env bash
# Builds and runs one Google Benchmark binary of bench/ (medians of 5 repetitions) and writes
# bench/results/NAME.md with the machine described. Extra arguments go to the benchmark.
#
#   bench/run_micro_bench.sh key_batch_bench   # KeyBatch::Build vs the earlier radix and std::sort algorithms
#   bench/run_micro_bench.sh bsp_push_bench    # Shard::Push applied on arrival vs BSP aggregation
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

name="${1:?usage: bench/run_micro_bench.sh NAME [benchmark flags]}"
shift
bazel build -c opt "//bench:${name}"
bin="$(bazel info -c opt bazel-bin 2>/dev/null)/bench/${name}"
out="bench/results/${name}.md"
# shellcheck source=bench/bench_env.sh
source bench/bench_env.sh
{
  echo "# ${name}: $(sed -n '1s|^// ||p' "bench/${name}.cc")"
  echo
  echo "Machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs),"\
       "$(uname -sr), $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(bench_commit)."
  echo "Command: $(bench_invocation bench/run_micro_bench.sh "${name}" "$@") (medians of 5 repetitions; see bench/${name}.cc for what an item is)."
  echo
  echo '```'
  "${bin}" --benchmark_repetitions=5 --benchmark_report_aggregates_only=true --benchmark_min_time=0.3 "$@" 2>&1 |
    grep -E 'Benchmark|----|_median'
  echo '```'
} | tee "${out}"
