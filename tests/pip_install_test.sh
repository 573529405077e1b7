#!/usr/bin/env bash
# `pip install --no-build-isolation ./python` into a fresh virtual environment (with the system's site packages:
# numpy and PyTorch from Debian, setuptools and wheel for the build; no package index), then the package is
# imported from the environment, not the repository, and the examples train with it: DeepFM in PyTorch in one
# process and as a cluster of Python workers (kestrel local --worker_cmd), and the two-tower model's
# kestrel.torch.fit as a cluster.
#
# Not a Bazel test: the install itself runs Bazel (python/setup.py). scripts/test.sh runs it after the Bazel
# tests, with the suite's build flags so the extension's C++ dependencies come from its cache.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Debian's interpreter (its python3-* packages are the system site packages), or $PYTHON.
"${PYTHON:-/usr/bin/python3}" -m venv --system-site-packages "$tmp/venv"
py="$tmp/venv/bin/python"
echo "== pip install --no-build-isolation --no-index ./python"
(cd "$repo" && KESTREL_BAZEL_FLAGS="${KESTREL_BAZEL_FLAGS-}" "$tmp/venv/bin/pip" install --quiet --no-build-isolation \
  --no-index ./python)
echo "== and as a wheel"
(cd "$repo" && KESTREL_BAZEL_FLAGS="${KESTREL_BAZEL_FLAGS-}" "$tmp/venv/bin/pip" wheel --quiet --no-build-isolation \
  --no-index --no-deps -w "$tmp/wheels" ./python)
rm -rf "$repo/python/build" "$repo"/python/*.egg-info
"$py" - "$tmp"/wheels/kestrel-*.whl <<'PY'
import sys, zipfile
names = set(zipfile.ZipFile(sys.argv[1]).namelist())
for want in ("kestrel/__init__.py", "kestrel/torch.py", "kestrel/_kestrel.pyi", "kestrel/py.typed"):
    assert want in names, (want, sorted(names))
assert any(n.startswith("kestrel/_kestrel") and n.endswith(".so") for n in names), sorted(names)
assert not any(n.endswith(".cc") for n in names), sorted(names)
print(sys.argv[1].rsplit("/", 1)[-1], len(names), "files")
PY

echo "== imported from the environment"
cd "$tmp"
"$py" - "$tmp/venv" <<'PY'
import os, sys
import kestrel, kestrel.torch
assert kestrel.__file__.startswith(sys.argv[1]), kestrel.__file__
client = kestrel.Client.in_process(servers=2)
try:
    client.pull("nope", __import__("numpy").array([1], dtype="uint64"), 4)
except kestrel.NotFoundError as e:
    print(f"kestrel from {os.path.dirname(kestrel.__file__)}: {e.code}")
PY

echo "== the DeepFM example in one process"
bin=$(cd "$repo" && bazel info ${KESTREL_BAZEL_FLAGS-} bazel-bin 2>/dev/null)
(cd "$repo" && bazel build ${KESTREL_BAZEL_FLAGS-} //worker/data:kestrel_datagen //cmd:kestrel_worker \
  //scheduler:kestrel_scheduler //server:kestrel_server 2>/dev/null)
"$bin/worker/data/kestrel_datagen" --train_rows=8000 --test_rows=2000 --max_vocab=1000 --out_dir="$tmp/data" 2>/dev/null
cat >"$tmp/job.pbtxt" <<'JOB'
model { type: DEEPFM embedding_dim: 8 hidden: [32, 16] }
data { format: CRITEO }
train { batch_size: 256 epochs: 1 }
JOB
"$py" "$repo/examples/torch/deepfm.py" --config="$tmp/job.pbtxt" --train="$tmp/data/train.tsv" \
  --test="$tmp/data/test.tsv" | tee "$tmp/one.txt"
grep -q "test AUC 0\.[6-9]" "$tmp/one.txt"

echo "== a two-tower model (kestrel.torch.fit) on 2 servers and 2 Python workers"
"$bin/worker/data/kestrel_datagen" --format=schema --train_rows=20000 --test_rows=4000 --out_dir="$tmp/history" \
  2>/dev/null
KESTREL_BIN="$bin" PYTHONPATH='' "$repo/scripts/kestrel" local --no_build --config="$tmp/history/job.pbtxt" \
  --run_dir="$tmp/two_tower" --device=cpu --worker_cmd="$py $repo/examples/torch/two_tower.py" --max_restarts=0 \
  --export="$tmp/two_tower_model"
# Its export (the final checkpoint's tables, rank 0's module part) scores as rank 0 evaluated, bit for bit.
"$py" - "$tmp/two_tower/summary.json" "$tmp/two_tower_model" "$tmp/history" <<'PY'
import json, sys
from kestrel import torch as kt
s = json.load(open(sys.argv[1]))
assert s["ok"] and s["auc"] > 0.58, s
auc, logloss, fingerprint = kt.load(sys.argv[2]).score(open(sys.argv[3] + "/job.pbtxt").read(),
                                                      [sys.argv[3] + "/test.tsv"])
assert fingerprint == s["fingerprint"], (fingerprint, s)
print(f"two-tower cluster: test AUC {s['auc']:.4f}; its export scores fingerprint {fingerprint}, as rank 0 did")
PY

echo "== the DeepFM job on 2 servers and 2 Python workers"
KESTREL_BIN="$bin" PYTHONPATH='' "$repo/scripts/kestrel" local --no_build --config="$tmp/job.pbtxt" --data="$tmp/data" \
  --run_dir="$tmp/run" --device=cpu --worker_cmd="$py $repo/examples/torch/deepfm.py" --max_restarts=0
"$py" - "$tmp/run/summary.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
assert s["ok"] and s["auc"] > 0.6, s
print(f"cluster: test AUC {s['auc']:.4f}")
PY
echo PASS
