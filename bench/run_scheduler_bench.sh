#!/usr/bin/env bash
# How far one kestrel_scheduler goes (bench/scheduler_bench.cc): simulated members against the real binary,
# BSP clocks/s and RPC latency against the member count -> bench/results/scheduler_bench.md.
#
#   bench/run_scheduler_bench.sh                                   # 4x16, 32x128, 128x512, 256x2048
#   bench/run_scheduler_bench.sh --members=8x64 --seconds=3 --output=/tmp/quick.md
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bazel build -c opt //bench:scheduler_bench //scheduler:kestrel_scheduler
bin="$(bazel info -c opt bazel-bin 2>/dev/null)"
# shellcheck source=bench/bench_env.sh
source bench/bench_env.sh
exec "${bin}/bench/scheduler_bench" \
  --scheduler_binary="${bin}/scheduler/kestrel_scheduler" \
  --git_commit="$(bench_commit)" \
  --invocation="$(bench_invocation bench/run_scheduler_bench.sh "$@")" \
  "$@"
