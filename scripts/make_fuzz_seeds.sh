#!/usr/bin/env bash
# Regenerates the fuzz targets' seed corpora (tests/fuzz_corpus/<target>/seed-*) with tests/fuzz_seeds.cc, after a
# change to a target's input framing. Regression inputs (tests/fuzz_corpus/<target>/regressions/) are kept.
set -euo pipefail
cd "$(dirname "$0")/.."
bazel run //tests:fuzz_seeds -- "$PWD/tests/fuzz_corpus"
