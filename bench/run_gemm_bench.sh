#!/usr/bin/env bash
# Builds and runs the GEMM library comparison (bench/gemm_bench.cc): OpenBLAS, Eigen 3.4, oneDNN and the
# hand-written reference loops at the shapes of one MLP training step, in one run. Writes
# bench/results/gemm_bench.md. Extra arguments go to gemm_bench, e.g. --batch=16384 --widths=637,1024,512,256,1
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
scripts/setup.sh
bazel build -c opt //bench:gemm_bench
bin="$(bazel info -c opt bazel-bin 2>/dev/null)"

# shellcheck source=bench/bench_env.sh
source bench/bench_env.sh
exec "${bin}/bench/gemm_bench" --git_commit="$(bench_commit)" \
  --invocation="$(bench_invocation bench/run_gemm_bench.sh "$@")" "$@"
