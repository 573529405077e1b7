#!/usr/bin/env bash
# kestrel_serve as a user meets it: a model trained and exported by `kestrel_worker --local`, served over mutual
# TLS and asked through the Python client (kestrel.PredictClient) answers every test example with the very float
# kestrel_predict writes for it; a certificate that is not a client's is refused, a bad request is answered with
# its problem, and SIGTERM stops the service with exit 0.
set -euo pipefail

runfiles="${TEST_SRCDIR:-$PWD}/${TEST_WORKSPACE:-kestrel}"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
fail() {
  echo "FAIL: $*"
  [[ -f "$tmp/serve.log" ]] && tail -20 "$tmp/serve.log"
  exit 1
}

"$runfiles/worker/data/kestrel_datagen" --train_rows=8000 --test_rows=1500 --max_vocab=1000 \
  --out_dir="$tmp/data" 2>/dev/null
cat >"$tmp/job.pbtxt" <<JOB
model { type: DEEPFM embedding_dim: 4 hidden: [16] }
data { format: CRITEO train_files: "$tmp/data/train.tsv" test_files: "$tmp/data/test.tsv" }
train { batch_size: 256 epochs: 1 }
JOB
"$runfiles/cmd/kestrel_worker" --local --config="$tmp/job.pbtxt" --device=cpu --compute_threads=1 \
  --export_dir="$tmp/model" 2>"$tmp/train.log" || fail "training: $(tail -5 "$tmp/train.log")"
"$runfiles/export/kestrel_predict" --model="$tmp/model" --input="$tmp/data/test.tsv" --output="$tmp/predict.txt" \
  --device=cpu --compute_threads=1 >/dev/null 2>"$tmp/predict.log" || fail "kestrel_predict: $(tail -3 "$tmp/predict.log")"
job_id="$(sed -nE 's/^job_id: "(.*)"$/\1/p' "$tmp/model/MODEL" | head -1)"
[[ -n "$job_id" ]] || fail "the export names no job id"
"$runfiles/scripts/kestrel" certs --job "$job_id" --out "$tmp/certs" --servers 0 --workers 1 >/dev/null

"$runfiles/serving/kestrel_serve" --model="$tmp/model" --address=127.0.0.1:0 --port_file="$tmp/port" \
  --compute_threads=1 --max_batch=512 --tls_ca="$tmp/certs/ca.pem" --tls_cert="$tmp/certs/serving-0.pem" \
  --tls_key="$tmp/certs/serving-0.key" 2>"$tmp/serve.log" &
serve=$!
trap 'kill $serve 2>/dev/null || true' EXIT
for _ in $(seq 200); do [[ -s "$tmp/port" ]] && break; sleep 0.1; done
[[ -s "$tmp/port" ]] || fail "kestrel_serve did not start"

PYTHONPATH="$runfiles/python/site" /usr/bin/python3 - "$tmp" "127.0.0.1:$(cat "$tmp/port")" <<'PY' || fail "the Python client"
import sys
import kestrel

tmp, address = sys.argv[1], sys.argv[2]
certs = f"{tmp}/certs"
client = kestrel.PredictClient(address, f"{certs}/ca.pem", f"{certs}/client-0.pem", f"{certs}/client-0.key")
lines = [line.rstrip("\n") for line in open(f"{tmp}/data/test.tsv")]
scores = []
at = 0
for size in [1, 2, 3, 500, 7, 256, 1, 100, 512]:
    answer = client.predict(lines[at:at + size])
    assert answer["model"].endswith("model"), answer["model"]
    scores += ["%.9g" % s for s in answer["scores"].tolist()]
    at += size
while at < len(lines):
    scores += ["%.9g" % s for s in client.predict(lines[at:at + 512])["scores"].tolist()]
    at += 512
expected = [line.strip() for line in open(f"{tmp}/predict.txt")]
assert scores == expected, f"{sum(a != b for a, b in zip(scores, expected))} of {len(expected)} scores differ"
print(f"{len(scores)} scores equal kestrel_predict's bit for bit")

try:
    client.predict(["not\ta criteo line"])
    raise AssertionError("a malformed line was scored")
except kestrel.InvalidArgumentError as e:
    assert "line 0" in e.message, e.message
try:
    client.predict(lines[:513])
    raise AssertionError("an oversized batch was scored")
except kestrel.InvalidArgumentError as e:
    assert "at most 512" in e.message, e.message
worker = kestrel.PredictClient(address, f"{certs}/ca.pem", f"{certs}/worker-0.pem", f"{certs}/worker-0.key")
try:
    worker.predict(lines[:1])
    raise AssertionError("a worker's certificate was served")
except kestrel.PermissionDeniedError as e:
    assert "worker" in e.message, e.message
status = client.status()
assert status["job_id"] and status["loads"] == 1 and status["failed_loads"] == 0, status
print("bad requests refused, each naming its problem; a worker certificate refused")
PY
kill -TERM "$serve"
code=0
wait "$serve" || code=$?
trap - EXIT
[[ $code -eq 0 ]] || fail "kestrel_serve exited $code on SIGTERM"
echo "PASS"
