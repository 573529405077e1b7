"""Builds the kestrel package's extension with Bazel for the interpreter running this (pip install ./python).

Hand-written because the extension is one Bazel target (//python:kestrel/_kestrel.so) over the repository's C++
libraries: setuptools only asks Bazel for it, compiled against this interpreter's CPython headers
(sysconfig) and pybind11's (a pip-installed pybind11 when this interpreter has one, else Debian's pybind11-dev),
through the @python_headers repository (third_party/python/python_configure.bzl), and copies it into the package.

Environment:
  KESTREL_BAZEL          the bazel command. Default: bazel.
  KESTREL_BAZEL_FLAGS    flags for `bazel build` and `bazel info`. Default: "-c opt".
"""
import os
import shlex
import shutil
import subprocess
import sysconfig

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
TARGET = "//python:kestrel/_kestrel.so"


def pybind11_include():
    try:
        import pybind11
        return pybind11.get_include()
    except ImportError:
        return "/usr/include"


class BazelExtension(build_ext):
    def build_extension(self, ext):
        bazel = shlex.split(os.environ.get("KESTREL_BAZEL", "bazel"))
        flags = shlex.split(os.environ.get("KESTREL_BAZEL_FLAGS", "-c opt"))
        if not os.path.exists(os.path.join(REPO, "WORKSPACE")):
            raise RuntimeError(f"{REPO} is not the Kestrel repository: build from its python/ directory")
        headers = [f"--repo_env=KESTREL_PYTHON_INCLUDE={sysconfig.get_paths()['include']}",
                   f"--repo_env=KESTREL_PYBIND11_INCLUDE={pybind11_include()}"]
        subprocess.run(bazel + ["build"] + flags + headers + [TARGET], cwd=REPO, check=True)
        bin_dir = subprocess.run(bazel + ["info"] + flags + headers + ["bazel-bin"], cwd=REPO, check=True,
                                 stdout=subprocess.PIPE, text=True).stdout.strip()
        out = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(out), exist_ok=True)
        shutil.copyfile(os.path.join(bin_dir, "python", "kestrel", "_kestrel.so"), out)


setup(ext_modules=[Extension("kestrel._kestrel", sources=[])], cmdclass={"build_ext": BazelExtension})
