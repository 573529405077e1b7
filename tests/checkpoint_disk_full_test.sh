#!/usr/bin/env bash
# A checkpoint disk that fills up: `kestrel local` with its checkpoint directory on a 3 MiB tmpfs (a mount
# namespace of its own). Training goes on, but the failures are loud: the launcher warns as each one happens,
# `kestrel status` and the scheduler's metrics name them and why (ENOSPC) while the job runs, the summary lists
# them, and the final checkpoint that cannot be written makes the exit status 1. Needs root and mount namespaces;
# skips (exit 0, saying why) where this machine cannot make them.
set -euo pipefail

runfiles="${TEST_SRCDIR:-$PWD}/${TEST_WORKSPACE:-kestrel}"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
fail() {
  echo "FAIL: $*"
  [[ -f "$tmp/run/scheduler.log" ]] && tail -n 20 "$tmp/run/scheduler.log"
  exit 1
}
mkdir -p "$tmp/ckpt"
if ! unshare -m bash -c "mount -t tmpfs -o size=1m tmpfs '$tmp/ckpt'" 2>/dev/null; then
  echo "checkpoint_disk_full_test: skipped: no mount namespace with a tmpfs here (needs root, outside a sandbox)"
  exit 0
fi

"$runfiles/worker/data/kestrel_datagen" --train_rows=40000 --test_rows=2000 --max_vocab=20000 \
  --out_dir="$tmp/data" 2>/dev/null
cat >"$tmp/job.pbtxt" <<JOB
model { type: DEEPFM embedding_dim: 16 hidden: [16] }
data { format: CRITEO train_files: "$tmp/data/train.tsv" test_files: "$tmp/data/test.tsv" }
train { batch_size: 256 epochs: 3 }
JOB
export KESTREL_BIN="$runfiles"
code=0
unshare -m bash -c "mount -t tmpfs -o size=3m tmpfs '$tmp/ckpt' && exec '$runfiles/scripts/kestrel' local --no_build \
  --config='$tmp/job.pbtxt' --servers 2 --workers 2 --device cpu --compute_threads 1 --run_dir '$tmp/run' \
  --checkpoint_dir '$tmp/ckpt' --checkpoint_every_clocks 40" >"$tmp/out.log" 2>&1 &
job=$!
trap 'kill $job 2>/dev/null || true' EXIT

# While it runs: the launcher's warning, then `kestrel status` and /metrics name the failure.
for _ in $(seq 600); do grep -q "WARNING: checkpoint" "$tmp/out.log" && break; sleep 0.1; done
grep -q "WARNING: checkpoint .* failed: .*No space left on device" "$tmp/out.log" ||
  fail "no loud warning of the failed checkpoint: $(tail -n 5 "$tmp/out.log")"
address="127.0.0.1:$(cat "$tmp/run/scheduler.port")"
"$runfiles/scripts/kestrel" status --no_build --scheduler "$address" --certs "$tmp/run/certs" >"$tmp/status.json" ||
  fail "kestrel status"
/usr/bin/python3 - "$tmp/status.json" <<'PY' || fail "kestrel status: $(cat "$tmp/status.json")"
import json, sys
status = json.load(open(sys.argv[1]))
assert status["checkpoints_failed"] >= 1, status
assert "No space left on device" in status["last_checkpoint_failure"], status
PY
metrics="$(/usr/bin/python3 -c 'import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1]).read().decode())' \
  "http://127.0.0.1:$(cat "$tmp/run/scheduler.metrics_port")/metrics")"
grep -q '^kestrel_scheduler_checkpoint_failures_total{code="[A-Z_]*"} [1-9]' <<<"$metrics" ||
  fail "no kestrel_scheduler_checkpoint_failures_total: $(grep checkpoint <<<"$metrics")"

wait "$job" || code=$?
trap - EXIT
[[ $code -eq 1 ]] || fail "the launcher exited $code, not 1, with the final model in no checkpoint"
grep -q "the job failed: the final checkpoint could not be written (.*No space left on device.*): the final model is in no checkpoint" \
  "$tmp/out.log" || fail "the launcher did not say the final checkpoint failed: $(tail -n 3 "$tmp/out.log")"
/usr/bin/python3 - "$tmp/run/summary.json" <<'PY' || fail "summary.json: $(cat "$tmp/run/summary.json")"
import json, sys
summary = json.load(open(sys.argv[1]))
assert summary["ok"] is False and summary["final_checkpoint_failed"] is True, summary
assert summary["checkpoints_failed"] >= 2 and "No space left on device" in summary["last_checkpoint_failure"], summary
PY
echo "PASS"
