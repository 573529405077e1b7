#!/usr/bin/env bash
# PyTorch workers against C++ workers on one 2+2 cluster: DeepFM at the realistic size (embedding dim 16, MLP
# 256-128, batch 4096 per worker, 1M training rows, 1 epoch) trained by `kestrel local --servers 2 --workers 2
# --consistency bsp` (mutual TLS, checkpoints every 100 clocks) three ways in each round:
#   cpp              kestrel_worker (the built-in DeepFM)
#   torch-servers    examples/torch/deepfm.py, the dense part (bias + MLP) a dense table on the servers
#   torch-allreduce  examples/torch/deepfm.py --dense=allreduce, the dense part averaged by a gloo allreduce
#   torch-bf16       examples/torch/deepfm.py --mlp_bf16: as torch-servers, the MLP's matrix products in bfloat16
#                    (torch.autocast: oneDNN's AVX512-BF16 kernels where the CPU has them; weights stay float32)
# and bench/torch_peer.py, plain PyTorch in one process (the tool a user would otherwise pick), as a fourth
# column, beside examples/torch/deepfm.py in one process on 2 in-process servers (Kestrel's path against PyTorch's
# own). Medians of --runs rounds; the ratios are taken within each round. Also the CPU seconds of each whole
# job (scheduler, servers and workers: they share this machine's cores) per 1000 training examples, and the bytes
# each dense mode moves per step (from the dense part's size). Writes bench/results/torch_cluster.md.
#
#   bench/run_torch_cluster_bench.sh [--train_rows=1000000] [--test_rows=100000] [--runs=3] [--work_dir=DIR]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

command_line=("$@")
train_rows=1000000
test_rows=100000
runs=3
work_dir=/tmp/kestrel_torch_cluster_bench
for arg in "$@"; do
  case "${arg}" in
    --train_rows=*) train_rows="${arg#--train_rows=}" ;;
    --test_rows=*) test_rows="${arg#--test_rows=}" ;;
    --runs=*) runs="${arg#--runs=}" ;;
    --work_dir=*) work_dir="${arg#--work_dir=}" ;;
    *) echo "usage: $0 [--train_rows=N] [--test_rows=N] [--runs=N] [--work_dir=DIR]" >&2; exit 2 ;;
  esac
done
output=bench/results/torch_cluster.md
python=/usr/bin/python3

bazel build -c opt //server:kestrel_server //scheduler:kestrel_scheduler //scheduler:kestrel_ctl \
  //cmd:kestrel_worker //worker/data:kestrel_datagen //python:site
bin="$(bazel info -c opt bazel-bin 2>/dev/null)"
# shellcheck source=bench/bench_env.sh
source bench/bench_env.sh
commit="$(bench_commit)"
invocation="$(bench_invocation bench/run_torch_cluster_bench.sh "${command_line[@]}")"

mkdir -p "${work_dir}"
data="${work_dir}/data_${train_rows}_${test_rows}"
if [[ ! -f "${data}/test.tsv" ]]; then
  "${bin}/worker/data/kestrel_datagen" --train_rows="${train_rows}" --test_rows="${test_rows}" --max_vocab=100000 \
    --out_dir="${data}"
fi
cat > "${work_dir}/job.pbtxt" <<JOB
model { type: DEEPFM embedding_dim: 16 hidden: [256, 128] }
data { format: CRITEO train_files: "${data}/train.tsv" test_files: "${data}/test.tsv" }
train { batch_size: 4096 epochs: 1 log_every_steps: 20 }
JOB

# One job: prints "<auc> <examples/s of both workers> <cpu seconds of the whole job> <examples trained>".
run_job() {
  local name=$1
  shift
  local run="${work_dir}/${name}"
  rm -rf "${run}"
  /usr/bin/time -f "%U %S" -o "${run}.time" env KESTREL_BIN="${bin}" scripts/kestrel local --no_build \
    --servers 2 --workers 2 --consistency bsp --config "${work_dir}/job.pbtxt" --run_dir "${run}" "$@" \
    >"${run}.log" 2>&1 || { tail -5 "${run}.log" >&2; for f in "${run}"/worker*.log; do tail -5 "$f" >&2; done; exit 1; }
  "${python}" - "${run}/metrics.jsonl" "${run}.time" <<'PY'
import json, sys
records = [json.loads(l) for l in open(sys.argv[1])]
ev = [r for r in records if r.get("kind") == "eval"][-1]
done = [r for r in records if r.get("kind") == "done"]
user, system = map(float, open(sys.argv[2]).read().split()[-2:])
print("%.5f %.0f %.1f %d" % (ev["auc"], sum(d["examples_per_second"] for d in done), user + system,
                             sum(d["examples"] for d in done)))
PY
}

