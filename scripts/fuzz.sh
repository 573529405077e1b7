#!/usr/bin/env bash
# Builds Kestrel's libFuzzer targets (every cc_binary tagged "fuzz", see tools/fuzz.bzl) with clang-14, ASan and
# UBSan (.bazelrc's --config=fuzz) in a Bazel output base of their own, so the default gcc build's cache is never
# evicted, then fuzzes each for N seconds starting from its checked-in corpus tests/fuzz_corpus/<target>/.
#
# Usage: scripts/fuzz.sh [--seconds N] [--jobs J] [--junit FILE] [target...]
#   --seconds N   how long each target fuzzes (default 60); a longer run is just a larger N
#   --jobs J      how many targets fuzz at once, one process each (default 1)
#   --junit FILE  also write one JUnit test case per target (scripts/test.sh counts them)
#   target        ps_request, //server:ps_request_fuzz or ps_request_fuzz; default: every fuzz target
# New interesting inputs go to a scratch corpus under $KESTREL_FUZZ_WORK (default ~/.cache/kestrel-fuzz), never
# into the checked-in one. A crash (a sanitizer report, a failed FUZZ_CHECK, a timeout or running out of memory)
# is saved there as <target>/crash-* (or leak-*, timeout-*, oom-*) with the command that reproduces it: fix the
# bug, then add the input to tests/fuzz_corpus/<target>/regressions/ so the *_fuzz_replay test keeps it fixed.
# Prints the executions of each target and exits non-zero when any target crashed or did not build.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

seconds=60
jobs=1
junit=""
targets=()
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) seconds="$2"; shift 2 ;;
    --jobs) jobs="$2"; shift 2 ;;
    --junit) junit="$2"; shift 2 ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    -*) echo "fuzz.sh: unknown option $1" >&2; exit 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done
case "$seconds$jobs" in
  *[!0-9]*) echo "fuzz.sh: --seconds and --jobs take whole numbers" >&2; exit 2 ;;
esac
if [ "$jobs" -lt 1 ]; then jobs=1; fi

# The build's packages plus clang-14, its libFuzzer/sanitizer runtimes and lld (idempotent).
scripts/setup.sh clang-14 libclang-rt-14-dev lld || { echo "fuzz.sh: could not install the fuzzing toolchain" >&2; exit 1; }

output_base="${KESTREL_FUZZ_OUTPUT_BASE:-$HOME/.cache/bazel-kestrel-fuzz}"
work="${KESTREL_FUZZ_WORK:-$HOME/.cache/kestrel-fuzz}"
fuzz_bazel() {
  bazel --output_base="$output_base" --max_idle_secs=600 "$@"
}

# Every fuzz target, as labels.
mapfile -t all < <(fuzz_bazel query 'attr(tags, "\bfuzz\b", kind("cc_binary", //...))' 2>/dev/null | sort)
if [ "${#all[@]}" -eq 0 ]; then
  echo "fuzz.sh: bazel query found no fuzz target" >&2
  exit 1
fi
labels=()
if [ "${#targets[@]}" -eq 0 ]; then
  labels=("${all[@]}")
else
  for t in "${targets[@]}"; do
    name="${t##*:}"
    name="${name%_fuzz}_fuzz"
    found=""
    for label in "${all[@]}"; do
      if [ "${label##*:}" = "$name" ]; then found="$label"; fi
    done
    if [ -z "$found" ]; then
      echo "fuzz.sh: no fuzz target $t (have: ${all[*]##*:})" >&2
      exit 2
    fi
    labels+=("$found")
  done
fi

# The corpus name of a label: //server:ps_request_fuzz -> ps_request.
corpus_of() {
  local name="${1##*:}"
  echo "${name%_fuzz}"
}

