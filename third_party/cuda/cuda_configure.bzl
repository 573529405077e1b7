"""Detects the CUDA toolkit so the build works with it (CUDA backend built) and without it (CPU only).

Generates @<name>//:defs.bzl with:
  HAS_CUDA    True when <cuda_path>/bin/nvcc exists and KESTREL_CUDA is not "0".
  CUDA_PATH   the toolkit root (default /usr/local/cuda; override with the CUDA_PATH environment variable).
and @<name>//:BUILD with a `cuda_runtime` cc_library (cudart + cuBLAS link flags, include path), empty when
CUDA is absent.
"""

def _cuda_configure_impl(ctx):
    cuda_path = ctx.os.environ.get("CUDA_PATH", "/usr/local/cuda")
    forced_off = ctx.os.environ.get("KESTREL_CUDA", "") == "0"
    has_cuda = (not forced_off) and ctx.path(cuda_path + "/bin/nvcc").exists
    ctx.file("defs.bzl", "HAS_CUDA = %s\nCUDA_PATH = \"%s\"\n" % (has_cuda, cuda_path))
    if has_cuda:
        ctx.symlink(cuda_path + "/include", "cuda_include")
        build = """
package(default_visibility = ["//visibility:public"])

cc_library(
    name = "cuda_runtime",
    hdrs = glob(["cuda_include/**/*.h", "cuda_include/**/*.hpp"]),
    includes = ["cuda_include"],
    linkopts = [
        "-L{p}/lib64",
        "-Wl,-rpath,{p}/lib64",
        "-lcublas",
        "-lcudart",
        "-ldl",
        "-lpthread",
        "-lrt",
    ],
)
""".format(p = cuda_path)
    else:
        build = """
package(default_visibility = ["//visibility:public"])

cc_library(name = "cuda_runtime")
"""
    ctx.file("BUILD", build)

cuda_configure = repository_rule(
    implementation = _cuda_configure_impl,
    environ = ["CUDA_PATH", "KESTREL_CUDA"],
    local = True,
)
