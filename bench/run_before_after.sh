#!/usr/bin/env bash
# Training throughput of two builds on one machine, alternated: bench/train_bench built at BASE (a commit, built
# in a temporary git worktree) and at this checkout, each driving its own scheduler, server and worker binaries
# on the same generated data, ROUNDS rounds of "BASE, then this checkout". Each round's after / before ratio is
# taken within the round; the report gives every round and the medians, and the test AUC of both (a change that
# moves no arithmetic leaves it equal). For refactors and other changes that must not cost speed.
#
#   bench/run_before_after.sh BASE                  # realistic DeepFM, in-process and a 2+2 BSP cluster, 3 rounds
#   bench/run_before_after.sh BASE --rounds=5 --configs=in-process --models=LOGISTIC_REGRESSION
#
# Options (the rest go to train_bench): --rounds=N (default 3), --output=FILE (default
# bench/results/before_after_train_bench.md), --work_dir=DIR (default /tmp/kestrel_before_after: both builds'
# binaries, the data both train on, the rounds' reports). Sizes: the realistic ones of bench/run_train_bench.sh.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
if [[ $# -lt 1 || "$1" == --* ]]; then
  echo "usage: $0 BASE_COMMIT [--rounds=N] [--output=FILE] [--work_dir=DIR] [train_bench flags...]" >&2
  exit 2
fi
command_line=("$@")
base="$(git rev-parse --verify "$1^{commit}")"
shift
rounds=3
output=bench/results/before_after_train_bench.md
work=/tmp/kestrel_before_after
extra=()
for arg in "$@"; do
  case "${arg}" in
    --rounds=*) rounds="${arg#--rounds=}" ;;
    --output=*) output="${arg#--output=}" ;;
    --work_dir=*) work="${arg#--work_dir=}" ;;
    *) extra+=("${arg}") ;;
  esac
done

# shellcheck source=bench/bench_env.sh
source bench/bench_env.sh
commit="$(bench_commit)"
invocation="$(bench_invocation bench/run_before_after.sh "${command_line[@]}")"
targets=(//bench:train_bench //scheduler:kestrel_scheduler //server:kestrel_server)

# Copies the binaries train_bench needs out of the bazel-bin of checkout $1 into $2 (wherever the checkout's
# layout put kestrel_worker).
collect() {
  local checkout="$1" dest="$2" bin worker
  bin="$(cd "${checkout}" && bazel info -c opt bazel-bin 2>/dev/null)"
  worker="$(cd "${bin}" && find . -name kestrel_worker -type f -path '*kestrel_worker' | grep -v runfiles | head -n 1)"
  rm -rf "${dest}" && mkdir -p "${dest}"
  cp -L "${bin}/bench/train_bench" "${bin}/scheduler/kestrel_scheduler" "${bin}/server/kestrel_server" \
    "${bin}/${worker}" "${dest}/"
}

mkdir -p "${work}"
echo "building ${base:0:7} (before) in a temporary worktree"
tree="${work}/base_tree"
git worktree remove --force "${tree}" 2>/dev/null || rm -rf "${tree}"
git worktree add --detach "${tree}" "${base}" > /dev/null
worker_target="$(cd "${tree}" && bazel query 'attr(name, "^kestrel_worker$", //...)' 2>/dev/null | head -n 1)"
(cd "${tree}" && bazel build -c opt "${targets[@]}" "${worker_target}")
collect "${tree}" "${work}/before"
(cd "${tree}" && bazel shutdown) || true
git worktree remove --force "${tree}"
echo "building this checkout (after, ${commit})"
bazel build -c opt "${targets[@]}" //cmd:kestrel_worker
collect . "${work}/after"

for round in $(seq 1 "${rounds}"); do
  for side in before after; do
    echo "round ${round}: ${side}"
    "${work}/${side}/train_bench" \
      --scheduler_binary="${work}/${side}/kestrel_scheduler" \
      --server_binary="${work}/${side}/kestrel_server" \
      --worker_binary="${work}/${side}/kestrel_worker" \
      --work_dir="${work}/train_work" --runs=1 --peer=false --mtls=false \
      --models=DEEPFM --configs=in-process,bsp \
      --embedding_dim=16 --hidden=256,128 --batch_size=4096 --train_rows=1000000 --test_rows=100000 \
      --max_vocab=100000 \
      --output="${work}/${side}_${round}.md" "${extra[@]}" > "${work}/${side}_${round}.log" 2>&1 ||
      { tail -n 30 "${work}/${side}_${round}.log" >&2; exit 1; }
  done
done

python3 - "${work}" "${rounds}" "${base:0:7}" "${commit}" "${invocation}" "${output}" <<'PY'
import os, platform, re, statistics, subprocess, sys
work, rounds, base, commit, invocation, output = sys.argv[1], int(sys.argv[2]), *sys.argv[3:]

def rows(path):
    """{configuration: (examples/s, test AUC, test logloss)} of a train_bench report."""
    out = {}
    for line in open(path):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 4 and cells[0].startswith("Kestrel") and re.fullmatch(r"[0-9]+", cells[1]):
            out[cells[0]] = (int(cells[1]), cells[2], cells[3])
    return out

runs = {side: [rows(f"{work}/{side}_{r}.md") for r in range(1, rounds + 1)] for side in ("before", "after")}
configs = list(runs["after"][0])
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
lines = [f"# Training throughput before and after: {base} and {commit}, alternated on one machine", "",
         f"`{invocation}`: bench/train_bench built at {base} (\"before\") and at {commit} (\"after\"), each driving "
         f"its own scheduler, server and worker binaries on the same generated data (realistic DeepFM: embedding "
         f"dim 16, MLP 256-128, batch 4096, 1M train rows, 100k test rows), {rounds} rounds of before then after; "
         f"each ratio is taken within its round.", "",
         "| | |", "|---|---|", f"| nproc | {os.cpu_count()} |", f"| CPU | {cpu} |",
         f"| Kernel | {platform.system()} {platform.release()} |",
         f"| Date | {subprocess.run(['date', '-u', '+%Y-%m-%d %H:%M UTC'], capture_output=True, text=True).stdout.strip()} |",
         "", "| Configuration | round | before | after | after / before |", "|---|---:|---:|---:|---:|"]
same = True
for config in configs:
    ratios = []
    for r in range(rounds):
        b, a = runs["before"][r].get(config), runs["after"][r].get(config)
        if b is None or a is None:
            continue
        ratios.append(a[0] / b[0])
        same = same and b[1:] == a[1:]
        lines.append(f"| {config if r == 0 else ''} | {r + 1} | {b[0]} | {a[0]} | {a[0] / b[0]:.2f} |")
    before = statistics.median(runs["before"][r][config][0] for r in range(rounds))
    after = statistics.median(runs["after"][r][config][0] for r in range(rounds))
    lines.append(f"| | **median** | **{before}** | **{after}** | **{statistics.median(ratios):.2f}** "
                 f"(median of the rounds' ratios) |")
lines += ["", "Test AUC / logloss " + ("are the same before and after in every round: " if same else
          "DIFFER between the builds: ") + "; ".join(
          f"{c}: {runs['before'][0][c][1]} / {runs['before'][0][c][2]} before, "
          f"{runs['after'][0][c][1]} / {runs['after'][0][c][2]} after" for c in configs) + ".", ""]
open(output, "w").write("\n".join(lines))
print("\n".join(lines))
PY
