#!/usr/bin/env bash
# One run of every GPU training measurement on a lent GPU machine, on one generated data set and one card,
# ratios taken within the run. From the repository root, over the bundle of `scripts/gpu_bundle.sh --bench --xz`
# (.gpu/bundle.tar.xz, unpacked into gpu_bundle/ when that is absent):
#
#   datagen        kestrel_datagen --train_rows=1000000 --test_rows=100000 --max_vocab=100000
#   cuda_step      bench/cuda_step_bench at the realistic size alone (DeepFM dim 16, MLP 256-128, batch 4096):
#                  the CUDA training step on one prepared batch, host parameters in and gradients out
#   cuda_step_tf32 the same with model.gemm_precision GEMM_TF32 (the MLP on tensor cores)
#   local_cuda     kestrel_worker --local --device=cuda: the whole trainer in one process (reading, batching,
#   local_cpu      in-process tables, optimizer), then --device=cpu on every core
#   local_cuda_tf32  kestrel_worker --local --device=cuda with model.gemm_precision GEMM_TF32
#   torch_peer     bench/torch_peer.py --device cuda --sparse_grad both: the same DeepFM in PyTorch
#                  (nn.EmbeddingBag, the data in GPU memory), sparse and dense table gradients, the faster counted
#   cluster_1w     `kestrel local --servers 2 --workers 1 --device cuda` (BSP, mutual TLS, no periodic
#   cluster_2w     checkpoints), then --workers 2: CPU servers, CUDA workers, each worker a batch of 4096
#   ceiling        bench/pipeline_ceiling_bench --stand_in_us=0,2840: the host side alone on this machine's
#                  cores, the model's compute a stand-in (0: what the host can feed; 2.84 ms: an H100's step)
#
# The model everywhere: DeepFM, embedding dim 16, MLP 256-128, batch 4096, 1 epoch; the wide table Adagrad
# (learning rate 0.05, initial accumulator 0.1) instead of Kestrel's default FTRL, which PyTorch lacks, so the
# peer trains the same model; every other setting the job defaults, which the peer's defaults match.
#
# Writes $OUT/gpu_bench.md (OUT defaults to a temporary folder; also copied to bench/results/gpu_bench.md when
# that folder is writable) and $OUT/gpu_bench_logs.tar.gz (every part's log), and prints the report. The report
# names the card, the CPU and the bundle's commit, and gives each part's examples/s, test AUC and logloss, the
# ratios (local CUDA / CUDA step, local CUDA / PyTorch, local CUDA / local CPU, cluster / local CUDA), and per
# cluster run the loopback bytes and the servers' and workers' CPU-seconds per 1000 examples
# (bench/gpu_bench_cluster.py), and the GPU's mean utilization while each CUDA part ran (nvidia-smi).
# Every part runs under `timeout`, bounded also by what is left of the run's budget (--budget, default 470 s);
# a part that fails is reported FAILED with its log's tail and the rest go on. Exit 1 if any part failed.
#
# Dry run (--dry_run, or KESTREL_GPU_BENCH_DRY_RUN=1), for a machine without a GPU: the CUDA parts are reported
# "skipped: no GPU", the PyTorch peer runs on the CPU when a python3 with torch is found (else skipped), the
# cluster runs with --device cpu, and the data is 200k rows unless --rows says otherwise. It checks the
# bundle, the launcher, mutual TLS, the measurements and the report; its figures are not the GPU's.
#
# Usage (device tool): scripts/gpu_bundle.sh --bench --xz   # here
#                      run(command="bench/run_gpu_bench.sh", carry=[".gpu"], timeout_s=540)
#                      bench/run_gpu_bench.sh --dry_run [--rows=N]   # here, over gpu_bundle/ or .gpu/
# Options: --rows=N (training rows; test rows N/10), --budget=SECONDS, --keep (keep the data and runs in the
# work folder). Environment: OUT, PYTHON (the python3 with torch for the peer), KESTREL_GPU_BENCH_DRY_RUN.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
REPO=$PWD

