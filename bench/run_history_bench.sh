#!/usr/bin/env bash
# History-feature benchmark: what the pooled user-history columns of a schema data set are worth, and what
# they cost. On one `kestrel_datagen --format=schema` set (500k training rows, 100k test rows, histories of up
# to 50 items and their categories, mean-pooled into shared "items" and "categories" tables), trains in one
# process (kestrel_worker --local) with the generated job config:
#
#   DEEPFM               every feature
#   DEEPFM, no history   the same schema without hist_items and hist_categories
#   LR, FM, DLRM         every feature
#
# and writes each run's test AUC / logloss (against the planted Bayes-optimal ones), training throughput
# (examples/s over the training loop), CPU-seconds per 1k training examples (the whole process: reading,
# training and the final evaluation) and time by phase (the trainer's "done" record) to
# bench/results/history_bench.md:
#
#   bench/run_history_bench.sh [--train_rows=500000] [--test_rows=100000] [--realistic] [--output=FILE]
#     [--work_dir=DIR]
#
# --realistic: the sizes users run (embedding dim 16, MLP 256-128, batch 4096) instead of the generated config's
# (dim 8, MLP 64-32, batch 256); use it with --train_rows=1000000.
#
# Data, configs, logs and records go to /tmp/kestrel_history_bench (--work_dir); generated data is kept and
# reused for the same row counts.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

command_line=("$@")
train_rows=500000
test_rows=100000
output=bench/results/history_bench.md
work_dir=/tmp/kestrel_history_bench
realistic=0
for arg in "$@"; do
  case "${arg}" in
    --train_rows=*) train_rows="${arg#--train_rows=}" ;;
    --test_rows=*) test_rows="${arg#--test_rows=}" ;;
    --output=*) output="${arg#--output=}" ;;
    --work_dir=*) work_dir="${arg#--work_dir=}" ;;
    --realistic) realistic=1 ;;
    *)
      echo "usage: $0 [--train_rows=N] [--test_rows=N] [--realistic] [--output=FILE] [--work_dir=DIR]" >&2
      exit 2
      ;;
  esac
done

# The default configuration (.bazelrc: -O2, -O3 on the hot libraries), which the other runs of these binaries
# share.
bazel build //cmd:kestrel_worker //worker/data:kestrel_datagen
bin="$(bazel info bazel-bin 2>/dev/null)"

# shellcheck source=bench/bench_env.sh
source bench/bench_env.sh
commit="$(bench_commit)"
invocation="$(bench_invocation bench/run_history_bench.sh "${command_line[@]}")"

data="$(bench_history_data "${bin}" "${work_dir}" "${train_rows}" "${test_rows}")"

# The generated config (DEEPFM) with another model type, or without the history features. The config is
# protobuf's text format as kestrel_datagen prints it: each schema feature a "    features {" ... "    }" block.
base="${work_dir}/base.pbtxt"
if (( realistic )); then
  sed -e 's/^  embedding_dim: .*/  embedding_dim: 16/' -e 's/^  hidden: 64$/  hidden: 256/' \
    -e 's/^  hidden: 32$/  hidden: 128/' -e 's/^  batch_size: .*/  batch_size: 4096/' "${data}/job.pbtxt" > "${base}"
  sizes="embedding dim 16, MLP 256-128, batch 4096"
else
  cp "${data}/job.pbtxt" "${base}"
  sizes="embedding dim 8, MLP 64-32, batch 256"
fi
with_model() { sed "s/^  type: DEEPFM\$/  type: $1/" "${base}"; }
without_history() {
  awk '/^    features \{$/ { block = $0 "\n"; inside = 1; next }
       inside { block = block $0 "\n"; if ($0 ~ /^    }$/) { inside = 0; if (block !~ /name: "hist_/) printf "%s", block }; next }
       { print }' "${base}"
}

runs=(deepfm deepfm_no_history lr fm dlrm)
for run in "${runs[@]}"; do
  config="${work_dir}/${run}.pbtxt"
  case "${run}" in
    deepfm) cp "${base}" "${config}" ;;
    deepfm_no_history) without_history > "${config}" ;;
    lr) with_model LOGISTIC_REGRESSION > "${config}" ;;
    fm) with_model FM > "${config}" ;;
    dlrm) with_model DLRM > "${config}" ;;
  esac
  echo "== ${run}"
  rm -f "${work_dir}/${run}.jsonl"
  /usr/bin/time -f '%e %U %S' -o "${work_dir}/${run}.time" \
    "${bin}/cmd/kestrel_worker" --config="${config}" --local --metrics_out="${work_dir}/${run}.jsonl" \
    > "${work_dir}/${run}.log" 2>&1 || { tail -20 "${work_dir}/${run}.log"; exit 1; }
  grep -E 'finished:|time by phase' "${work_dir}/${run}.log" || true
