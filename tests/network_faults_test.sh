#!/usr/bin/env bash
# //tests:network_faults_test: the job on hosts of its own (network namespaces, `kestrel local --hosts`) under
# partitions, a paused-looking scheduler, flapping links and a seeded random schedule (tests/network_faults.py;
# one chaos seed here, 20 in scripts/network_soak.sh). Needs root and network namespaces; skips (exit 0, saying
# why) where this machine cannot make them.
set -euo pipefail
runfiles="${TEST_SRCDIR:-$PWD}/${TEST_WORKSPACE:-kestrel}"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
rc=0
python3 "$runfiles/tests/network_faults.py" --bin="$runfiles" --kestrel="$runfiles/scripts/kestrel" --tmp="$tmp" \
  "$@" || rc=$?
if [[ $rc == 77 ]]; then
  echo "network_faults_test: skipped (see above)"
  exit 0
fi
exit $rc