worker_cmd="${python} examples/torch/deepfm.py"
rounds=()
for r in $(seq "${runs}"); do
  echo "== round ${r}"
  cpp="$(run_job "cpp_${r}")"; echo "cpp: ${cpp}"
  servers="$(run_job "torch_servers_${r}" --worker_cmd="${worker_cmd} --dense=servers")"; echo "torch-servers: ${servers}"
  allreduce="$(run_job "torch_allreduce_${r}" --worker_cmd="${worker_cmd} --dense=allreduce")"; echo "torch-allreduce: ${allreduce}"
  bf16="$(run_job "torch_bf16_${r}" --worker_cmd="${worker_cmd} --mlp_bf16")"; echo "torch-bf16: ${bf16}"
  peer="$("${python}" bench/torch_peer.py --train "${data}/train.tsv" --test "${data}/test.tsv" --model deepfm \
    --embedding_dim 16 --hidden 256,128 --batch_size 4096 --wide_opt adagrad | tail -1)"
  echo "torch_peer: ${peer}"
  # The PyTorch DeepFM on Kestrel's tables in one process (2 in-process servers): Kestrel's path against
  # PyTorch's own, same machine, same round.
  inprocess="$(PYTHONPATH="${bin}/python/site" "${python}" examples/torch/deepfm.py --config "${work_dir}/job.pbtxt" \
    --train "${data}/train.tsv" --test "${data}/test.tsv" --servers 2 | \
    sed -n 's/^trained [0-9]* examples in [0-9.]* s: \([0-9]*\) examples\/s$/\1/p; s/^test AUC \([0-9.]*\)$/auc \1/p' | tr '\n' ' ')"
  echo "torch-inprocess: ${inprocess}"
  rounds+=("${cpp}|${servers}|${allreduce}|${peer}|${bf16}|${inprocess}")
done

# The dense part's floats: bias, then the MLP over 39 fields x 16 + 13 dense inputs -> 256 -> 128 -> 1.
dense_floats=$(( 1 + (39 * 16 + 13) * 256 + 256 + 256 * 128 + 128 + 128 + 1 ))

"${python}" - "${output}" "${invocation}" "${commit}" "${train_rows}" "${test_rows}" "${dense_floats}" \
  "$(nproc)" "$(lscpu | sed -n 's/^Model name: *//p' | head -1)" "${rounds[@]}" <<'PY'
import json, statistics, sys, datetime
out, invocation, commit, train_rows, test_rows, dense, cores, cpu = sys.argv[1:9]
dense = int(dense)
rows = []
for r in sys.argv[9:]:
    cpp, servers, allreduce, peer, bf16, inprocess = r.split("|")
    parse = lambda s: dict(zip(("auc", "eps", "cpu", "examples"), map(float, s.split())))
    eps, _, auc = inprocess.split()
    rows.append((parse(cpp), parse(servers), parse(allreduce), json.loads(peer), parse(bf16),
                 {"eps": float(eps), "auc": float(auc)}))
