#!/usr/bin/env bash
# Builds and runs bench/key_batch_bench (KeyBatch::Build vs the previous std::sort algorithm on training-like
# batches of 512 / 4096 / 32768 samples x 26 fields) and writes bench/results/key_batch_bench.md.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bazel build -c opt //bench:key_batch_bench
bin="$(bazel info -c opt bazel-bin 2>/dev/null)/bench/key_batch_bench"
out=bench/results/key_batch_bench.md
{
  echo "# KeyBatch::Build vs the previous std::sort algorithm"
  echo
  echo "Machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs),"\
       "$(uname -sr), $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)."
  echo "Command: bench/run_key_batch_bench.sh (medians of 5 repetitions; items = input keys, 26 per sample)."
  echo
  echo '```'
  "${bin}" --benchmark_repetitions=5 --benchmark_report_aggregates_only=true --benchmark_min_time=0.2 "$@" 2>&1 |
    grep -E 'Benchmark|----|_median'
  echo '```'
} | tee "${out}"
