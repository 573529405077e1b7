#!/usr/bin/env bash
# Builds the GPU test binaries (and any extra Bazel targets given as arguments, e.g. //bench:some_bench) and
# packs them into gpu_bundle/ for a lent GPU machine, which has CUDA 13 but no Bazel and no system libraries:
#   gpu_bundle/bin/  the binaries (run there by scripts/gpu_check.sh: *_test as tests, *_bench as benchmarks)
#   gpu_bundle/lib/  every shared library they load per ldd, except glibc's own (libc, libm, libpthread, libdl,
#                    librt, ld-linux), the CUDA driver (libcuda) and the CUDA toolkit's libraries (cudart,
#                    cuBLAS: hundreds of MB, installed on the GPU machine and found through the binaries' rpath
#                    to /usr/local/cuda/lib64).
#   gpu_bundle/COMMIT  the commit the binaries were built from (with -dirty when the work tree had changes)
# --bench adds what bench/run_gpu_bench.sh runs: kestrel_worker, kestrel_datagen, kestrel_server and
# kestrel_scheduler (`kestrel local` starts them), pipeline_ceiling_bench, and the openssl command with a minimal config
# (gpu_bundle/etc/openssl.cnf) for the certificates `kestrel local` makes.
# --xz also packs gpu_bundle/ into .gpu/bundle.tar.xz (what a device call carries then: the binaries with their
# libraries are over 64 MiB uncompressed).
# Prints the bundle's size; fails if what a device call would carry (gpu_bundle/, or with --xz the archive) is
# over the 64 MiB it can carry.
#
# Usage: scripts/gpu_bundle.sh [--bench] [--xz] [//extra:target ...]
# Then:  run(command="scripts/gpu_check.sh", carry=["gpu_bundle"])
#        run(command="bench/run_gpu_bench.sh", carry=[".gpu"])    # after --bench --xz
set -euo pipefail
cd "$(dirname "$0")/.." || exit 1

BUNDLE=gpu_bundle
ARCHIVE=.gpu/bundle.tar.xz
LIMIT_MIB=64
TARGETS=(//worker/compute:cuda_backend_test //common:cuda_device_test //worker:model_gpu_test //bench:cuda_step_bench)
BENCH_TARGETS=(//cmd:kestrel_worker //worker/data:kestrel_datagen //server:kestrel_server //scheduler:kestrel_scheduler
  //bench:pipeline_ceiling_bench)
bench=false
xz=false
for arg in "$@"; do
  case "$arg" in
    --bench) bench=true ;;
    --xz) xz=true ;;
    --*) echo "usage: $0 [--bench] [--xz] [//extra:target ...]" >&2; exit 2 ;;
    *) TARGETS+=("$arg") ;;
  esac
done
if [ "$bench" = true ]; then
  TARGETS+=("${BENCH_TARGETS[@]}")
fi

bazel build -c opt "${TARGETS[@]}"

# A CPU-only build (KESTREL_CUDA=0, or no toolkit) would bundle tests that skip everything: refuse it.
defs="$(bazel info output_base)/external/local_cuda/defs.bzl"
if ! grep -q '^HAS_CUDA = True' "$defs" 2>/dev/null; then
  echo "gpu_bundle: the last build was CPU-only ($defs): run a plain 'bazel build' with the CUDA toolkit" >&2
  exit 1
fi
cuda_path=$(sed -n 's/^CUDA_PATH = "\(.*\)"$/\1/p' "$defs")
cuda_lib=$(readlink -f "${cuda_path:-/usr/local/cuda}")

bin_dir=$(bazel info -c opt bazel-bin)
built=()
rm -rf "$BUNDLE"
mkdir -p "$BUNDLE/bin" "$BUNDLE/lib"

