#!/usr/bin/env bash
# Builds and runs Kestrel's training-throughput benchmark (bench/train_bench.cc): the full cluster on loopback
# (1 scheduler, 2 servers, 2 workers; BSP and ASP) against the single-process trainer on in-process tables.
# Writes bench/results/train_bench.md. Extra arguments go to train_bench, e.g.
#
#   bench/run_train_bench.sh                                   # DeepFM, 3 runs
#   bench/run_train_bench.sh --model=LOGISTIC_REGRESSION --output=bench/results/train_bench_lr.md
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

bazel build -c opt //bench:train_bench //scheduler:kestrel_scheduler //server:kestrel_server //worker:kestrel_worker
bin="$(bazel info -c opt bazel-bin 2>/dev/null)"

# shellcheck source=bench/bench_env.sh
source bench/bench_env.sh
commit="$(bench_commit)"
invocation="$(bench_invocation bench/run_train_bench.sh "$@")"

exec "${bin}/bench/train_bench" \
  --scheduler_binary="${bin}/scheduler/kestrel_scheduler" \
  --server_binary="${bin}/server/kestrel_server" \
  --worker_binary="${bin}/worker/kestrel_worker" \
  --git_commit="${commit}" \
  --invocation="${invocation}" \
  "$@"