declare -A result executions
build_log="$work/build.log"
mkdir -p "$work"
echo "fuzz.sh: building ${#labels[@]} fuzz targets (clang-14, ASan + UBSan, output base $output_base)"
build_start=$SECONDS
if ! fuzz_bazel build --config=fuzz "${labels[@]}" >"$build_log" 2>&1; then
  tail -40 "$build_log"
  echo "fuzz.sh: the build failed (log: $build_log)"
  for label in "${labels[@]}"; do result[$label]="did not build"; done
else
  echo "fuzz.sh: built in $((SECONDS - build_start)) s"
fi
bin="$(fuzz_bazel info --config=fuzz bazel-bin 2>/dev/null)"

# Fuzzes one target; writes its log to $work/<corpus>/fuzz.log.
run_one() {
  local label="$1" corpus dir binary
  corpus="$(corpus_of "$label")"
  dir="$work/$corpus"
  binary="$bin/$(echo "${label#//}" | tr ':' '/')"
  mkdir -p "$dir/corpus"
  # -timeout: one input may take this long; -rss_limit_mb: the whole process may hold this much.
  "$binary" -max_total_time="$seconds" -print_final_stats=1 -timeout=20 -rss_limit_mb=2048 \
    -artifact_prefix="$dir/" "$dir/corpus" "tests/fuzz_corpus/$corpus" >"$dir/fuzz.log" 2>&1
  echo $? >"$dir/rc"
}

pending=()
for label in "${labels[@]}"; do
  if [ -n "${result[$label]:-}" ]; then continue; fi
  pending+=("$label")
done
for label in "${pending[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n; done
  echo "fuzz.sh: fuzzing $(corpus_of "$label") for ${seconds} s"
  rm -f "$work/$(corpus_of "$label")/rc"
  run_one "$label" &
done
wait
for label in "${pending[@]}"; do
  corpus="$(corpus_of "$label")"
  log="$work/$corpus/fuzz.log"
  if [ "$(cat "$work/$corpus/rc" 2>/dev/null)" = "0" ]; then
    result[$label]="ok"
  else
    result[$label]="crashed"
  fi
  executions[$label]="$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)"
done

failed=0
echo
printf '%-28s %-14s %s\n' "fuzz target" "result" "executions"
for label in "${labels[@]}"; do
  printf '%-28s %-14s %s\n' "$(corpus_of "$label")" "${result[$label]}" "${executions[$label]:--}"
  if [ "${result[$label]}" != "ok" ]; then failed=$((failed + 1)); fi
done
for label in "${labels[@]}"; do
  if [ "${result[$label]}" != "crashed" ]; then continue; fi
  corpus="$(corpus_of "$label")"
  echo
  echo "== $corpus crashed; the end of $work/$corpus/fuzz.log:"
  grep -v '^#[0-9]' "$work/$corpus/fuzz.log" | tail -30
  for input in "$work/$corpus"/crash-* "$work/$corpus"/leak-* "$work/$corpus"/timeout-* "$work/$corpus"/oom-*; do
    if [ -f "$input" ]; then
      echo "reproduce: $bin/$(echo "${label#//}" | tr ':' '/') $input"
      echo "keep it:   cp $input tests/fuzz_corpus/$corpus/regressions/"
    fi
  done
done

if [ -n "$junit" ]; then
  {
    echo '<?xml version="1.0" encoding="UTF-8"?>'
    echo "<testsuites><testsuite name=\"fuzz\" tests=\"${#labels[@]}\" failures=\"$failed\">"
    for label in "${labels[@]}"; do
      echo "<testcase classname=\"fuzz\" name=\"$(corpus_of "$label") (${seconds} s, ${executions[$label]:-0} executions)\">"
      if [ "${result[$label]}" != "ok" ]; then
        echo "<failure message=\"${result[$label]}\">see $work/$(corpus_of "$label")/fuzz.log</failure>"
      fi
      echo "</testcase>"
    done
    echo "</testsuite></testsuites>"
  } >"$junit"
fi
echo
echo "fuzz.sh: $((${#labels[@]} - failed)) of ${#labels[@]} fuzz targets ran ${seconds} s without a crash"
[ "$failed" -eq 0 ]
