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
