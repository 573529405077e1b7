#!/usr/bin/env bash
# The whole test suite: installs what is missing, builds everything, runs every test, and prints
# "N passed, N failed" (test cases, from the JUnit XML Bazel writes). Exits non-zero on any failure.
# GPU tests are tagged "gpu" and skip with a message where no GPU is present.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

scripts/setup.sh || { echo "0 passed, 1 failed"; exit 1; }

# The package checks (docs/architecture.md, "Source layout"): the star of packages by declared dependencies and
# by every include, and the rooms' sizes and gRPC at the edge. Each counts as one test case.
checks=$(mktemp)
for check in tools/check_layering.py tools/code_shape.py; do
  if python3 "$check" > "$checks.out" 2>&1; then
    tail -n 1 "$checks.out"
    echo "PASSED $check" >> "$checks"
  else
    cat "$checks.out"
    echo "FAILED $check" >> "$checks"
  fi
done

log=$(mktemp)
bazel test //... --keep_going --test_summary=short "$@" 2>&1 | tee "$log"
bazel_rc=${PIPESTATUS[0]}
# The Python package installed with pip into a fresh virtual environment (it runs Bazel itself: not a Bazel
# test), with the suite's build flags so the extension's dependencies come from the build above.
if tests/pip_install_test.sh > "$checks.out" 2>&1; then
  tail -n 1 "$checks.out"
  echo "PASSED tests/pip_install_test.sh" >> "$checks"
else
  cat "$checks.out"
  echo "FAILED tests/pip_install_test.sh" >> "$checks"
fi
python3 scripts/test_summary.py "$log" "$(bazel info bazel-testlogs 2>/dev/null)" "$bazel_rc" "$checks"
