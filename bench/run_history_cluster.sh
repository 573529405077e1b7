#!/usr/bin/env bash
# The schema data set on a cluster: LR, FM, DeepFM and DLRM trained through the feature schema (pooled 50-long
# histories, shared "items" and "categories" tables) by `kestrel local` with 2 servers and 2 workers under BSP
# over mutual TLS, and DeepFM a second time: the two DeepFM runs must end with the same prediction fingerprint
# (BSP is bitwise repeatable). Uses the data of bench/run_history_bench.sh (generated here if missing), one
# epoch. Writes bench/results/history_cluster.md.
#
#   bench/run_history_cluster.sh [--train_rows=500000] [--test_rows=100000] [--work_dir=DIR]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

command_line=("$@")
train_rows=500000
test_rows=100000
work_dir=/tmp/kestrel_history_bench
for arg in "$@"; do
  case "${arg}" in
    --train_rows=*) train_rows="${arg#--train_rows=}" ;;
    --test_rows=*) test_rows="${arg#--test_rows=}" ;;
    --work_dir=*) work_dir="${arg#--work_dir=}" ;;
    *) echo "usage: $0 [--train_rows=N] [--test_rows=N] [--work_dir=DIR]" >&2; exit 2 ;;
  esac
done
output=bench/results/history_cluster.md

bazel build //server:kestrel_server //scheduler:kestrel_scheduler //scheduler:kestrel_ctl //cmd:kestrel_worker \
  //worker/data:kestrel_datagen
bin="$(bazel info bazel-bin 2>/dev/null)"
# shellcheck source=bench/bench_env.sh
source bench/bench_env.sh
commit="$(bench_commit)"
invocation="$(bench_invocation bench/run_history_cluster.sh "${command_line[@]}")"

data="$(bench_history_data "${bin}" "${work_dir}" "${train_rows}" "${test_rows}")"
# The generated config with another model type, trained for one epoch.
config_for() { sed -e "s/^  type: DEEPFM\$/  type: $1/" -e "s/^  epochs: .*/  epochs: 1/" "${data}/job.pbtxt"; }

runs=(LOGISTIC_REGRESSION FM DEEPFM DLRM DEEPFM)
results=()
for i in "${!runs[@]}"; do
  model="${runs[$i]}"
  run="${work_dir}/cluster_${i}_${model}"
  rm -rf "${run}"
  mkdir -p "${run}"
  config_for "${model}" > "${run}/job.pbtxt"
  echo "== ${model} (run ${i})"
  KESTREL_BIN="${bin}" scripts/kestrel local --no_build --servers 2 --workers 2 --consistency bsp \
    --config "${run}/job.pbtxt" --run_dir "${run}/run" 2>&1 | tail -1
  results+=("$(python3 -c '
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1]) if "\"eval\"" in l][-1]
done = [json.loads(l) for l in open(sys.argv[1]) if "\"done\"" in l]
eps = sum(d.get("examples_per_second", 0) for d in done)
print("%s %.5f %.5f %.0f %s" % (sys.argv[2], ev["auc"], ev["logloss"], eps, ev["fingerprint"]))' \
    "${run}/run/metrics.jsonl" "${model}")")
done

{
  echo "# The schema data set on a 2+2 cluster (BSP)"
  echo
  echo "\`${invocation}\` at ${commit}, $(date -u +%F), $(nproc) cores ($(lscpu | sed -n 's/^Model name: *//p' | head -1))."
  echo "One \`kestrel_datagen --format=schema\` set (${train_rows} training rows, ${test_rows} test rows, histories"
  echo "of up to 50 items and categories mean-pooled into shared tables; $(grep -E '^bayes_auc' "${data}/truth.txt" | tr -d ' ')),"
  echo "its generated config for each model type at one epoch, \`kestrel local --servers 2 --workers 2 --consistency bsp\`"
  echo "(scheduler, servers and workers on this machine, mutual TLS, checkpoints every 100 clocks)."
  echo
  echo "| model | test AUC | test logloss | examples/s (both workers) | prediction fingerprint |"
  echo "|---|---:|---:|---:|---|"
  for r in "${results[@]}"; do
    read -r model auc logloss eps fp <<< "${r}"
    echo "| ${model} | ${auc} | ${logloss} | ${eps} | ${fp} |"
  done
  echo
  first="$(echo "${results[2]}" | awk '{print $5}')"
  second="$(echo "${results[4]}" | awk '{print $5}')"
  if [[ "${first}" == "${second}" ]]; then
    echo "The two DeepFM runs end with the same fingerprint ${first}: bitwise repeatable."
  else
    echo "The two DeepFM runs DIFFER (${first} vs ${second})."
  fi
} > "${output}"
cat "${output}"
