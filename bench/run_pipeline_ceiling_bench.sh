#!/usr/bin/env bash
# The worker's pipeline ceiling (bench/pipeline_ceiling_bench.cc): realistic DeepFM in one process with the
# model's compute replaced by a stand-in of a given duration, so what the host side feeds is measured without a
# GPU -> bench/results/pipeline_ceiling.md. Arguments go to the benchmark (--stand_in_us=0,2840 --runs=3 ...).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
command_line=("$@")
bazel build -c opt //bench:pipeline_ceiling_bench
bin="$(bazel info -c opt bazel-bin 2>/dev/null)"
# shellcheck source=bench/bench_env.sh
source bench/bench_env.sh
"${bin}/bench/pipeline_ceiling_bench" --git_commit="$(bench_commit)" \
  --invocation="$(bench_invocation bench/run_pipeline_ceiling_bench.sh "${command_line[@]}")" "$@"
