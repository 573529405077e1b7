#!/usr/bin/env bash
# Runs on a lent GPU machine, from the repository root, over the bundle scripts/gpu_bundle.sh made here:
#   $OUT/nvidia-smi.txt               the machine's GPU, driver and CUDA version
#   $OUT/<name>.txt, $OUT/<name>.xml  each gpu_bundle/bin/*_test's output and its GoogleTest XML report
#   $OUT/<name>.txt                   each gpu_bundle/bin/*_bench's stdout (stderr in <name>.stderr.txt)
# Prints one line per binary and exits non-zero if any test (or benchmark) fails, or there is nothing to run.
# OUT defaults to a fresh temporary folder. GPU_CHECK_TIMEOUT (seconds, default 300) bounds each binary, so
# one hang cannot eat the whole device call.
#
# Usage (device tool): run(command="scripts/gpu_check.sh", carry=["gpu_bundle"])
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

BUNDLE="$PWD/gpu_bundle"
OUT=${OUT:-$(mktemp -d)}
TIMEOUT=${GPU_CHECK_TIMEOUT:-300}
mkdir -p "$OUT"

if [ ! -d "$BUNDLE/bin" ]; then
  echo "gpu_check: no $BUNDLE/bin: run scripts/gpu_bundle.sh first and carry gpu_bundle" >&2
  exit 1
fi

nvidia-smi >"$OUT/nvidia-smi.txt" 2>&1 || echo "gpu_check: nvidia-smi failed (see nvidia-smi.txt)"
head -n 15 "$OUT/nvidia-smi.txt"

# The bundled libraries, then the toolkit's (the binaries' rpath names it too).
export LD_LIBRARY_PATH="$BUNDLE/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# Tests expect Bazel's writable scratch folder.
TEST_TMPDIR=$(mktemp -d)
export TEST_TMPDIR

ran=0
failed=0
for binary in "$BUNDLE"/bin/*_test; do
  [ -x "$binary" ] || continue
  name=$(basename "$binary")
  ran=$((ran + 1))
  timeout "$TIMEOUT" "$binary" --gtest_output="xml:$OUT/$name.xml" >"$OUT/$name.txt" 2>&1
  rc=$?
  # GoogleTest's closing counts, so a run that only skipped is visible here too.
  summary=$(grep -E '^\[  (PASSED|FAILED|SKIPPED) +\] [0-9]+ test' "$OUT/$name.txt" | tr -s ' ' | paste -sd ';' -)
  if [ "$rc" -eq 0 ]; then
    echo "PASS $name ($summary)"
  else
    failed=$((failed + 1))
    echo "FAIL $name: exit $rc ($summary)"
    grep -E '^\[  FAILED  \]|Failure|error' "$OUT/$name.txt" | head -n 20 | sed 's/^/  /'
  fi
done

for binary in "$BUNDLE"/bin/*_bench; do
  [ -x "$binary" ] || continue
  name=$(basename "$binary")
  ran=$((ran + 1))
  timeout "$TIMEOUT" "$binary" >"$OUT/$name.txt" 2>"$OUT/$name.stderr.txt"
  rc=$?
  if [ "$rc" -eq 0 ]; then
    echo "DONE $name ($(wc -l <"$OUT/$name.txt") lines)"
  else
    failed=$((failed + 1))
    echo "FAIL $name: exit $rc"
    tail -n 20 "$OUT/$name.stderr.txt" | sed 's/^/  /'
  fi
done

rm -rf "$TEST_TMPDIR"
if [ "$ran" -eq 0 ]; then
  echo "gpu_check: nothing to run in $BUNDLE/bin" >&2
  exit 1
fi
echo "gpu_check: $ran run, $failed failed; results in $OUT"
[ "$failed" -eq 0 ]
