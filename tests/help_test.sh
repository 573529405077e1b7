#!/usr/bin/env bash
# Every binary's --help lists its own flags and the shared ones, each with its default (common/command_line.h),
# and nothing of Abseil's internals. (Abseil's --help exits 1 after printing, as gflags' did; any other status fails.)
set -euo pipefail

runfiles="${TEST_SRCDIR:-$PWD}/${TEST_WORKSPACE:-kestrel}"
failures=0

# binary, then flags its --help must list
check() {
  local binary="$1"
  shift
  local out status=0
  out="$("$runfiles/$binary" --help 2>&1)" || status=$?
  if [[ $status -ne 0 && $status -ne 1 ]]; then
    echo "FAIL: $binary --help exited $status"
    failures=$((failures + 1))
    return
  fi
  if grep -q "No flags matched" <<<"$out"; then
    echo "FAIL: $binary --help printed 'No flags matched'"
    failures=$((failures + 1))
  fi
  if grep -q "absl/" <<<"$out"; then
    echo "FAIL: $binary --help lists Abseil's own flags"
    failures=$((failures + 1))
  fi
  for flag in "$@"; do
    if ! grep -q -- "--$flag (" <<<"$out"; then
      echo "FAIL: $binary --help does not list --$flag"
      failures=$((failures + 1))
    elif ! grep -A8 -- "--$flag (" <<<"$out" | grep -q "default:"; then
      echo "FAIL: $binary --help gives no default for --$flag"
      failures=$((failures + 1))
    fi
  done
  echo "ok: $binary --help lists $# checked flags"
}

check server/kestrel_server rank num_servers ranges_per_server bsp_workers memory_budget_mb job_id scheduler checkpoint_dir \
  metrics_port tls_cert insecure
check scheduler/kestrel_scheduler num_servers num_workers consistency staleness elastic job_id checkpoint_dir \
  metrics_port tls_ca
check cmd/kestrel_worker config local row_cache job_id scheduler rank_offset metrics_port tls_key
check export/kestrel_predict model input output device
check export/kestrel_export checkpoint_dir checkpoint config out base_export
check scheduler/kestrel_ctl job_id scheduler timeout servers workers
check worker/data/kestrel_datagen out_dir train_rows seed

if [[ $failures -gt 0 ]]; then
  echo "$failures failures"
  exit 1
fi
echo "every --help lists its flags"
