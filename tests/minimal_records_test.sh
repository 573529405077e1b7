#!/usr/bin/env bash
# A worker of one's own that writes only the records proto/records.proto lists as what `kestrel local` reads
# (train: worker, step, steps; eval and validation: step, logloss, auc) gives the launcher its progress line and
# a summary.json with those figures: the launcher needs no other field (a Python worker's records used to lack
# `fingerprint`, and the launcher crashed after a successful job).
set -euo pipefail

runfiles="${TEST_SRCDIR:-$PWD}/${TEST_WORKSPACE:-kestrel}"
export KESTREL_BIN="$runfiles"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"

cat >"$tmp/worker.py" <<'PY'
"""Writes the minimal records to --metrics_out (kestrel_worker's flags are given; the rest are ignored)."""
import json, sys, time
flags = dict(a[2:].split("=", 1) for a in sys.argv[1:] if a.startswith("--") and "=" in a)
rank = int(flags["rank"])
with open(flags["metrics_out"], "a") as f:
    for step in (5, 10):
        f.write(json.dumps({"kind": "train", "worker": rank, "step": step, "steps": 10}) + "\n")
        f.flush()
        time.sleep(0.3)
    if rank == 0:
        f.write(json.dumps({"kind": "validation", "step": 10, "logloss": 0.5, "auc": 0.7}) + "\n")
        f.write(json.dumps({"kind": "eval", "step": 10, "logloss": 0.45, "auc": 0.75}) + "\n")
PY
cat >"$tmp/job.pbtxt" <<'JOB'
model { type: LOGISTIC_REGRESSION }
data { format: CRITEO }
JOB
"$runfiles/worker/data/kestrel_datagen" --small --out_dir="$tmp/data" 2>/dev/null
"$runfiles/scripts/kestrel" local --no_build --config="$tmp/job.pbtxt" --data="$tmp/data" --run_dir="$tmp/run" \
  --worker_cmd="python3 $tmp/worker.py" --max_restarts=0 >"$tmp/out.txt" 2>"$tmp/err.txt" || {
  cat "$tmp/out.txt" "$tmp/err.txt"
  exit 1
}
cat "$tmp/out.txt"
grep -q "test AUC 0.7500, logloss 0.4500" "$tmp/out.txt"
python3 - "$tmp/run/summary.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
assert s["ok"] and s["auc"] == 0.75 and s["logloss"] == 0.45 and s["step"] == 10, s
assert "fingerprint" not in s, s
assert s["validation"] == [{"step": 10, "auc": 0.7, "logloss": 0.5}], s
print("summary.json:", {k: s[k] for k in ("ok", "auc", "logloss", "step", "validation")})
PY
# The progress line (written for a terminal; its last state is in the run's stderr when one was drawn).
python3 - "$runfiles/scripts" "$tmp/run/metrics.jsonl" <<'PY'
import importlib.machinery, importlib.util, sys
sys.path.insert(0, sys.argv[1])
loader = importlib.machinery.SourceFileLoader("kestrel_cli", sys.argv[1] + "/kestrel")
spec = importlib.util.spec_from_loader("kestrel_cli", loader)
cli = importlib.util.module_from_spec(spec)
loader.exec_module(cli)
progress = cli.Progress(sys.argv[2])
progress.update()
line = progress.line()
assert line.startswith("step 10/10") and "AUC 0.7500" in line and "validation AUC 0.7000" in line, line
print("progress line:", line)
PY
echo PASS
