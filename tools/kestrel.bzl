"""Build macros: protobuf/gRPC code generation and CUDA compilation with system tools (offline)."""

load("@local_cuda//:defs.bzl", "CUDA_PATH", "HAS_CUDA")

def kestrel_proto(name, src, deps = [], grpc = True):
    """One cc_library `name` generated from one .proto by protoc (+ grpc_cpp_plugin when grpc = True).

    deps: other kestrel_proto targets whose .proto files `src` imports.
    """
    base = src[:-len(".proto")]
    pkg = native.package_name()
    outs = [base + ".pb.h", base + ".pb.cc"]
    if grpc:
        outs += [base + ".grpc.pb.h", base + ".grpc.pb.cc"]
    cmd = "protoc -I. --cpp_out=$(GENDIR) $(location %s)" % src
    if grpc:
        cmd += " --grpc_out=$(GENDIR) --plugin=protoc-gen-grpc=/usr/bin/grpc_cpp_plugin"
    native.genrule(
        name = name + "_gen",
        srcs = [src] + [d + "_srcs" for d in deps],
        outs = outs,
        cmd = cmd,
    )
    # Transitive: a .proto that imports this one also needs what this one imports.
    native.filegroup(name = name + "_srcs", srcs = [src] + [d + "_srcs" for d in deps])
    native.cc_library(
        name = name,
        srcs = [o for o in outs if o.endswith(".cc")],
        hdrs = [o for o in outs if o.endswith(".h")],
        deps = deps + ["@system//:protobuf"] + (["@system//:grpc"] if grpc else []),
    )

def kestrel_cuda_library(name, srcs, hdrs = [], deps = [], **kwargs):
    """A cc_library built from .cu files by nvcc when the CUDA toolkit is present.

    Where it is absent, the library is empty and `KESTREL_HAS_CUDA` is not defined, so callers compile their
    CPU-only path. Code is generated for Hopper (sm_90) and Ampere (sm_80) plus compute_90 PTX.
    """
    if not HAS_CUDA:
        native.cc_library(name = name, hdrs = hdrs, deps = deps, **kwargs)
        return
    objs = []
    for src in srcs:
        obj = name + "_" + src.replace("/", "_").replace(".cu", ".o")
        native.genrule(
            name = obj + "_nvcc",
            srcs = depset([src] + hdrs + native.glob(["**/*.h"])).to_list(),
            outs = [obj],
            cmd = ("%s/bin/nvcc -O3 -std=c++17 -Xcompiler -fPIC -I. -I$(GENDIR) -DKESTREL_HAS_CUDA=1 " +
                   "-gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 " +
                   "-gencode arch=compute_90,code=compute_90 -c $(location %s) -o $@") % (CUDA_PATH, src),
        )
        objs.append(obj)
    native.cc_library(
        name = name,
        srcs = objs,
        hdrs = hdrs,
        defines = ["KESTREL_HAS_CUDA=1"],
        deps = deps + ["@local_cuda//:cuda_runtime"],
        **kwargs
    )
