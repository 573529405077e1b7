#!/usr/bin/env bash
# Builds and runs Kestrel's parameter-server throughput benchmark (bench/ps_bench.cc) and writes
# bench/results/ps_bench.md. Extra arguments go to ps_bench, e.g.
#
#   bench/run_ps_bench.sh                                   # the full default run (a few minutes)
#   bench/run_ps_bench.sh --keys=100000 --dims=16 --clients=1 --output=/tmp/quick.md
#   bench/run_ps_bench.sh --servers=2 --json=bench/results/ps_bench_2servers.json
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

bazel build -c opt //bench:ps_bench //server:kestrel_server
# Ask Bazel for the -c opt output tree: the bazel-bin symlink follows whichever build ran last.
bin="$(bazel info -c opt bazel-bin 2>/dev/null)"

commit="$(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
# GIT_OPTIONAL_LOCKS=0: status must not write the index (others may be using this checkout).
if [[ "${commit}" != unknown && -n "$(GIT_OPTIONAL_LOCKS=0 git status --porcelain --untracked-files=no 2>/dev/null)" ]]; then
  commit="${commit}-dirty"
fi

invocation="bench/run_ps_bench.sh"
for arg in "$@"; do
  invocation+=" $(printf '%q' "${arg}")"
done

exec "${bin}/bench/ps_bench" \
  --server_binary="${bin}/server/kestrel_server" \
  --git_commit="${commit}" \
  --invocation="${invocation}" \
  "$@"
