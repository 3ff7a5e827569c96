"""The client's public errors.

Only programming mistakes and explicit CLI failures are raised to the caller. Server trouble during
:func:`xla_cache.warm` is never raised: it becomes one warning and an entry in the report's ``errors``
(fail open).
"""

from __future__ import annotations

__all__ = [
    "CacheAlreadyInitialized",
    "ClientError",
    "CorruptTransfer",
    "FrameworkUnavailable",
    "ServerError",
    "ServerProblem",
    "ServerUnavailable",
    "TorchXlaUnavailable",
]


class ClientError(Exception):
    """Base class of every error the client raises."""


class FrameworkUnavailable(ClientError):
    """The framework cannot be imported, so its runtime cannot be fingerprinted or its cache initialized."""


class TorchXlaUnavailable(FrameworkUnavailable):
    """torch_xla cannot be imported, so the runtime cannot be fingerprinted or its cache initialized."""


class CacheAlreadyInitialized(ClientError):
    """torch_xla already compiled a graph in this process, so its persistent cache can no longer be set."""


class ServerProblem(ClientError):
    """The server could not be used; ``reason`` is a sentence naming why (shown in the warning)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class ServerUnavailable(ServerProblem):
    """No answer: connection refused, DNS failure, TLS failure, or a timeout."""


class ServerError(ServerProblem):
    """The server answered with an error status (its JSON ``error`` code and ``detail`` are kept)."""

    def __init__(self, reason: str, *, status: int, code: str = "", detail: str = "") -> None:
        super().__init__(reason)
        self.status = status
        self.code = code
        self.detail = detail


class CorruptTransfer(ServerProblem):
    """Bytes from the server that do not verify: a broken tar stream, a wrong size or SHA-256."""
