#!/usr/bin/env bash
# Failover (--replicas=2) against rollback (--replicas=1): what one killed server costs a BSP DeepFM job run by
# `kestrel local` (bench/failover_bench.py says what is measured) -> bench/results/failover_bench.md.
#
#   bench/run_failover_bench.sh [--kill_delay=1.0] [--output=...]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bazel build -c opt //server:kestrel_server //scheduler:kestrel_scheduler //cmd:kestrel_worker \
  //worker/data:kestrel_datagen
bin="$(bazel info -c opt bazel-bin 2>/dev/null)"
export KESTREL_BIN="${bin}"
# shellcheck source=bench/bench_env.sh
source bench/bench_env.sh
work="$(mktemp -d /tmp/failover_bench.XXXXXX)"
"${bin}/worker/data/kestrel_datagen" --small --out_dir="${work}/data" 2>/dev/null
cat >"${work}/job.pbtxt" <<'JOB'
model { type: DEEPFM embedding_dim: 8 hidden: [64, 32] }
data { format: CRITEO }
train { batch_size: 256 epochs: 2 log_every_steps: 50 }
JOB
machine="$(nproc) cpus, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), commit $(bench_commit)"
python3 bench/failover_bench.py --kestrel=scripts/kestrel --config="${work}/job.pbtxt" --data="${work}/data" \
  --work="${work}" --machine="${machine}" --invocation="$(bench_invocation bench/run_failover_bench.sh "$@")" "$@"
rm -rf "${work}"
