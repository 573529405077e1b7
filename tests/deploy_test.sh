#!/usr/bin/env bash
# //tests:deploy_test: checks the deployment files under deploy/ (Kubernetes kustomize base and overlays,
# Slurm multi-prog, MPI MPMD script, image) for structure and cross-references, and every flag they pass against
# the real `--helpfull` of the three binaries, or a Python worker's (kestrel.worker.add_flags); shellchecks the
# scripts under deploy/ and scripts/.
# The checks are tests/deploy_check.py (one JUnit case per group; see there). Needs python3 with PyYAML,
# kubectl (for `kubectl kustomize`, offline), shellcheck, and openssl with scripts/kestrel for the certificate
# groups (`kestrel certs`, `kestrel k8s-secrets`, the Slurm and MPI scripts' own certificates); a group whose
# tool is missing is skipped, but a run in which every group that needs a tool skips fails, naming the tools.
set -euo pipefail

# Runfiles: $TEST_SRCDIR/$TEST_WORKSPACE under `bazel test`, else relative to this script's directory.
if [ -n "${TEST_SRCDIR:-}" ]; then
  root="$TEST_SRCDIR/${TEST_WORKSPACE:-kestrel}"
else
  root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
fi
for f in deploy/k8s/base/kustomization.yaml tests/deploy_check.py scheduler/kestrel_scheduler \
    server/kestrel_server cmd/kestrel_worker python/site/kestrel/worker.py examples/torch/deepfm.py; do
  if [ ! -e "$root/$f" ]; then
    echo "deploy_test: $root/$f is missing (run it with bazel test //tests:deploy_test)" >&2
    exit 1
  fi
done

# kustomize refuses files that resolve outside a kustomization's directory, and runfiles are symlinks into the
# source tree: check a real copy.
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
rm -rf "$tmp/deploy"
cp -RL "$root/deploy" "$tmp/deploy"
chmod -R u+w "$tmp/deploy"

# scripts/ exports none of its shell scripts to Bazel (and this test may only add to deploy/ and tests/):
# check them in the source tree the runfiles point into (the test is tagged external, never cached).
src="$(dirname "$(dirname "$(readlink -f "$root/deploy/k8s/base/kustomization.yaml")")")"
src="$(cd "$src/../.." && pwd)"
scripts=""
[ -d "$src/scripts" ] && scripts="$src/scripts"

# A python3 that has PyYAML: Debian's python3-yaml lives in /usr/bin/python3's path, not in a pyenv python.
python=""
for candidate in python3 /usr/bin/python3; do
  if command -v "$candidate" >/dev/null && "$candidate" -c 'import yaml' 2>/dev/null; then
    python="$candidate"
    break
  fi
done
if [ -z "$python" ]; then
  echo "deploy_test: no python3 with PyYAML (apt-get install python3-yaml); the Kubernetes checks skip" >&2
  python=python3
fi

self="$(readlink -f "${BASH_SOURCE[0]}")"
exec "$python" "$root/tests/deploy_check.py" --deploy "$tmp/deploy" --bin "$root" --scripts "$scripts" \
  --self "$self" --site "$root/python/site" --examples "$root/examples/torch"
