#!/usr/bin/env bash
# Builds and runs Kestrel's serving benchmark (bench/serve_bench.cc): the prediction service under 1..N concurrent
# clients (1..16) at batch sizes 1..256 on a 1M-row model while training pushes rows and publishes a delta every few seconds, against
# kestrel_predict's in-process rate in the same run, and writes bench/results/serve_bench.md. Extra arguments go
# to serve_bench, e.g.
#
#   bench/run_serve_bench.sh                                   # about two minutes
#   bench/run_serve_bench.sh --seconds=1 --clients=1,4 --table_rows=100000 --output=/tmp/quick.md
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

bazel build -c opt //bench:serve_bench
# Ask Bazel for the -c opt output tree: the bazel-bin symlink follows whichever build ran last.
bin="$(bazel info -c opt bazel-bin 2>/dev/null)"

# shellcheck source=bench/bench_env.sh
source bench/bench_env.sh
commit="$(bench_commit)"
invocation="$(bench_invocation bench/run_serve_bench.sh "$@")"

exec "${bin}/bench/serve_bench" \
  --git_commit="${commit}" \
  --invocation="${invocation}" \
  "$@"
