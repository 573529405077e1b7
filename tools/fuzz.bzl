"""Fuzz targets: one LLVMFuzzerTestOneInput source, a libFuzzer binary and a corpus replay test.

kestrel_fuzz_test(name = "x_fuzz", srcs = ["x_fuzz.cc"], deps = [...]) makes
  - `x_fuzz`: the libFuzzer binary (linked with -fsanitize=fuzzer). It builds only with clang under
    --config=fuzz (scripts/fuzz.sh, in its own output base), so it is tagged "manual" as well as "fuzz".
  - `x_fuzz_replay`: a small cc_test built with the default toolchain that runs the same source over the
    checked-in corpus tests/fuzz_corpus/x/ (seeds and regressions/) through common/fuzz_replay_main.cc, so
    `bazel test //...` replays every seed and every earlier finding.
"""

def kestrel_fuzz_test(name, srcs, deps = [], corpus = None):
    if corpus == None:
        if not name.endswith("_fuzz"):
            fail("kestrel_fuzz_test: name a fuzz target x_fuzz, or pass corpus")
        corpus = name[:-len("_fuzz")]
    deps = deps + ["//common:fuzz_input"]
    native.cc_binary(
        name = name,
        testonly = True,
        srcs = srcs,
        deps = deps,
        linkopts = ["-fsanitize=fuzzer"],
        tags = ["fuzz", "manual"],
    )
    native.cc_test(
        name = name + "_replay",
        size = "small",
        srcs = srcs,
        deps = deps + ["//common:fuzz_replay_main"],
        args = ["tests/fuzz_corpus/" + corpus],
        data = ["//tests/fuzz_corpus:" + corpus],
        tags = ["fuzz"],
    )