for target in "${TARGETS[@]}"; do
  # //pkg:name -> bazel-bin/pkg/name (cc_test and cc_binary outputs).
  label=${target#//}
  pkg=${label%%:*}
  name=${label##*:}
  [ "$name" = "$label" ] && name=${pkg##*/}
  binary="$bin_dir/$pkg/$name"
  if [ ! -x "$binary" ]; then
    echo "gpu_bundle: no executable for $target at $binary" >&2
    exit 1
  fi
  if [ -e "$BUNDLE/bin/$name" ]; then
    echo "gpu_bundle: two targets are named $name" >&2
    exit 1
  fi
  cp -L "$binary" "$BUNDLE/bin/$name"
  chmod u+w "$BUNDLE/bin/$name"
  built+=("$binary")
done
if [ "$bench" = true ]; then
  # `kestrel local` makes each run's certificates with the openssl command, which the GPU machine may lack.
  openssl_bin=$(command -v openssl) || { echo "gpu_bundle: --bench needs the openssl command here" >&2; exit 1; }
  cp -L "$openssl_bin" "$BUNDLE/bin/openssl"
  built+=("$openssl_bin")
  mkdir -p "$BUNDLE/etc"
  # `openssl req` refuses to run without a config file; the launcher passes everything else on its command line.
  printf '[req]\ndistinguished_name = req_dn\n[req_dn]\n' >"$BUNDLE/etc/openssl.cnf"
fi
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
if [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]; then
  commit="$commit-dirty"
fi
echo "$commit" >"$BUNDLE/COMMIT"

missing=0
# ldd the binaries where Bazel built them: tests link the project's own libraries as shared objects found
# through an $ORIGIN-relative rpath (bazel-bin/_solib_k8/), which only resolves there.
for binary in "${built[@]}"; do
  # ldd lines: "libfoo.so.1 => /path/libfoo.so.1 (0x...)", "/lib64/ld-linux-x86-64.so.2 (0x...)",
  # "libbar.so => not found".
  while read -r soname arrow path _; do
    [ "$arrow" = "=>" ] || continue
    case "$soname" in
      linux-vdso.so.* | libc.so.* | libm.so.* | libpthread.so.* | libdl.so.* | librt.so.* | ld-linux*) continue ;;
      libcuda.so*) continue ;;  # the driver: always the GPU machine's own
    esac
    if [ "$path" = "not" ]; then
      echo "gpu_bundle: $(basename "$binary") needs $soname, which ldd cannot find" >&2
      missing=1
      continue
    fi
    case "$(readlink -f "$path")" in
      "$cuda_lib"/* | /usr/local/cuda*/*) continue ;;  # the toolkit's libraries: found through the rpath there
    esac
    [ -e "$BUNDLE/lib/$soname" ] || cp -L "$path" "$BUNDLE/lib/$soname"
  done < <(ldd "$binary")
done
[ "$missing" -eq 0 ] || exit 1
chmod -R u+w "$BUNDLE"

echo "gpu_bundle: $(find "$BUNDLE/bin" -type f | wc -l) binaries, $(find "$BUNDLE/lib" -type f | wc -l) libraries"
find "$BUNDLE" -type f -printf '  %-60p %10s bytes\n' | sort
kib=$(du -sk "$BUNDLE" | cut -f1)
echo "gpu_bundle: $(du -sh "$BUNDLE" | cut -f1) in $BUNDLE/ ($kib KiB)"
if [ "$xz" = true ]; then
  mkdir -p "$(dirname "$ARCHIVE")"
  tar -cf - "$BUNDLE" | xz -T2 -6 >"$ARCHIVE.tmp"
  mv "$ARCHIVE.tmp" "$ARCHIVE"
  kib=$(du -sk "$ARCHIVE" | cut -f1)
  echo "gpu_bundle: $ARCHIVE, $kib KiB (unpacked there by bench/run_gpu_bench.sh, or: tar -xJf $ARCHIVE)"
fi
if [ "$kib" -gt $((LIMIT_MIB * 1024)) ]; then
  echo "gpu_bundle: over the ${LIMIT_MIB} MiB a device call can carry" >&2
  exit 1
fi
