#!/usr/bin/env bash
# Recovery soak: runs tests/recovery_test with many random kill trials per role (servers and workers killed
# with SIGKILL at random moments, every checkpoint phase crashed, every kind of checkpoint file damaged).
# Every trial must end with parameters bitwise identical to an uninterrupted BSP run. Not part of CI.
#
#   scripts/recovery_soak.sh [TRIALS]     # default 20 trials per role
set -euo pipefail
cd "$(dirname "$0")/.."
trials="${1:-20}"
bazel test //tests:recovery_test --test_env=KESTREL_RECOVERY_TRIALS="${trials}" --test_timeout=7200 \
  --test_output=errors --cache_test_results=no
