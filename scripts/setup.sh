#!/usr/bin/env bash
# Installs every Debian package Kestrel's build, tests and benchmarks need. Idempotent: does nothing when all
# are present. Debian 12 (bookworm); needs root (or sudo) only when something is missing.
# Extra package names given as arguments are installed too (scripts/fuzz.sh adds clang-14 and its fuzzer runtime).
set -euo pipefail

PACKAGES=(
  bazel-bootstrap g++ git pkg-config python3 ca-certificates python3-yaml shellcheck
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev librocksdb-dev libgtest-dev libgmock-dev libbenchmark-dev
  prometheus-cpp-dev prometheus
  libopenblas-openmp-dev libeigen3-dev libdnnl-dev
  python3-grpcio python3-protobuf
  python3-dev pybind11-dev python3-numpy python3-torch libopenblas0-openmp
  python3-venv python3-pip python3-setuptools python3-wheel
  iproute2 util-linux
  slurm-wlm munge openmpi-bin
  "$@"
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ "${#missing[@]}" -eq 0 ]; then
  exit 0
fi

echo "setup: installing ${missing[*]}" >&2
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
