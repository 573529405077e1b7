#!/usr/bin/env bash
# The worker's pipeline ceiling (bench/pipeline_ceiling_bench.cc): realistic DeepFM in one process with the
# model's compute replaced by a stand-in of a given duration, so what the host side feeds is measured without a
# GPU -> bench/results/pipeline_ceiling.md. --before=COMMIT also builds the benchmark at COMMIT (in a temporary git
# worktree) and alternates the two builds round by round, reporting this build / COMMIT within each round. The
# other arguments go to the benchmark (--stand_in_us=0,2840 --runs=3 --parse_threads=N --server_threads=N ...).
#
#   bench/run_pipeline_ceiling_bench.sh --before=f8cc1ad --runs=3
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
command_line=("$@")
before=""
args=()
for arg in "$@"; do
  case "${arg}" in
    --before=*) before="${arg#--before=}" ;;
    *) args+=("${arg}") ;;
  esac
done
bazel build -c opt //bench:pipeline_ceiling_bench
bin="$(bazel info -c opt bazel-bin 2>/dev/null)"
if [[ -n "${before}" ]]; then
  base="$(git rev-parse --verify "${before}^{commit}")"
  work=/tmp/kestrel_pipeline_ceiling_before
  tree="${work}/tree"
  mkdir -p "${work}"
  git worktree remove --force "${tree}" 2>/dev/null || rm -rf "${tree}"
  git worktree add --detach "${tree}" "${base}" > /dev/null
  (cd "${tree}" && bazel build -c opt //bench:pipeline_ceiling_bench)
  cp -L "$(cd "${tree}" && bazel info -c opt bazel-bin 2>/dev/null)/bench/pipeline_ceiling_bench" "${work}/before_bench"
  (cd "${tree}" && bazel shutdown) || true
  git worktree remove --force "${tree}"
  args+=("--baseline_binary=${work}/before_bench" "--baseline_label=${base:0:7}")
fi
# shellcheck source=bench/bench_env.sh
source bench/bench_env.sh
"${bin}/bench/pipeline_ceiling_bench" --git_commit="$(bench_commit)" \
  --invocation="$(bench_invocation bench/run_pipeline_ceiling_bench.sh "${command_line[@]}")" "${args[@]}"
