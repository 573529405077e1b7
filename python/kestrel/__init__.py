"""kestrel: Kestrel's parameter-server client for Python.

A thin layer over the C++ client (the `_kestrel` extension, python/kestrel/_kestrel.cc): tables are created,
pulled and pushed through it with numpy arrays, and a refused call raises KestrelError with the server's status
code and message.
"""
from kestrel._kestrel import Client, KestrelError

__all__ = ["Client", "KestrelError"]
