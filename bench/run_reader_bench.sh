#!/usr/bin/env bash
# Builds and runs Kestrel's reader benchmark (bench/reader_bench.cc): the schema reader's rows/s and MB/s per core
# on a TSV with a 50-long history column, the Criteo preset through the schema parser, and the dedicated Criteo
# parser, and writes bench/results/reader_bench.md. Extra arguments go to reader_bench, e.g.
#
#   bench/run_reader_bench.sh                                   # 200000 rows per file, 5 runs (about a minute)
#   bench/run_reader_bench.sh --rows=50000 --runs=3 --output=/tmp/quick.md
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

bazel build -c opt //bench:reader_bench
# Ask Bazel for the -c opt output tree: the bazel-bin symlink follows whichever build ran last.
bin="$(bazel info -c opt bazel-bin 2>/dev/null)"

# shellcheck source=bench/bench_env.sh
source bench/bench_env.sh
commit="$(bench_commit)"
invocation="$(bench_invocation bench/run_reader_bench.sh "$@")"

exec "${bin}/bench/reader_bench" \
  --git_commit="${commit}" \
  --invocation="${invocation}" \
  "$@"
