#!/usr/bin/env bash
# Builds the Kestrel runtime image (deploy/Dockerfile) from this checkout: an optimized Bazel build of the
# three binaries and the kestrel Python package (//python:site), staged with the PyTorch examples
# (examples/torch) and the CUDA runtime libraries the binaries link (if any), then `docker build`.
#
#   deploy/build_image.sh [IMAGE]          IMAGE defaults to kestrel:latest (the manifests' placeholder)
#
# Environment: DOCKER (default docker; podman works), KESTREL_CUDA=0 for a CPU-only build (a much smaller
# image: no CUDA libraries), KESTREL_PYTORCH=0 for an image without Python and PyTorch (C++ workers only; the
# Dockerfile's PYTORCH argument), BAZEL_FLAGS (extra flags for bazel build, e.g. --config=...).
# Push the result to a registry your cluster pulls from and set it in the overlay:
#   cd deploy/k8s/overlays/cpu && kustomize edit set image kestrel=registry.example.com/kestrel:v1
set -euo pipefail
cd "$(dirname "$0")/.."

IMAGE="${1:-kestrel:latest}"
DOCKER="${DOCKER:-docker}"
PYTORCH="${KESTREL_PYTORCH:-1}"
TARGETS=(//scheduler:kestrel_scheduler //server:kestrel_server //cmd:kestrel_worker //python:site)

# shellcheck disable=SC2086  # BAZEL_FLAGS is a list of flags
bazel build -c opt ${BAZEL_FLAGS:-} "${TARGETS[@]}"
bin_dir="$(bazel info -c opt bazel-bin)"

context="$(mktemp -d)"
trap 'rm -rf "$context"' EXIT
mkdir -p "$context/bin" "$context/cuda" "$context/python/site/kestrel" "$context/examples/torch"
for binary in scheduler/kestrel_scheduler server/kestrel_server cmd/kestrel_worker; do
  cp -L "$bin_dir/$binary" "$context/bin/"
done
chmod 0755 "$context"/bin/*
cp -L "$bin_dir"/python/site/kestrel/* "$context/python/site/kestrel/"
cp examples/torch/*.py "$context/examples/torch/"
chmod -R a+rX,go-w "$context/python" "$context/examples"

# The CUDA toolkit's libraries the binaries load (ldd lines "libcudart.so.13 => /usr/local/cuda/... (0x...)").
# Debian's own libraries come from apt in the Dockerfile; the driver (libcuda) from the node.
for binary in "$context"/bin/* "$context/python/site/kestrel/_kestrel.so"; do
  while read -r soname arrow path _; do
    [ "$arrow" = "=>" ] || continue
    case "$soname" in libcuda.so*) continue ;; esac
    case "$(readlink -f "$path")" in
      */cuda*/*) [ -e "$context/cuda/$soname" ] || cp -L "$path" "$context/cuda/$soname" ;;
    esac
  done < <(ldd "$binary")
done
if [ -n "$(ls -A "$context/cuda")" ]; then
  echo "build_image: CUDA libraries: $(cd "$context/cuda" && echo *)"
else
  echo "build_image: CPU-only binaries (no CUDA libraries)"
fi

"$DOCKER" build -f deploy/Dockerfile --build-arg PYTORCH="$PYTORCH" -t "$IMAGE" "$context"
echo "build_image: built $IMAGE"
