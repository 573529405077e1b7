# shellcheck shell=bash
# Shared by the bench/run_*.sh scripts (source it): the commit and command line a report records.
#
#   bench_commit          -> short hash of HEAD, "-dirty" when tracked files changed, or "unknown"
#   bench_invocation ARGS -> the script's path and its arguments, shell-quoted

bench_commit() {
  local commit
  commit="$(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  # GIT_OPTIONAL_LOCKS=0: status must not write the index (others may be using this checkout).
  if [[ "${commit}" != unknown && -n "$(GIT_OPTIONAL_LOCKS=0 git status --porcelain --untracked-files=no 2>/dev/null)" ]]; then
    commit="${commit}-dirty"
  fi
  echo "${commit}"
}

bench_invocation() {
  local invocation="$1"
  shift
  local arg
  for arg in "$@"; do
    invocation+=" $(printf '%q' "${arg}")"
  done
  echo "${invocation}"
}

# The `kestrel_datagen --format=schema` set of bench/run_history_bench.sh and run_history_cluster.sh, generated
# once per row counts under WORK_DIR (its log in WORK_DIR/datagen.log) and reused; prints its directory.
#   data="$(bench_history_data BIN WORK_DIR TRAIN_ROWS TEST_ROWS)"
bench_history_data() {
  local bin="$1" work_dir="$2" train_rows="$3" test_rows="$4"
  local data="${work_dir}/data_${train_rows}_${test_rows}"
  mkdir -p "${work_dir}"
  if [[ ! -f "${data}/truth.txt" ]]; then
    "${bin}/worker/data/kestrel_datagen" --format=schema --out_dir="${data}" --train_rows="${train_rows}" \
      --test_rows="${test_rows}" > "${work_dir}/datagen.log" 2>&1 || { cat "${work_dir}/datagen.log" >&2; return 1; }
  fi
  echo "${data}"
}
