"""kestrel: Kestrel's parameter-server client for Python.

A thin layer over the C++ client (the `_kestrel` extension, python/kestrel/_kestrel.cc): tables are created,
pulled and pushed through it with numpy arrays, and a refused call raises KestrelError with the server's status
code and message. kestrel.Worker joins a cluster job as a training worker (kestrel.worker drives its loop).
kestrel.torch (imported on its own: it needs PyTorch) puts the tables inside a PyTorch
model. kestrel.PredictClient asks a prediction service (kestrel_serve) for scores.
"""
from kestrel import _kestrel
from kestrel._kestrel import (Client, KestrelError, PredictClient, Reader, Worker, auc, duration_seconds,
                              feature_keys, fingerprint, job_settings, logloss, write_record)

# KestrelError's subclass per status code (InvalidArgumentError, NotFoundError, UnavailableError, ...).
ERRORS = {name: getattr(_kestrel, name) for name in dir(_kestrel)
          if name.endswith("Error") and name != "KestrelError" and isinstance(getattr(_kestrel, name), type)
          and issubclass(getattr(_kestrel, name), KestrelError)}
globals().update(ERRORS)



__all__ = ["Client", "KestrelError", "PredictClient", "Reader", "Worker", "auc", "duration_seconds", "feature_keys",
           "fingerprint", "job_settings", "logloss", "write_record"] + sorted(ERRORS)