med = lambda f: statistics.median(f(x) for x in rows)
lines = [
    "# PyTorch workers on a 2+2 cluster: DeepFM in PyTorch vs the built-in C++ worker",
    "",
    f"`{invocation}` at {commit}, {datetime.date.today()}, {cores} cores ({cpu}).",
    f"kestrel_datagen Criteo-format data ({train_rows} training rows, {test_rows} test rows, vocabularies up to"
    " 100k), DeepFM with embedding dim 16, MLP 256-128, batch 4096 per worker, one epoch; `kestrel local --servers 2"
    " --workers 2 --consistency bsp` (mutual TLS, checkpoints every 100 clocks): the scheduler, 2 servers and 2"
    " workers share this machine's cores. Medians of "
    f"{len(rows)} rounds; each ratio is taken within a round, then its median.",
    "",
    "| | C++ worker | PyTorch, dense on servers | PyTorch, dense by allreduce | PyTorch, dense on servers, bf16 MLP "
    "| plain PyTorch, 1 process |",
    "|---|---:|---:|---:|---:|---:|",
    "| test AUC | %.5f | %.5f | %.5f | %.5f | %.5f |" % (
        med(lambda x: x[0]["auc"]), med(lambda x: x[1]["auc"]), med(lambda x: x[2]["auc"]), med(lambda x: x[4]["auc"]),
        med(lambda x: x[3]["auc"])),
    "| training examples/s (both workers) | %.0f | %.0f | %.0f | %.0f | %.0f |" % (
        med(lambda x: x[0]["eps"]), med(lambda x: x[1]["eps"]), med(lambda x: x[2]["eps"]), med(lambda x: x[4]["eps"]),
        med(lambda x: x[3]["examples_per_second"])),
    "| examples/s vs the C++ worker | 1 | %.2f | %.2f | %.2f | %.2f |" % (
        med(lambda x: x[1]["eps"] / x[0]["eps"]), med(lambda x: x[2]["eps"] / x[0]["eps"]),
        med(lambda x: x[4]["eps"] / x[0]["eps"]), med(lambda x: x[3]["examples_per_second"] / x[0]["eps"])),
    "| AUC minus the C++ worker's | 0 | %+.5f | %+.5f | %+.5f | %+.5f |" % (
        med(lambda x: x[1]["auc"] - x[0]["auc"]), med(lambda x: x[2]["auc"] - x[0]["auc"]),
        med(lambda x: x[4]["auc"] - x[0]["auc"]), med(lambda x: x[3]["auc"] - x[0]["auc"])),
    "| CPU seconds of the whole job per 1000 examples | %.3f | %.3f | %.3f | %.3f | |" % tuple(
        med(lambda x, i=i: 1000 * x[i]["cpu"] / x[i]["examples"]) for i in (0, 1, 2, 4)),
    "",
    "In one process (the cost of Kestrel's path over PyTorch's own: `examples/torch/deepfm.py` on 2 in-process "
    "servers, its reads, pushes and fused steps through the C++ client, against `bench/torch_peer.py`'s plain "
    "PyTorch DeepFM with the same batch, optimizers and initial distributions; both with 2 threads):",
    "",
    "| | PyTorch on Kestrel, 1 process | plain PyTorch, 1 process | Kestrel / plain | the 2+2 cluster of PyTorch workers |",
    "|---|---:|---:|---:|---:|",
    "| training examples/s | %.0f | %.0f | %.2f | %.0f |" % (
        med(lambda x: x[5]["eps"]), med(lambda x: x[3]["examples_per_second"]),
        med(lambda x: x[5]["eps"] / x[3]["examples_per_second"]), med(lambda x: x[1]["eps"])),
    "| test AUC | %.5f | %.5f | %+.5f | %.5f |" % (
        med(lambda x: x[5]["auc"]), med(lambda x: x[3]["auc"]), med(lambda x: x[5]["auc"] - x[3]["auc"]),
        med(lambda x: x[1]["auc"])),
    "",
    f"Bytes of the dense part (bias + MLP: {dense} floats, {4 * dense / 1e6:.2f} MB) per step, both workers together:",
    f"- on the servers: each worker pulls it and pushes its gradient: {2 * 2 * 4 * dense / 1e6:.2f} MB through the"
    " servers (which also average and apply Adam);",
    f"- by allreduce: gloo's allreduce of the gradient among 2 workers moves about {2 * 4 * dense / 1e6:.2f} MB"
    f" worker to worker, and rank 0 writes the dense state (weights and Adam's two moments: {3 * 4 * dense / 1e6:.2f}"
    " MB) to an ASSIGN table so that checkpoints hold it; the other worker pushes an empty BSP part.",
    "",
    "Per-round figures (AUC, examples/s, job CPU seconds):",
    "",
]
for i, x in enumerate(rows, 1):
    lines.append(f"- round {i}: C++ {x[0]['auc']:.5f} {x[0]['eps']:.0f}/s {x[0]['cpu']:.0f} s; torch-servers "
                 f"{x[1]['auc']:.5f} {x[1]['eps']:.0f}/s {x[1]['cpu']:.0f} s; torch-allreduce {x[2]['auc']:.5f} "
                 f"{x[2]['eps']:.0f}/s {x[2]['cpu']:.0f} s; torch-bf16 {x[4]['auc']:.5f} {x[4]['eps']:.0f}/s "
                 f"{x[4]['cpu']:.0f} s; plain PyTorch {x[3]['auc']:.5f} {x[3]['examples_per_second']:.0f}/s; "
                 f"PyTorch on Kestrel in one process {x[5]['auc']:.5f} {x[5]['eps']:.0f}/s")
open(out, "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
