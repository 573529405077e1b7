#!/usr/bin/env bash
# A live rescale against checkpoint + restore (bench/rescale_bench.cc): how long Scheduler.Scale holds a job
# going from 2 to 3 servers, by table size, against a checkpoint and a restart into 3 servers of the same tables,
# and how long removing a dead worker holds it (in place, against moving every row) -> bench/results/rescale_bench.md.
#
#   bench/run_rescale_bench.sh                                  # 1M and 10M rows of dim 16 (Adagrad)
#   bench/run_rescale_bench.sh --rows=100000 --output=/tmp/quick.md
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bazel build -c opt //bench:rescale_bench //scheduler:kestrel_scheduler //server:kestrel_server
bin="$(bazel info -c opt bazel-bin 2>/dev/null)"
# shellcheck source=bench/bench_env.sh
source bench/bench_env.sh
exec "${bin}/bench/rescale_bench" \
  --scheduler_binary="${bin}/scheduler/kestrel_scheduler" \
  --server_binary="${bin}/server/kestrel_server" \
  --git_commit="$(bench_commit)" \
  --invocation="$(bench_invocation bench/run_rescale_bench.sh "$@")" \
  "$@"