dry_run=false
case "${KESTREL_GPU_BENCH_DRY_RUN:-0}" in 0 | false | no | "") ;; *) dry_run=true ;; esac
rows=""
budget=470
keep=false
for arg in "$@"; do
  case "$arg" in
    --dry_run | --dry-run) dry_run=true ;;
    --rows=*) rows=${arg#--rows=} ;;
    --budget=*) budget=${arg#--budget=} ;;
    --keep) keep=true ;;
    -h | --help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "run_gpu_bench: unknown argument $arg (see --help)" >&2; exit 2 ;;
  esac
done
if [ -z "$rows" ]; then
  if [ "$dry_run" = true ]; then rows=200000; else rows=1000000; fi
fi
if ! [[ "$rows" =~ ^[1-9][0-9]*$ && "$budget" =~ ^[1-9][0-9]*$ ]]; then
  echo "run_gpu_bench: --rows and --budget take positive integers" >&2
  exit 2
fi
test_rows=$((rows / 10))
BATCH=4096
started=$(date +%s)
deadline=$((started + budget))

OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
work=$(mktemp -d "${TMPDIR:-/tmp}/kestrel_gpu_bench.XXXXXX")
logs="$work/logs"
mkdir -p "$logs"
sampler=""
# shellcheck disable=SC2317  # run by the EXIT trap
cleanup() {
  [ -n "$sampler" ] && kill "$sampler" 2>/dev/null
  if [ "$keep" = true ]; then
    echo "run_gpu_bench: data, runs and logs kept in $work"
  else
    rm -rf "$work"
  fi
}
trap cleanup EXIT
say() { echo "run_gpu_bench: $*" | tee -a "$logs/gpu_bench.log"; }

# --- The bundle ----------------------------------------------------------------------------------------------
BUNDLE="$REPO/gpu_bundle"
ARCHIVE="$REPO/.gpu/bundle.tar.xz"
if [ ! -d "$BUNDLE/bin" ] && [ -f "$ARCHIVE" ]; then
  dest=$REPO
  [ -w "$REPO" ] || dest=$work
  say "unpacking $ARCHIVE into $dest"
  if command -v xz >/dev/null; then
    tar -xJf "$ARCHIVE" -C "$dest"
  else  # no xz command: Python's lzma
    python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1], "r:xz").extractall(sys.argv[2])' "$ARCHIVE" "$dest"
  fi
  BUNDLE="$dest/gpu_bundle"
fi
bundle_commit=$(cat "$BUNDLE/COMMIT" 2>/dev/null || echo unknown)
libs="$BUNDLE/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

