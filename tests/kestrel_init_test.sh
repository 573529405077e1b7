#!/usr/bin/env bash
# `kestrel init` + `kestrel train`, the README's two commands for your own data: a config guessed from a CSV with
# a header trains in one process to a test AUC well above chance and writes one prediction per test row; bad
# input (no label column, no header, an empty file) exits 2 naming the problem, and --out is then not written.
set -euo pipefail

runfiles="${TEST_SRCDIR:-$PWD}/${TEST_WORKSPACE:-kestrel}"
export KESTREL_BIN="$runfiles"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
kestrel="$runfiles/scripts/kestrel"
fail() {
  echo "FAIL: $*"
  exit 1
}

"$runfiles/worker/data/kestrel_datagen" --format=schema --csv --train_rows=20000 --test_rows=4000 \
  --out_dir="$tmp/data" 2>/dev/null
cd "$tmp"

echo "== kestrel init"
"$kestrel" init --train data/train.csv --test data/test.csv >job.pbtxt 2>init.log ||
  fail "kestrel init: $(cat init.log)"
head -1 job.pbtxt | grep -q "^# Guessed by \`kestrel init\`" || fail "no comment block: $(head -3 job.pbtxt)"
grep -q "format: DELIMITED" job.pbtxt || fail "not a DELIMITED config"
grep -q 'separator: "|"' job.pbtxt || fail "the histories are not multi-valued"
grep -q 'vocabulary: "item_id"' job.pbtxt || fail "the item history does not share the item ids' vocabulary"
grep "^#   " job.pbtxt

echo "== kestrel train"
"$kestrel" train --config job.pbtxt --predictions_out scores.txt --device=cpu --compute_threads=1 2>train.log ||
  fail "kestrel train: $(tail -5 train.log)"
[[ $(wc -l <scores.txt) -eq 4000 ]] || fail "$(wc -l <scores.txt) predictions for 4000 test rows"
auc="$(grep "finished:" train.log | sed -E 's/.* AUC ([0-9.]+).*/\1/')"
python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) > 0.55 else 1)" "$auc" || fail "test AUC $auc"
echo "test AUC $auc"

echo "== kestrel init --search"
# A budget of 1 s runs the first candidate, the guess, and maybe more; the table names each one tried, ranked by
# the validation split only: the test file is never read (its rows here would fail any parser).
head -1 data/test.csv >poison.csv
printf 'not,a,row\n' >>poison.csv
"$kestrel" init --train data/train.csv --test poison.csv --search 1 >searched.pbtxt 2>search.log ||
  fail "kestrel init --search: $(cat search.log)"
head -1 searched.pbtxt | grep -q "^# kestrel init --search 1: [0-9]* candidates" ||
  fail "no search table: $(head -3 searched.pbtxt)"
grep -q "^#   deepfm   guess    guess    [0-9.]* " searched.pbtxt || fail "the guess is not the first try: $(head -6 searched.pbtxt)"
grep -q "<- the winner" searched.pbtxt || fail "no winner marked: $(head -8 searched.pbtxt)"
grep -q 'test_files: "poison.csv"' searched.pbtxt || fail "the winner's config lost the test files"
cat search.log

# expect_error NAME PATTERN ARGS...: kestrel init ARGS exits 2 with PATTERN on stderr and writes no --out.
expect_error() {
  local name="$1" pattern="$2"
  shift 2
  local code=0
  "$kestrel" init --out "$name.pbtxt" "$@" 2>"$name.log" || code=$?
  [[ $code -eq 2 ]] || fail "$name: exit $code, expected 2: $(cat "$name.log")"
  grep -q -- "$pattern" "$name.log" || fail "$name: the message does not name the problem ($pattern): $(cat "$name.log")"
  [[ ! -e "$name.pbtxt" ]] || fail "$name: --out written after a failure"
  echo "ok: $name: $(sed -E 's/^[^]]*\] //' "$name.log")"
}
expect_error no_label 'no label column "clicked"; its columns: "label", "user_id"' --train data/train.csv --label clicked
tail -n +2 data/train.csv >headless.csv
expect_error no_header "a row rather than a header" --train headless.csv
: >empty.csv
expect_error empty "empty.csv is empty" --train empty.csv
echo PASS