done

cpu="$(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -1)"
memory="$(free -g 2>/dev/null | awk '/^Mem:/ { print $2 " GiB" }')"
python3 - "${work_dir}" "${data}" "${output}" "${commit}" "${invocation}" "$(nproc)" "${cpu:-unknown}" \
  "${memory:-unknown}" "$(uname -srm)" "$(date +%F)" "${sizes}" "${runs[@]}" <<'EOF'
import json
import sys

work, data, output, commit, invocation, nproc, cpu, memory, kernel, date, sizes = sys.argv[1:12]
runs = sys.argv[12:]
names = {
    "deepfm": "DEEPFM", "deepfm_no_history": "DEEPFM, no history", "lr": "LR", "fm": "FM", "dlrm": "DLRM",
}
truth = {}
for line in open(f"{data}/truth.txt"):
    if ":" in line and not line.startswith("#"):
        key, value = line.split(":", 1)
        truth[key.strip()] = float(value)
datagen_log = ""
try:
    datagen_log = [l for l in open(f"{work}/datagen.log") if "rows/s" in l][-1]
except (OSError, IndexError):
    pass

rows = []
for run in runs:
    records = [json.loads(l) for l in open(f"{work}/{run}.jsonl") if l.strip()]
    evals = [r for r in records if r.get("kind") == "eval"]
    done = [r for r in records if r.get("kind") == "done"][-1]
    elapsed, user, system = (float(x) for x in open(f"{work}/{run}.time").read().split()[-3:])
    examples = done.get("examples", 0)
    phases = done.get("phases", {})
    rows.append((names[run], evals[-1].get("auc", 0), evals[-1].get("logloss", 0), done.get("examples_per_second", 0),
                 (user + system) / examples * 1000 if examples else 0, elapsed, examples, phases))

with open(output, "w") as out:
    out.write("# Pooled user histories: their worth and their cost\n\n")
    out.write(f"`{invocation}` at {commit}. One `kestrel_datagen --format=schema` set: "
              f"{int(truth['train_rows'])} training rows, {int(truth['test_rows'])} test rows, seed "
              f"{int(truth['seed'])}; histories of up to 50 items and their categories (a third of it on average), "
              "mean-pooled into the shared `items` and `categories` tables; the generated job config ("
              f"{sizes}, 2 epochs), trained in one process (`kestrel_worker --local`). "
              "\"no history\" drops `hist_items` and `hist_categories` from the schema.\n\n")
    out.write("## Machine\n\n| | |\n|---|---|\n")
    out.write(f"| nproc | {nproc} |\n| CPU | {cpu} |\n| Memory | {memory} |\n| Kernel | {kernel} |\n| Date | {date} |\n\n")
    out.write("## The data\n\n")
    out.write(f"Bayes-optimal test AUC {truth['bayes_auc']:.5f}, logloss {truth['bayes_logloss']:.5f} "
              f"(scoring with the planted click probability); positive rate {truth['positive_rate']:.4f}. "
              f"The target's category occurs in the history in {truth['in_history_fraction']:.1%} of the test rows, "
              f"which click at {truth['click_rate_in_history']:.3f}, the others at "
              f"{truth['click_rate_not_in_history']:.3f}.\n")
    if datagen_log:
        out.write(f"Generated at {datagen_log.split('(')[1].split(')')[0]} (`kestrel_datagen` log).\n")
    out.write("\n## Results\n\n")
    out.write("| model | test AUC | test logloss | examples/s | CPU-s / 1k examples | wall s | trained examples |\n")
    out.write("|---|---:|---:|---:|---:|---:|---:|\n")
    for name, auc, logloss, eps, cpu_per_k, elapsed, examples, _ in rows:
        out.write(f"| {name} | {auc:.5f} | {logloss:.5f} | {eps:.0f} | {cpu_per_k:.3f} | {elapsed:.1f} | {examples:.0f} |\n")
    out.write("\nexamples/s: over the training loop (the \"done\" record; evaluation excluded). CPU-s / 1k examples: "
              "user + system seconds of the whole process (reading, training, the final evaluation of the test "
              "rows) per 1000 training examples.\n\n")
    out.write("## Time by phase (seconds)\n\n")
    out.write("| model | read | batch | pull | compute | push | wait |\n|---|---:|---:|---:|---:|---:|---:|\n")
    for name, *_, phases in rows:
        out.write(f"| {name} | " + " | ".join(f"{phases.get(p, 0):.2f}" for p in
                                            ("read", "batch", "pull", "compute", "push", "wait")) + " |\n")
    out.write("\nread and batch run on the reader threads, overlapped with the training loop; pull, compute and push "
              "are the loop's own (in process: the in-process tables).\n")
print(open(output).read())
EOF
