#!/usr/bin/env bash
# Slow links (bench/netlink_bench.py): the realistic DeepFM 2+2 job on hosts of their own (kestrel local --hosts)
# with every link unlimited, at 10 Gbit/s and at 1 Gbit/s, fp32 and bf16 on the wire; examples/s, wire bytes per
# example, CPU per example, into bench/results/netlink_bench.md. Needs root (network namespaces).
#
#   bench/run_netlink_bench.sh [--runs 3] [--output FILE]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bazel build -c opt //scheduler:kestrel_scheduler //server:kestrel_server //cmd:kestrel_worker \
  //worker/data:kestrel_datagen
python3 bench/netlink_bench.py --bin "$(bazel info -c opt bazel-bin)" --kestrel scripts/kestrel \
  --command_line="$*" "$@"