# The bundle's binaries run with its libraries through wrappers, so that nothing else (python3 and its torch,
# the launcher) loads them. KESTREL_BIN is laid out like bazel-bin for `kestrel local`; the openssl wrapper
# (with the bundle's config) goes first on the launcher's PATH.
kbin="$work/bin"
tools="$work/tools"
mkdir -p "$kbin/cmd" "$kbin/server" "$kbin/scheduler" "$kbin/worker/data" "$tools"
wrap() {  # wrap NAME PATH [VAR=VALUE ...]
  local name=$1 path=$2
  shift 2
  {
    echo '#!/usr/bin/env bash'
    printf 'exec env LD_LIBRARY_PATH=%q' "$libs"
    [ $# -gt 0 ] && printf ' %q' "$@"
    printf ' %q "$@"\n' "$BUNDLE/bin/$name"
  } >"$path"
  chmod +x "$path"
}
wrap kestrel_worker "$kbin/cmd/kestrel_worker"
wrap kestrel_server "$kbin/server/kestrel_server"
wrap kestrel_scheduler "$kbin/scheduler/kestrel_scheduler"
wrap kestrel_datagen "$kbin/worker/data/kestrel_datagen"
wrap cuda_step_bench "$kbin/cuda_step_bench"
wrap pipeline_ceiling_bench "$kbin/pipeline_ceiling_bench"
if [ -x "$BUNDLE/bin/openssl" ]; then
  wrap openssl "$tools/openssl" "OPENSSL_CONF=$BUNDLE/etc/openssl.cnf"
fi

# --- Parts and their results ---------------------------------------------------------------------------------
PARTS=(datagen cuda_step cuda_step_tf32 local_cuda local_cuda_tf32 local_cpu torch_peer cluster_1w cluster_2w ceiling)
declare -A STATUS EPS AUC LOGLOSS WALL NOTE GPU_UTIL WHY
declare -A LABEL=(
  [datagen]="kestrel_datagen ($rows + $test_rows rows)"
  [cuda_step]="CUDA step alone (cuda_step_bench)"
  [cuda_step_tf32]="CUDA step alone, TF32 GEMMs"
  [local_cuda_tf32]="kestrel_worker --local, CUDA, TF32 GEMMs"
  [ceiling]="host side alone, stand-in compute (pipeline_ceiling_bench)"
  [local_cuda]="kestrel_worker --local, CUDA"
  [local_cpu]="kestrel_worker --local, CPU"
  [torch_peer]="PyTorch peer, GPU"
  [cluster_1w]="cluster: 2 CPU servers + 1 CUDA worker"
  [cluster_2w]="cluster: 2 CPU servers + 2 CUDA workers"
)
failed=0
record() {  # record PART STATUS NOTE (a FAILED part that timed out or got no time says so instead)
  STATUS[$1]=$2
  NOTE[$1]=$3
  [ "$2" = FAILED ] && [ -n "${WHY[$1]:-}" ] && NOTE[$1]=${WHY[$1]}
  [ "$2" = FAILED ] && failed=1
  say "${1}: $2${NOTE[$1]:+ (${NOTE[$1]})}"
}
# The seconds a part may run: its own limit, or what is left of the budget (0: nothing left).
limit() {
  local left=$((deadline - $(date +%s) - 5))
  [ "$left" -lt "$1" ] && { [ "$left" -gt 10 ] && echo "$left" || echo 0; return; }
  echo "$1"
}
# Runs a part's command under timeout, its output in $logs/PART.log; sets WALL. Returns the command's status.
run_part() {  # run_part PART SECONDS COMMAND...
  local part=$1 seconds
  seconds=$(limit "$2")
  shift 2
  if [ "$seconds" -eq 0 ]; then
    WHY[$part]="not run: no time left in the run's budget"
    echo "${WHY[$part]}" >"$logs/$part.log"
    return 124
  fi
  say "$part: $* (timeout ${seconds} s)"
  local t0 rc
  t0=$(date +%s.%N)
  start_gpu_sampler "$part"
  timeout -k 20 "$seconds" "$@" >"$logs/$part.log" 2>&1
  rc=$?
  stop_gpu_sampler "$part"
  WALL[$part]=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    WHY[$part]="timed out after ${seconds} s"
    echo "run_gpu_bench: ${WHY[$part]}" >>"$logs/$part.log"
  fi
  return "$rc"
}
has_gpu=false
if [ "$dry_run" = false ] && command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
  has_gpu=true
fi
start_gpu_sampler() {
  sampler=""
  [ "$has_gpu" = true ] || return 0
  nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader,nounits -lms 200 \
    >"$logs/$1.gpu.csv" 2>/dev/null &
  sampler=$!
}
stop_gpu_sampler() {
  [ -n "$sampler" ] || return 0
  kill "$sampler" 2>/dev/null
  wait "$sampler" 2>/dev/null
  sampler=""
  GPU_UTIL[$1]=$(awk -F', *' '$1 ~ /^[0-9]+$/ { n++; u += $1; if ($2 > m) m = $2 }
                 END { if (n) printf "%.0f%% (peak %d MiB)", u / n, m }' "$logs/$1.gpu.csv")
}
# From a kestrel_worker "finished:" line: examples/s, AUC, logloss.
parse_finished() {  # parse_finished PART
  local line
  line=$(grep "finished:" "$logs/$1.log" | tail -1)
  EPS[$1]=$(sed -n 's/.*(\([0-9.]*\) examples\/s).*/\1/p' <<<"$line")
  AUC[$1]=$(sed -n 's/.*AUC \([0-9.]*\).*/\1/p' <<<"$line")
  LOGLOSS[$1]=$(sed -n 's/.*test logloss \([0-9.]*\).*/\1/p' <<<"$line")
  [ -n "${EPS[$1]}" ] && [ -n "${AUC[$1]}" ]
}
# A field of a JSON object (the last line of a file that starts with '{'), formatted by FORMAT (%-style) when
# it is a number: json_field FILE KEY [FORMAT]. Empty when there is none.
json_field() {
  python3 - "$1" "$2" "${3:-%.6g}" <<'EOF'
import json, sys
lines = [l for l in open(sys.argv[1], errors="replace") if l.startswith("{")]
value = json.loads(lines[-1]).get(sys.argv[2]) if lines else None
print("" if value is None else (sys.argv[3] % value) if isinstance(value, (int, float)) else value)
EOF
}

say "$( [ "$dry_run" = true ] && echo "DRY RUN: " )$rows training rows; budget ${budget} s;" \
  "bundle $BUNDLE (commit $bundle_commit); work $work"
if [ ! -x "$BUNDLE/bin/kestrel_worker" ]; then
  say "no $BUNDLE/bin/kestrel_worker: run scripts/gpu_bundle.sh --bench --xz here and carry .gpu"
  for part in "${PARTS[@]}"; do record "$part" FAILED "no bundle"; done
fi

# --- datagen -------------------------------------------------------------------------------------------------
data="$work/data"
if [ -z "${STATUS[datagen]:-}" ]; then
  if run_part datagen 150 "$kbin/worker/data/kestrel_datagen" --train_rows="$rows" --test_rows="$test_rows" \
      --max_vocab=100000 --out_dir="$data" && [ -s "$data/train.tsv" ]; then
    record datagen ok "$(du -sh "$data/train.tsv" | cut -f1) train.tsv"
  else
    record datagen FAILED "exit status or no train.tsv"
  fi
fi
data_ok=true
[ "${STATUS[datagen]}" = ok ] || data_ok=false
model='model { type: DEEPFM embedding_dim: 16 hidden: [256, 128]
        wide_optimizer { type: ADAGRAD learning_rate: 0.05 initial_accumulator: 0.1 } }'
printf '%s\ndata { format: CRITEO }\ntrain { batch_size: %d epochs: 1 }\n' "$model" "$BATCH" >"$work/cluster.pbtxt"
printf '%s\ndata { format: CRITEO train_files: "%s" test_files: "%s" }\ntrain { batch_size: %d epochs: 1 }\n' \
  "$model" "$data/train.tsv" "$data/test.tsv" "$BATCH" >"$work/local.pbtxt"
sed 's/^model { /model { gemm_precision: GEMM_TF32 /' "$work/local.pbtxt" >"$work/local_tf32.pbtxt"
skip_all_needing_data() {
  for part in "$@"; do [ -z "${STATUS[$part]:-}" ] && record "$part" FAILED "no data (datagen failed)"; done
}
[ "$data_ok" = true ] || skip_all_needing_data cuda_step cuda_step_tf32 local_cuda local_cuda_tf32 local_cpu torch_peer \
  cluster_1w cluster_2w

# --- (a) the CUDA step alone, fp32 and TF32 GEMMs -------------------------------------------------------------
for part in cuda_step cuda_step_tf32; do
  [ -z "${STATUS[$part]:-}" ] || continue
  precision=GEMM_FP32
  [ "$part" = cuda_step_tf32 ] && precision=GEMM_TF32
  if [ "$dry_run" = true ]; then
    record "$part" skipped "no GPU (dry run)"
  elif run_part "$part" 120 "$kbin/cuda_step_bench" --configs="16/256,128/$BATCH" --gemm_precision="$precision"; then
    # | dim | MLP | batch | unique keys | CPU step | CUDA step | speed-up | CUDA examples/s | Pool | SegmentSum |
    EPS[$part]=$(awk -F'|' '$2 ~ /^ *16 *$/ { gsub(/ /, "", $9); print $9; exit }' "$logs/$part.log")
    if [ -n "${EPS[$part]}" ]; then
      record "$part" ok "$(awk -F' *[|] *' '$2 == "16" { printf "CUDA step %s, CPU step %s: %s", $7, $6, $8; exit }' \
        "$logs/$part.log")"
    else
      record "$part" FAILED "no report row"
    fi
  else
    record "$part" FAILED "exit status"
  fi
done

# --- (b) kestrel_worker --local on CUDA and on the CPU -------------------------------------------------------
for part in local_cuda local_cuda_tf32 local_cpu; do
  [ -z "${STATUS[$part]:-}" ] || continue
  device=cuda
  [ "$part" = local_cpu ] && device=cpu
  config="$work/local.pbtxt"
  [ "$part" = local_cuda_tf32 ] && config="$work/local_tf32.pbtxt"
  if [ "$device" = cuda ] && [ "$dry_run" = true ]; then
    record "$part" skipped "no GPU (dry run)"
    continue
  fi
  if run_part "$part" 240 "$kbin/cmd/kestrel_worker" --local --device="$device" --config="$config" \
      && parse_finished "$part"; then
    record "$part" ok "$(grep -o 'time by phase: .*' "$logs/$part.log" | tail -1 | cut -c16-)"
  else
    record "$part" FAILED "exit status or no finished: line"
  fi
done

# --- (c) the PyTorch peer ------------------------------------------------------------------------------------
if [ -z "${STATUS[torch_peer]:-}" ]; then
  peer_python=""
  for candidate in ${PYTHON:+"$PYTHON"} python3 /usr/bin/python3; do
    if command -v "$candidate" >/dev/null && "$candidate" -c 'import torch' 2>/dev/null; then
      peer_python=$candidate
      break
    fi
  done
  peer_device=cuda
  if [ "$dry_run" = true ]; then
    peer_device=cpu
    LABEL[torch_peer]="PyTorch peer, CPU (dry run)"
  fi
  if [ -z "$peer_python" ]; then
    if [ "$dry_run" = true ]; then
      record torch_peer skipped "no python3 with torch here"
    else
      record torch_peer FAILED "no python3 with torch (set PYTHON)"
    fi
  elif run_part torch_peer 300 "$peer_python" bench/torch_peer.py --device "$peer_device" --sparse_grad both \
      --train "$data/train.tsv" --test "$data/test.tsv" --cache_dir "$work/peer_cache" --model deepfm \
      --embedding_dim 16 --hidden 256,128 --batch_size "$BATCH" --epochs 1 \
      --wide_opt adagrad --wide_lr 0.05 --wide_initial_accumulator 0.1 \
      && [ -n "$(json_field "$logs/torch_peer.log" examples_per_second)" ]; then
    EPS[torch_peer]=$(json_field "$logs/torch_peer.log" examples_per_second %.0f)
    AUC[torch_peer]=$(json_field "$logs/torch_peer.log" auc %.5f)
    LOGLOSS[torch_peer]=$(json_field "$logs/torch_peer.log" logloss %.5f)
    record torch_peer ok "$(python3 - "$logs/torch_peer.log" <<'EOF'
import json, sys
r = json.loads([l for l in open(sys.argv[1], errors="replace") if l.startswith("{")][-1])
others = "; ".join("%s gradients %.0f examples/s, AUC %.5f" % (v["sparse_grad"], v["examples_per_second"], v["auc"])
                   for v in r.get("variants", []))
print("torch %s, %s, counted: %s gradients (%s)" % (r.get("torch"), r.get("gpu", r.get("device")), r.get("sparse_grad"),
                                                     others))
EOF
)"
  else
    record torch_peer FAILED "exit status or no JSON line"
  fi
