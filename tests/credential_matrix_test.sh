#!/usr/bin/env bash
# The credential matrix over a live mutual-TLS cluster (tests/credential_matrix.py): a scheduler and a server
# with certificates of the job's CA (`kestrel certs`), driven by Python grpcio with stubs generated from proto/
# by protoc and grpc_python_plugin. Every wrong credential (none, another CA's, another job's from the same CA,
# a role an RPC does not allow) must be refused with the tables unchanged, every right one must get through.
set -euo pipefail

runfiles="${TEST_SRCDIR:-$PWD}/${TEST_WORKSPACE:-kestrel}"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
if ! /usr/bin/python3 -c 'import grpc, google.protobuf' 2>/dev/null; then
  echo "SKIP: Debian's python3-grpcio and python3-protobuf are missing (scripts/setup.sh installs them)"
  exit 0
fi

stubs="$tmp/stubs"
mkdir -p "$stubs"
(cd "$runfiles" && protoc -I. --python_out="$stubs" --grpc_python_out="$stubs" \
  --plugin=protoc-gen-grpc_python=/usr/bin/grpc_python_plugin proto/*.proto)
touch "$stubs/proto/__init__.py"

kestrel="$runfiles/scripts/kestrel"
job=mx
"$kestrel" certs --job "$job" --out "$tmp/certs" --servers 1 --workers 1 >/dev/null
"$kestrel" certs --job "$job" --out "$tmp/other_ca" --servers 1 --workers 1 >/dev/null
"$kestrel" certs --job other --out "$tmp/other_job" --servers 1 --workers 1 --ca "$tmp/certs" >/dev/null  # same CA
tls() { echo "--tls_ca=$tmp/certs/ca.pem --tls_cert=$tmp/certs/$1.pem --tls_key=$tmp/certs/$1.key"; }

wait_port() {
  for _ in $(seq 200); do
    [[ -s "$1" ]] && { cat "$1"; return; }
    sleep 0.1
  done
  echo "no port in $1" >&2
  exit 1
}

pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true' EXIT
# shellcheck disable=SC2046
"$runfiles/scheduler/kestrel_scheduler" --job_id="$job" --host=127.0.0.1 --port=0 --port_file="$tmp/scheduler.port" \
  --num_servers=1 --num_workers=1 $(tls scheduler-0) 2>"$tmp/scheduler.log" &
pids+=($!)
scheduler="127.0.0.1:$(wait_port "$tmp/scheduler.port")"
# shellcheck disable=SC2046
"$runfiles/server/kestrel_server" --job_id="$job" --host=127.0.0.1 --port=0 --port_file="$tmp/server.port" \
  $(tls server-0) 2>"$tmp/server.log" &
pids+=($!)
server="127.0.0.1:$(wait_port "$tmp/server.port")"

/usr/bin/python3 "$runfiles/tests/credential_matrix.py" "$stubs" "$tmp/certs" "$tmp/other_ca" "$tmp/other_job" \
  "$scheduler" "$server" "$job"
