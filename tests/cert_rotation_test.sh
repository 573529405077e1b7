#!/usr/bin/env bash
# Credentials that change under a running job (a `kestrel local` job following a training directory, mutual TLS,
# every process given the run's CRL). Mid-job every process's certificate and key are replaced in place by new
# ones the CA signed (written beside, renamed over): the job goes on, each listener (scheduler, both servers)
# presents its new certificate to the next connection, and the job finishes with no process restarted. A worker
# certificate revoked with `kestrel revoke` is refused by the servers and the scheduler at its next connection,
# while another worker's is accepted.
set -euo pipefail

runfiles="${TEST_SRCDIR:-$PWD}/${TEST_WORKSPACE:-kestrel}"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
kestrel="$runfiles/scripts/kestrel"
run="$tmp/run"
in="$tmp/in"
fail() {
  echo "FAIL: $*"
  for f in "$run"/scheduler.log "$run"/server0.log "$run"/worker0.log; do
    [[ -f "$f" ]] && { echo "== $f"; tail -n 10 "$f"; }
  done
  exit 1
}
fingerprint() { openssl x509 -in "$1" -noout -fingerprint -sha256; }
# The certificate the listener at $1 presents to a client with certificate $2; empty when the handshake fails.
presented() {
  echo | timeout 10 openssl s_client -connect "$1" -tls1_2 -CAfile "$run/certs/ca.pem" -cert "$2.pem" -key "$2.key" \
    -verify_return_error 2>/dev/null | openssl x509 -noout -fingerprint -sha256 2>/dev/null || true
}
# Whether the listener at $1 answers a gRPC call (the health check) from a client with certificate $2: gRPC
# checks a peer's certificate (and the CRL) after the TLS handshake, and closes a refused connection.
accepted() {
  /usr/bin/python3 - "$1" "$2" "$run/certs/ca.pem" <<'PY'
import sys
import grpc
address, cert, ca = sys.argv[1:4]
read = lambda path: open(path, "rb").read()
creds = grpc.ssl_channel_credentials(read(ca), read(cert + ".key"), read(cert + ".pem"))
with grpc.secure_channel(address, creds) as channel:
    check = channel.unary_unary("/grpc.health.v1.Health/Check")
    try:
        check(b"", timeout=5)
    except grpc.RpcError as e:
        sys.exit(1)
PY
}

"$runfiles/worker/data/kestrel_datagen" --train_rows=20000 --test_rows=1000 --max_vocab=800 --out_dir="$tmp/data" \
  2>/dev/null
mkdir -p "$in"
split -l 2000 -d "$tmp/data/train.tsv" "$tmp/part-"
mv "$tmp/part-00" "$in/"
cat >"$tmp/job.pbtxt" <<JOB
model { type: DEEPFM embedding_dim: 4 hidden: [16] }
data { format: CRITEO train_stream: "$in" stream_poll_ms: 50 test_files: "$tmp/data/test.tsv" }
train { batch_size: 128 }
JOB
export KESTREL_BIN="$runfiles"
"$kestrel" local --no_build --config="$tmp/job.pbtxt" --servers 2 --workers 2 --device cpu --compute_threads 1 \
  --run_dir "$run" --checkpoint_every_clocks 8 >"$tmp/local.log" 2>&1 &
job=$!
trap 'kill $job 2>/dev/null || true' EXIT
for _ in $(seq 600); do grep -q "committed at clock" "$run/scheduler.log" 2>/dev/null && break; sleep 0.1; done
grep -q "committed at clock" "$run/scheduler.log" || fail "the job did not start training"
grep -q -- "--tls_crl=" <(tr '\0' ' ' <"/proc/$(python3 -c "import json;print(json.load(open('$run/pids.json'))['server 0'])")/cmdline") ||
  fail "the servers were not given the run's CRL"
scheduler="127.0.0.1:$(cat "$run/scheduler.port")"
"$kestrel" status --no_build --scheduler "$scheduler" --certs "$run/certs" >"$tmp/status.json" || fail "kestrel status"
mapfile -t servers < <(python3 -c "import json,sys; print('\n'.join(m['address'] for m in sorted(
  json.load(open(sys.argv[1]))['members'], key=lambda m: m['rank']) if m['role'] == 'server'))" "$tmp/status.json")
[[ ${#servers[@]} -eq 2 ]] || fail "servers in kestrel status: ${servers[*]}"

echo "== every process's certificate replaced in place, mid-job"
"$kestrel" certs --job kestrel --out "$tmp/new" --servers 2 --workers 3 --ca "$run/certs" >/dev/null
for name in scheduler-0 server-0 server-1 worker-0 worker-1 admin-0; do
  for ext in pem key; do
    cp "$tmp/new/$name.$ext" "$run/certs/.$name.$ext.new"
    mv "$run/certs/.$name.$ext.new" "$run/certs/$name.$ext"
  done
done
mv "$tmp/part-01" "$in/"  # training goes on meanwhile
declare -A listener=([scheduler-0]="$scheduler" [server-0]="${servers[0]}" [server-1]="${servers[1]}")
for name in "${!listener[@]}"; do
  want="$(fingerprint "$tmp/new/$name.pem")"
  for _ in $(seq 300); do [[ "$(presented "${listener[$name]}" "$run/certs/admin-0")" == "$want" ]] && break; sleep 0.1; done
  [[ "$(presented "${listener[$name]}" "$run/certs/admin-0")" == "$want" ]] ||
    fail "$name (${listener[$name]}) still presents its old certificate"
done
echo "the scheduler and both servers present their new certificates, none restarted"

echo "== a revoked worker certificate is refused at its next connection"
cp "$tmp/new/worker-2.pem" "$tmp/new/worker-2.key" "$run/certs/"
accepted "${servers[0]}" "$run/certs/worker-2" || fail "worker-2's certificate refused before it was revoked"
"$kestrel" revoke --certs "$run/certs" worker-2 >/dev/null || fail "kestrel revoke"
for target in "${servers[0]}" "${servers[1]}" "$scheduler"; do
  for _ in $(seq 100); do accepted "$target" "$run/certs/worker-2" || break; sleep 0.1; done
  ! accepted "$target" "$run/certs/worker-2" || fail "$target accepts the revoked certificate"
  accepted "$target" "$run/certs/worker-0" || fail "$target refuses worker-0's certificate"
done
echo "worker-2's revoked certificate refused by both servers and the scheduler; worker-0's accepted"

mv "$tmp/part-02" "$in/"
"$kestrel" stop --no_build "$in" >/dev/null
code=0
wait "$job" || code=$?
trap - EXIT
[[ $code -eq 0 ]] || fail "the job exited $code: $(tail -n 3 "$tmp/local.log")"
python3 - "$run/summary.json" <<'PY' || fail "summary: $(cat "$run/summary.json")"
import json, sys
summary = json.load(open(sys.argv[1]))
assert summary["ok"] and not summary["restarts"], summary
PY
echo "PASS"
