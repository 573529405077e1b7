#!/usr/bin/env bash
# Network soak: the job on hosts of its own (kestrel local --hosts) under seeded random partition schedules
# (tests/network_faults.py chaos), seeds 1..N. Every seed must end bitwise identical to the uninterrupted run.
# Needs root and network namespaces. Not part of CI.
#
#   scripts/network_soak.sh [SEEDS]     # default 20
set -euo pipefail
cd "$(dirname "$0")/.."
seeds="${1:-20}"
bazel build -c opt //scheduler:kestrel_scheduler //scheduler:kestrel_ctl //server:kestrel_server \
  //cmd:kestrel_worker //worker/data:kestrel_datagen
python3 tests/network_faults.py --bin "$(bazel info -c opt bazel-bin)" --kestrel scripts/kestrel \
  --scenarios chaos --seeds "$(seq -s, 1 "$seeds")"
