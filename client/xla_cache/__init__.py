"""Client of the XLA compilation-cache service.

``xla_cache.warm()`` at job start fills the local torch_xla persistent cache from the server and uploads what
the job compiles; ``xla_cache.flush()`` uploads now. Importing this package never imports torch or torch_xla.

    import torch_xla.runtime as xr
    import xla_cache

    xr.use_spmd()                      # first, if the job uses SPMD (it is part of the fingerprint)
    report = xla_cache.warm("http://cache-vm:8080", "/tmp/xla-cache")   # before the first graph runs
    ...                                # training; new entries are uploaded in the background and at exit

torch_xla's cache directory is ``<cache_dir>/<namespace>``: one per runtime fingerprint (see
:mod:`xla_cache.fingerprint`), so without SPMD one per process. Server trouble never raises: it costs at most
``timeout`` seconds and one logged warning (logger ``xla_cache``), and training goes on with the local cache.
Each warmed process reports its run to the server (hits, compiles, compile seconds, the keys it compiled;
:mod:`xla_cache.runs`); ``xla_cache.run_report()`` returns it as it stands.
"""

from __future__ import annotations

from xla_cache.config import ClientConfig, default_cache_dir, namespace_dir
from xla_cache.errors import (
    CacheAlreadyInitialized,
    ClientError,
    CorruptTransfer,
    FrameworkUnavailable,
    ServerError,
    ServerProblem,
    ServerUnavailable,
    TorchXlaUnavailable,
)
from xla_cache.namespace import collect_fingerprint, namespace_id
from xla_cache.process import flush, run_report, stop
from xla_cache.uploader import UploadReport
from xla_cache.warm_report import WarmReport
from xla_cache.warming import warm

__all__ = [
    "CacheAlreadyInitialized",
    "ClientConfig",
    "ClientError",
    "CorruptTransfer",
    "FrameworkUnavailable",
    "ServerError",
    "ServerProblem",
    "ServerUnavailable",
    "TorchXlaUnavailable",
    "UploadReport",
    "WarmReport",
    "collect_fingerprint",
    "default_cache_dir",
    "flush",
    "namespace_dir",
    "namespace_id",
    "run_report",
    "stop",
    "warm",
]
