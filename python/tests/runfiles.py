"""What the Python tests that run binaries and examples share: paths into Bazel's runfiles, and the environment
that lets a child Python process import the kestrel package."""
import os
import sys

ROOT = os.path.join(os.environ.get("TEST_SRCDIR", "."), os.environ.get("TEST_WORKSPACE", "kestrel"))


def path(relative):
    """A runfile by its workspace-relative path (e.g. "server/kestrel_server")."""
    return os.path.join(ROOT, relative)


def child_env():
    """This process's environment with its module path, for a child `python3` that imports kestrel."""
    return dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