fi

# --- (d) clusters --------------------------------------------------------------------------------------------
cluster_device=cuda
[ "$dry_run" = true ] && cluster_device=cpu
declare -A WIRE SERVER_CPU WORKER_CPU
for workers in 1 2; do
  part=cluster_${workers}w
  [ -z "${STATUS[$part]:-}" ] || continue
  if [ "$dry_run" = true ]; then
    LABEL[$part]="cluster: 2 CPU servers + $workers CPU worker$([ "$workers" -gt 1 ] && echo s) (dry run)"
  fi
  seconds=$(limit 240)
  if run_part "$part" "$seconds" env PATH="$tools:$PATH" KESTREL_BIN="$kbin" python3 bench/gpu_bench_cluster.py \
      --kestrel scripts/kestrel --run_dir "$work/run_$part" --workers "$workers" --timeout $((seconds - 20)) \
      --log "$logs/$part.launcher.log" -- \
      --config "$work/cluster.pbtxt" --data "$data" --servers 2 --workers "$workers" --device "$cluster_device" \
      --consistency bsp --checkpoint_every_clocks 0 --no_build; then
    f="$logs/$part.log"
    EPS[$part]=$(json_field "$f" examples_per_second %.0f)
    AUC[$part]=$(json_field "$f" auc %.5f)
    LOGLOSS[$part]=$(json_field "$f" logloss %.5f)
    WIRE[$part]=$(json_field "$f" wire_bytes_per_example %.0f)
    SERVER_CPU[$part]=$(json_field "$f" server_cpu_seconds_per_1000 %.4f)
    WORKER_CPU[$part]=$(json_field "$f" worker_cpu_seconds_per_1000 %.4f)
    record "$part" ok "$(json_field "$f" examples %.0f) examples in $(json_field "$f" seconds %.2f) s of training"
  else
    record "$part" FAILED "see its log"
  fi
  # The processes' logs, for the log archive.
  for name in "$work/run_$part"/*.log "$work/run_$part/summary.json"; do
    [ -f "$name" ] && cp "$name" "$logs/$part.$(basename "$name")"
  done
done

# --- (e) the host side alone: the pipeline ceiling on this machine's cores ------------------------------------
# Its own data (the same generator, seed and sizes; 1000 test rows), made in the work folder.
if [ -z "${STATUS[ceiling]:-}" ]; then
  if run_part ceiling 150 "$kbin/pipeline_ceiling_bench" --stand_in_us=0,2840 --runs=3 --train_rows="$rows" \
      --work_dir="$work/ceiling" --output="$logs/pipeline_ceiling.md"; then
    # | examples/s | median | ... (the first table: stand-in 0; the second: 2.84 ms)
    EPS[ceiling]=$(awk -F' *[|] *' '$2 == "examples/s" { print $3; exit }' "$logs/pipeline_ceiling.md")
    ceiling_per_core=$(awk -F' *[|] *' '$2 == "examples per CPU-second (per core)" { print $3; exit }' \
      "$logs/pipeline_ceiling.md")
    ceiling_gpu=$(awk -F' *[|] *' '$2 == "examples/s" { if (++n == 2) { print $3; exit } }' "$logs/pipeline_ceiling.md")
    record ceiling ok "stand-in 0: ${EPS[ceiling]:-?} examples/s, ${ceiling_per_core:-?} per CPU-second; stand-in 2.84 ms: ${ceiling_gpu:-?} examples/s"
  else
    record ceiling FAILED "exit status"
  fi
fi

# --- The report ----------------------------------------------------------------------------------------------
ratio() {  # ratio A B: A / B to 2 decimals, or — when either is missing
  awk -v a="${1:-}" -v b="${2:-}" 'BEGIN { if (a == "" || b == "" || b + 0 == 0) print "—"; else printf "%.2f", a / b }'
}
diff5() {
  awk -v a="${1:-}" -v b="${2:-}" 'BEGIN { if (a == "" || b == "") print "—"; else printf "%+.5f", a - b }'
}
cell() { if [ -n "${1:-}" ]; then printf '%s' "$1"; else printf '—'; fi; }
if [ "$has_gpu" = true ]; then
  gpu=$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | head -n 4 | paste -sd ';' -)
else
  gpu="none ($([ "$dry_run" = true ] && echo "dry run" || echo "nvidia-smi finds no GPU"))"
fi
cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
report="$OUT/gpu_bench.md"
{
  echo "# Kestrel GPU benchmark$([ "$dry_run" = true ] && echo " — DRY RUN on a machine without a GPU (not GPU figures)")"
  echo
  echo "| | |"
  echo "|---|---|"
  echo "| GPU (name, memory, driver) | $gpu |"
  echo "| CPU | ${cpu:-unknown}, $(nproc) cores, $(awk '/MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo) |"
  echo "| Binaries (bundle commit) | $bundle_commit |"
  echo "| Date | $(date -u '+%Y-%m-%d %H:%M:%S UTC') |"
  echo "| Data | kestrel_datagen --train_rows=$rows --test_rows=$test_rows --max_vocab=100000 |"
  echo "| Run time | $(($(date +%s) - started)) s (budget $budget s) |"
  echo
  echo "Model: DeepFM, embedding dim 16, MLP 256-128, batch $BATCH per worker, 1 epoch in file order; wide table Adagrad"
  echo "(0.05, accumulator 0.1), embeddings Adagrad 0.005, dense Adam 0.001 (the PyTorch peer's defaults, the same)."
  echo "examples/s: kestrel_worker's own figure (training, reading the files included; evaluation excluded); the"
  echo "clusters': the workers' examples over the longest worker's training seconds (their \"done\" records); PyTorch's:"
  echo "its training steps only (data parsed and moved to the GPU before the clock); the CUDA step's: one prepared batch."
  echo
  echo "| part | status | examples/s | test AUC | test logloss | wall s | GPU utilization (mean) | notes |"
  echo "|---|---|---:|---:|---:|---:|---|---|"
  for part in "${PARTS[@]}"; do
    echo "| ${LABEL[$part]} | ${STATUS[$part]:-not run} | $(cell "${EPS[$part]:-}") | $(cell "${AUC[$part]:-}") |" \
      "$(cell "${LOGLOSS[$part]:-}") | $(cell "${WALL[$part]:-}") | $(cell "${GPU_UTIL[$part]:-}") | ${NOTE[$part]:-} |"
  done
  echo
  echo "Ratios (examples/s, within this run):"
  echo
  echo "| ratio | value |"
  echo "|---|---:|"
  echo "| local CUDA end-to-end / CUDA step alone | $(ratio "${EPS[local_cuda]:-}" "${EPS[cuda_step]:-}") |"
  echo "| local CUDA / PyTorch GPU peer | $(ratio "${EPS[local_cuda]:-}" "${EPS[torch_peer]:-}") |"
  echo "| test AUC: local CUDA − PyTorch peer | $(diff5 "${AUC[local_cuda]:-}" "${AUC[torch_peer]:-}") |"
  echo "| local CUDA / local CPU | $(ratio "${EPS[local_cuda]:-}" "${EPS[local_cpu]:-}") |"
  echo "| CUDA step alone, TF32 / fp32 | $(ratio "${EPS[cuda_step_tf32]:-}" "${EPS[cuda_step]:-}") |"
  echo "| local CUDA TF32 end-to-end / CUDA step alone TF32 | $(ratio "${EPS[local_cuda_tf32]:-}" "${EPS[cuda_step_tf32]:-}") |"
  echo "| local CUDA TF32 / PyTorch GPU peer | $(ratio "${EPS[local_cuda_tf32]:-}" "${EPS[torch_peer]:-}") |"
  echo "| test AUC: local CUDA TF32 − PyTorch peer | $(diff5 "${AUC[local_cuda_tf32]:-}" "${AUC[torch_peer]:-}") |"
  echo "| host side alone (stand-in 0) / local CUDA | $(ratio "${EPS[ceiling]:-}" "${EPS[local_cuda]:-}") |"
  if [ "$cluster_device" = cuda ]; then
    echo "| cluster, 1 worker / local CUDA | $(ratio "${EPS[cluster_1w]:-}" "${EPS[local_cuda]:-}") |"
    echo "| cluster, 2 workers / local CUDA | $(ratio "${EPS[cluster_2w]:-}" "${EPS[local_cuda]:-}") |"
  else
    echo "| cluster, 1 CPU worker / local CPU (dry run) | $(ratio "${EPS[cluster_1w]:-}" "${EPS[local_cpu]:-}") |"
    echo "| cluster, 2 CPU workers / local CPU (dry run) | $(ratio "${EPS[cluster_2w]:-}" "${EPS[local_cpu]:-}") |"
    echo "| test AUC: local CPU − PyTorch peer (CPU, dry run) | $(diff5 "${AUC[local_cpu]:-}" "${AUC[torch_peer]:-}") |"
  fi
  echo
  echo "Clusters (\`kestrel local --servers 2 --consistency bsp\`, mutual TLS, --checkpoint_every_clocks 0), measured"
  echo "by bench/gpu_bench_cluster.py when the last worker finished training: bytes sent over the loopback interface"
  echo "(all of the job's traffic, TCP/IP and TLS included, and any other loopback traffic then) and the processes'"
  echo "CPU time from /proc/<pid>/stat, per example:"
  echo
  echo "| cluster | examples/s | loopback bytes per example | server CPU-s per 1000 examples | worker CPU-s per 1000 examples |"
  echo "|---|---:|---:|---:|---:|"
  for part in cluster_1w cluster_2w; do
    echo "| ${LABEL[$part]} | $(cell "${EPS[$part]:-}") | $(cell "${WIRE[$part]:-}") | $(cell "${SERVER_CPU[$part]:-}") |" \
      "$(cell "${WORKER_CPU[$part]:-}") |"
  done
  for part in "${PARTS[@]}"; do
    [ "${STATUS[$part]:-}" = FAILED ] || continue
    echo
    echo "### FAILED: ${LABEL[$part]} (${NOTE[$part]:-})"
    echo
    echo '```'
    tail -n 25 "$logs/$part.log" 2>/dev/null
    [ -f "$logs/$part.launcher.log" ] && tail -n 15 "$logs/$part.launcher.log"
    echo '```'
  done
  echo
  echo "Command: \`bench/run_gpu_bench.sh$([ "$dry_run" = true ] && echo " --dry_run") --rows=$rows --budget=$budget\`;"
  echo "every part's log: gpu_bench_logs.tar.gz beside this report."
} >"$report"
tar -czf "$OUT/gpu_bench_logs.tar.gz" -C "$work" logs
# A checkout's copy: bench/results/gpu_bench.md from a GPU, gpu_bench_dry_run.md from a dry run (a run that
# found no GPU leaves both alone).
if [ -w "$REPO/bench/results" ] && [ "$has_gpu" = true ] || [ "$dry_run" = true ]; then
  name=gpu_bench.md
  [ "$dry_run" = true ] && name=gpu_bench_dry_run.md
  cp "$report" "$REPO/bench/results/$name" 2>/dev/null
fi
cat "$report"
echo
echo "run_gpu_bench: report $report; logs $OUT/gpu_bench_logs.tar.gz$([ "$failed" -ne 0 ] && echo "; some parts FAILED")"
exit "$failed"
