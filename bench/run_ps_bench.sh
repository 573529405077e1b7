#!/usr/bin/env bash
# Builds and runs Kestrel's parameter-server throughput benchmark (bench/ps_bench.cc) and writes
# bench/results/ps_bench.md. Extra arguments go to ps_bench, e.g.
#
#   bench/run_ps_bench.sh                                   # the full default run (a few minutes)
#   bench/run_ps_bench.sh --keys=100000 --dims=16 --clients=1 --output=/tmp/quick.md
#   bench/run_ps_bench.sh --servers=2 --json=bench/results/ps_bench_2servers.json
#   bench/run_ps_bench.sh --servers=2 --replicas=2 --keys=100000 --dims=16 --clients=1 --wire_types=float32 \
#     --tls=false --memory_rows=0 --output=bench/results/ps_bench_replicas.md   # R = 2 against R = 1
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

bazel build -c opt //bench:ps_bench //server:kestrel_server //scheduler:kestrel_scheduler
# Ask Bazel for the -c opt output tree: the bazel-bin symlink follows whichever build ran last.
bin="$(bazel info -c opt bazel-bin 2>/dev/null)"

# shellcheck source=bench/bench_env.sh
source bench/bench_env.sh
commit="$(bench_commit)"
invocation="$(bench_invocation bench/run_ps_bench.sh "$@")"

exec "${bin}/bench/ps_bench" \
  --server_binary="${bin}/server/kestrel_server" \
  --scheduler_binary="${bin}/scheduler/kestrel_scheduler" \
  --git_commit="${commit}" \
  --invocation="${invocation}" \
  "$@"
