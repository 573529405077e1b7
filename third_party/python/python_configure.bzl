"""The headers the Python extension (python/) compiles against: CPython's of the interpreter it is built for, and
pybind11's.

Generates @<name>//:python, a cc_library of
  KESTREL_PYTHON_INCLUDE   that interpreter's include directory (sysconfig.get_paths()["include"]); default
                           /usr/include/python3.11, Debian's python3-dev;
  KESTREL_PYBIND11_INCLUDE the directory holding pybind11/ (pybind11.get_include() of a pip-installed
                           pybind11, for an interpreter newer than Debian's pybind11-dev supports); default
                           /usr/include, Debian's pybind11-dev.
`pip install ./python` (python/setup.py) sets both for the interpreter it runs under (`--repo_env`); the
default build uses Debian's.
"""

def _python_configure_impl(ctx):
    include = ctx.os.environ.get("KESTREL_PYTHON_INCLUDE", "/usr/include/python3.11")
    pybind11 = ctx.os.environ.get("KESTREL_PYBIND11_INCLUDE", "/usr/include")
    if not ctx.path(include + "/Python.h").exists:
        fail("KESTREL_PYTHON_INCLUDE=%s holds no Python.h (install python3-dev, or point it at your interpreter's " % include +
             "sysconfig.get_paths()['include'])")
    if not ctx.path(pybind11 + "/pybind11/pybind11.h").exists:
        fail("KESTREL_PYBIND11_INCLUDE=%s holds no pybind11/pybind11.h (install pybind11-dev, or pip's pybind11)" % pybind11)
    ctx.symlink(include, "python_include")
    ctx.symlink(pybind11 + "/pybind11", "pybind11_include/pybind11")
    ctx.file("BUILD", """
package(default_visibility = ["//visibility:public"])

cc_library(
    name = "python",
    hdrs = glob(["python_include/**/*.h", "pybind11_include/**/*.h"]),
    includes = ["python_include", "pybind11_include"],
)
""")

python_configure = repository_rule(
    implementation = _python_configure_impl,
    environ = ["KESTREL_PYTHON_INCLUDE", "KESTREL_PYBIND11_INCLUDE"],
    local = True,
)
