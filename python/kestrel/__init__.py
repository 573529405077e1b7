"""kestrel: Kestrel's parameter-server client for Python.

A thin layer over the C++ client (the `_kestrel` extension, python/kestrel/_kestrel.cc): tables are created,
pulled and pushed through it with numpy arrays, and a refused call raises KestrelError with the server's status
code and message. kestrel.Worker joins a cluster job as a training worker (kestrel.worker drives its loop).
kestrel.torch (imported on its own: it needs PyTorch) puts the tables inside a PyTorch
model.
"""
from kestrel import _kestrel
from kestrel._kestrel import (Client, KestrelError, Reader, Worker, auc, duration_seconds, feature_keys, fingerprint,
                              job_settings, logloss, write_record)

# KestrelError's subclass per status code (InvalidArgumentError, NotFoundError, UnavailableError, ...).
ERRORS = {name: getattr(_kestrel, name) for name in dir(_kestrel)
          if name.endswith("Error") and name != "KestrelError" and isinstance(getattr(_kestrel, name), type)
          and issubclass(getattr(_kestrel, name), KestrelError)}
globals().update(ERRORS)



def batches(reader, size, depth=2):
    """The batches of `reader` (a Reader), `size` examples each, read up to `depth` batches ahead on a thread of
    their own: Reader.next parses without the GIL, so the next batches are read while the caller computes. Where
    the cores are all PyTorch's (2 cores, 2 threads), the reading thread preempts its OpenMP threads mid-kernel
    and costs more than it hides (measured on the DeepFM example: 23k-50k examples/s against a steady 32k-40k
    read in line): fit() and the examples read in line."""
    import queue
    import threading
    ahead = queue.Queue(maxsize=max(1, depth))
    done = object()

    def read():
        try:
            while (batch := reader.next(size)) is not None:
                ahead.put(batch)
            ahead.put(done)
        except BaseException as error:  # raised in the caller's thread
            ahead.put(error)

    threading.Thread(target=read, daemon=True).start()
    while (item := ahead.get()) is not done:
        if isinstance(item, BaseException):
            raise item
        yield item


__all__ = ["Client", "KestrelError", "Reader", "Worker", "auc", "batches", "duration_seconds", "feature_keys",
           "fingerprint", "job_settings", "logloss", "write_record"] + sorted(ERRORS)
