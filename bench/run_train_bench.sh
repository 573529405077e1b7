#!/usr/bin/env bash
# Builds and runs Kestrel's training benchmark (bench/train_bench.cc): throughput and test AUC / logloss of the
# full cluster on loopback (1 scheduler, 2 servers, 2 workers; BSP and ASP), the single-process trainer on
# in-process tables, and the PyTorch CPU peer (bench/torch_peer.py: 1 process x 2 threads, DDP/gloo 2 x 1) on
# the same generated data, for LR, DeepFM and DLRM at two sizes, medians of 3 runs, into
# bench/results/train_bench.md:
#
#   demo       embedding dim 8, MLP 64-32, batch 512; kestrel_datagen's default set: 200k train rows, 50k test
#              rows, vocabularies up to 50k
#   realistic  embedding dim 16, MLP 256-128, batch 4096; 1M train rows, 100k test rows, vocabularies up to 100k
#
#   bench/run_train_bench.sh                          # both sizes
#   bench/run_train_bench.sh demo --runs=1            # one size; further arguments go to train_bench
#   bench/run_train_bench.sh all --models=DEEPFM --output=bench/results/train_bench_deepfm.md
#
# The peer needs Debian's python3-torch and an optimized BLAS (libopenblas0-openmp; without it torch falls back
# to the netlib reference BLAS, ~10x slower): installed here, as a benchmark step, when missing (--peer=false
# skips the peer). Data and logs go to /tmp/kestrel_train_bench (--work_dir); generated data is kept and reused.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

command_line=("$@")
sizes=(demo realistic)
if [[ $# -gt 0 && "$1" != --* ]]; then
  case "$1" in
    all) sizes=(demo realistic) ;;
    demo | realistic) sizes=("$1") ;;
    *)
      echo "usage: $0 [all|demo|realistic] [train_bench flags...]" >&2
      exit 2
      ;;
  esac
  shift
fi

want_peer=true
output=bench/results/train_bench.md
for arg in "$@"; do
  case "${arg}" in
    --peer=false | --peer=0 | --peer=no | --nopeer) want_peer=false ;;
    --output=*) output="${arg#--output=}" ;;
  esac
done

if [[ "${want_peer}" == true ]]; then
  missing=()
  /usr/bin/python3 -c 'import torch' 2>/dev/null || missing+=(python3-torch)
  dpkg-query -W -f='${Status}' libopenblas0-openmp 2>/dev/null | grep -q 'ok installed' || missing+=(libopenblas0-openmp)
  if [[ ${#missing[@]} -gt 0 ]]; then
    echo "installing the PyTorch peer's packages: ${missing[*]}"
    sudo_cmd=()
    if [[ "$(id -u)" -ne 0 ]]; then
      sudo_cmd=(sudo)
    fi
    "${sudo_cmd[@]}" apt-get update
    "${sudo_cmd[@]}" env DEBIAN_FRONTEND=noninteractive \
      apt-get install -y --no-install-recommends python3-torch libopenblas0-openmp
  fi
fi

bazel build -c opt //bench:train_bench //scheduler:kestrel_scheduler //server:kestrel_server //cmd:kestrel_worker
bin="$(bazel info -c opt bazel-bin 2>/dev/null)"

# shellcheck source=bench/bench_env.sh
source bench/bench_env.sh
commit="$(bench_commit)"
invocation="$(bench_invocation bench/run_train_bench.sh "${command_line[@]}")"

append=false
for size in "${sizes[@]}"; do
  case "${size}" in
    demo) size_flags=(--embedding_dim=8 --hidden="64,32" --batch_size=512
                      --train_rows=200000 --test_rows=50000 --max_vocab=50000) ;;
    realistic) size_flags=(--embedding_dim=16 --hidden="256,128" --batch_size=4096
                           --train_rows=1000000 --test_rows=100000 --max_vocab=100000) ;;
  esac
  "${bin}/bench/train_bench" \
    --scheduler_binary="${bin}/scheduler/kestrel_scheduler" \
    --server_binary="${bin}/server/kestrel_server" \
    --worker_binary="${bin}/cmd/kestrel_worker" \
    --git_commit="${commit}" \
    --invocation="${invocation}" \
    --models=LOGISTIC_REGRESSION,DEEPFM,DLRM \
    --runs=3 \
    --size_label="${size}" \
    --output="${output}" \
    --append="${append}" \
    "${size_flags[@]}" \
    "$@"
  append=true
done
