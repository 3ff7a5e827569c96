"""Client of the XLA compilation-cache service.

``xla_cache.warm()`` at job start fills the local torch_xla persistent cache from the server and uploads what
the job compiles; ``xla_cache.flush()`` uploads now. Importing this package never imports torch or torch_xla.

    import torch_xla.runtime as xr
    import xla_cache

    xr.use_spmd()                      # first, if the job uses SPMD (it is part of the fingerprint)
    report = xla_cache.warm("http://cache-vm:8080", "/tmp/xla-cache")   # before the first graph runs
    ...                                # training; new entries are uploaded in the background and at exit

torch_xla's cache directory is ``<cache_dir>/<namespace>``: one per runtime fingerprint (see
:mod:`xla_cache.frameworks.fingerprint`), so without SPMD one per process. Server trouble never raises: it
costs at most ``timeout`` seconds and one logged warning (logger ``xla_cache``), and training goes on with the
local cache.
Each warmed process reports its run to the server (hits, compiles, compile seconds, the keys it compiled;
:mod:`xla_cache.runs`); ``xla_cache.run_report()`` returns it as it stands.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

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

if TYPE_CHECKING:
    from xla_cache.config import ClientConfig, default_cache_dir, namespace_dir
    from xla_cache.frameworks.namespace import collect_fingerprint, namespace_id
    from xla_cache.runs.process import flush, run_report, stop
    from xla_cache.transfer.uploader import UploadReport
    from xla_cache.warm_report import WarmReport
    from xla_cache.warming import warm

# Imported when first used (PEP 562): ``xla-cache``'s command line imports this package, and most of its
# subcommands need neither the warm nor the HTTP client behind it (issue 46: the import under 0.3 s).
_LAZY = {
    "ClientConfig": "xla_cache.config",
    "default_cache_dir": "xla_cache.config",
    "namespace_dir": "xla_cache.config",
    "collect_fingerprint": "xla_cache.frameworks.namespace",
    "namespace_id": "xla_cache.frameworks.namespace",
    "flush": "xla_cache.runs.process",
    "run_report": "xla_cache.runs.process",
    "stop": "xla_cache.runs.process",
    "UploadReport": "xla_cache.transfer.uploader",
    "WarmReport": "xla_cache.warm_report",
    "warm": "xla_cache.warming",
}


def __getattr__(name: str) -> Any:
    """The public names not imported yet: each imported from its module on first use, then kept."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'xla_cache' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


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
