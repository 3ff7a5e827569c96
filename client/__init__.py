"""Client of the XLA compilation-cache service.

``client.warm()`` at job start fills the local torch_xla persistent cache from the server and uploads what
the job compiles; ``client.flush()`` uploads now. Importing this package never imports torch or torch_xla.
"""

from __future__ import annotations

from client.errors import (
    CacheAlreadyInitialized,
    ClientError,
    CorruptTransfer,
    ServerError,
    ServerProblem,
    ServerUnavailable,
    TorchXlaUnavailable,
)
from client.fingerprint import collect_fingerprint, namespace_id
from client.uploader import UploadReport
from client.warming import WarmReport, default_cache_dir, flush, namespace_dir, warm

__all__ = [
    "CacheAlreadyInitialized",
    "ClientError",
    "CorruptTransfer",
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
    "warm",
]
