"""Where the client's settings come from: the call's own arguments first, then the environment.

``XLA_CACHE_SERVER`` (the server's URL), ``XLA_CACHE_TOKEN`` (a bearer token), ``XLA_CACHE_DIR`` (the base
cache directory; else ``$XDG_CACHE_HOME/xla-cache``, else ``~/.cache/xla-cache``),
``XLA_CACHE_SIGNING_KEY`` (the key this client signs its uploads with: the key itself or a file holding it),
``XLA_CACHE_TRUSTED_KEYS`` (public keys, or files of them, comma separated: with any, only entries they
signed are placed; :mod:`xla_cache.trust`), ``XLA_CACHE_COMPRESSION`` (``auto``, ``on`` or ``off``: whether
bulk uploads and bundles travel zstd-compressed; see :func:`wants_compression`) and
``XLA_CACHE_REDACT_FLAG_VALUES`` (``1``: the fingerprint names each XLA flag but not its value; see
:func:`redacts_flag_values`). ``warm()``, the CLI and ``doctor`` all resolve them here.
``XLA_CACHE_RUN_REPORTS`` (``0`` turns run reports off) and ``XLA_CACHE_REPORT_INTERVAL`` (seconds between
a running job's reports) are read by :func:`run_report_settings`.
"""

from __future__ import annotations

import ipaddress
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from cache_protocol.runs import REPORT_INTERVAL_SECONDS
from cache_protocol.signing import BadKey, Signer, Verifier, parse_public_keys, read_key_texts
from xla_cache.errors import ClientError

__all__ = [
    "COMPRESSION_ENV",
    "ENVIRONMENT",
    "REDACT_FLAG_VALUES_ENV",
    "REPORT_INTERVAL_ENV",
    "RUN_REPORTS_ENV",
    "SIGNING_KEY_ENV",
    "TRUSTED_KEYS_ENV",
    "ClientConfig",
    "Compression",
    "EnvironmentVariable",
    "RunReportSettings",
    "default_cache_dir",
    "is_loopback",
    "namespace_dir",
    "redacts_flag_values",
    "run_report_settings",
    "wants_compression",
]

COMPRESSION_ENV = "XLA_CACHE_COMPRESSION"
RUN_REPORTS_ENV = "XLA_CACHE_RUN_REPORTS"
REPORT_INTERVAL_ENV = "XLA_CACHE_REPORT_INTERVAL"
REDACT_FLAG_VALUES_ENV = "XLA_CACHE_REDACT_FLAG_VALUES"
SIGNING_KEY_ENV = "XLA_CACHE_SIGNING_KEY"
TRUSTED_KEYS_ENV = "XLA_CACHE_TRUSTED_KEYS"


@dataclass(frozen=True)
class EnvironmentVariable:
    """One variable the client reads: its name, default and meaning (listed in docs/reference/settings.md)."""

    name: str
    default: str
    description: str


ENVIRONMENT: tuple[EnvironmentVariable, ...] = (
    EnvironmentVariable(
        "XLA_CACHE_SERVER", "(none)", "The server's URL; warm() and the CLI's --server win over it."
    ),
    EnvironmentVariable("XLA_CACHE_TOKEN", "(none)", "Bearer token sent to the server (with auth on)."),
    EnvironmentVariable(
        "XLA_CACHE_DIR",
        "$XDG_CACHE_HOME/xla-cache, else ~/.cache/xla-cache",
        "Base cache directory: each namespace's entries live in <dir>/<namespace>.",
    ),
    EnvironmentVariable(
        SIGNING_KEY_ENV,
        "(none)",
        "The key this client signs its uploads with: the key itself or a file holding it.",
    ),
    EnvironmentVariable(
        TRUSTED_KEYS_ENV,
        "(none)",
        "Public keys, or files of them, comma separated: with any, only entries they signed are placed.",
    ),
    EnvironmentVariable(
        COMPRESSION_ENV,
        "auto",
        "auto, on or off: whether bulk uploads and bundles travel zstd-compressed (auto: bundles not from a "
        "server on loopback).",
    ),
    EnvironmentVariable(
        REDACT_FLAG_VALUES_ENV, "0", "1: the fingerprint names each XLA flag but not its value."
    ),
    EnvironmentVariable(RUN_REPORTS_ENV, "1", "0 (or off, false, no) turns run reports off."),
    EnvironmentVariable(
        REPORT_INTERVAL_ENV,
        str(REPORT_INTERVAL_SECONDS),
        "Seconds between a running job's run reports.",
    ),
)
logger = logging.getLogger("xla_cache")


def is_loopback(server_url: str) -> bool:
    """Whether the server's host is this machine's loopback (``localhost``, 127.0.0.0/8, ``::1``), by its
    name alone: nothing is resolved."""
    host = (urlsplit(server_url).hostname or "").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class Compression:
    """Whether bulk uploads are sent, and bundles asked for, zstd-compressed."""

    uploads: bool
    bundles: bool


def wants_compression(server_url: str, env: Mapping[str, str] | None = None) -> Compression:
    """``XLA_CACHE_COMPRESSION``: ``on`` or ``off`` for both; ``auto`` (the default) compresses uploads
    always and bundles unless the server is on loopback. Measured on loopback (BENCHMARKS.md): a compressed
    bundle made a warm up to twice as slow and a fleet's warms slower (the server compresses each bundle);
    a compressed push took about as long as a plain one (one faster, one slower, by up to a fifth, in
    alternating runs) and the server, which many uploaders share, receives a thirtieth of the bytes; over
    any real link both win."""
    env = os.environ if env is None else env
    value = env.get(COMPRESSION_ENV, "auto").strip().lower() or "auto"
    if value in ("on", "1", "true", "yes"):
        return Compression(uploads=True, bundles=True)
    if value in ("off", "0", "false", "no"):
        return Compression(uploads=False, bundles=False)
    if value != "auto":
        logger.warning("xla-cache: %s=%r is not auto, on or off; using auto", COMPRESSION_ENV, value)
    return Compression(uploads=True, bundles=not is_loopback(server_url))


@dataclass(frozen=True)
class RunReportSettings:
    """Whether a job that warms sends run reports, and how many seconds apart while it runs."""

    enabled: bool
    interval: float


def run_report_settings(env: Mapping[str, str] | None = None) -> RunReportSettings:
    """``XLA_CACHE_RUN_REPORTS`` (on unless ``0``, ``off``, ``false`` or ``no``) and
    ``XLA_CACHE_REPORT_INTERVAL`` (seconds, default :data:`cache_protocol.runs.REPORT_INTERVAL_SECONDS`; a
    value that is not a positive number is warned about and the default used)."""
    env = os.environ if env is None else env
    enabled = env.get(RUN_REPORTS_ENV, "1").strip().lower() not in ("0", "off", "false", "no")
    raw = env.get(REPORT_INTERVAL_ENV, "").strip()
    interval = REPORT_INTERVAL_SECONDS
    if raw:
        try:
            interval = float(raw)
            if not (0 < interval < float("inf")):
                raise ValueError(raw)
        except ValueError:
            logger.warning(
                "xla-cache: %s=%r is not a positive number of seconds; using %g",
                REPORT_INTERVAL_ENV,
                raw,
                REPORT_INTERVAL_SECONDS,
            )
            interval = REPORT_INTERVAL_SECONDS
    return RunReportSettings(enabled=enabled, interval=interval)


def redacts_flag_values(env: Mapping[str, str] | None = None) -> bool:
    """``XLA_CACHE_REDACT_FLAG_VALUES``: ``1`` (or ``true``, ``yes``, ``on``) keeps the values of XLA flags
    out of the fingerprint the server stores (their names stay, so the server can still say which flags set
    two namespaces apart); for sites whose flags hold paths or names they do not want on the server. The
    namespace id does not change: it hashes a digest of the flags either way."""
    env = os.environ if env is None else env
    return env.get(REDACT_FLAG_VALUES_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def default_cache_dir(env: Mapping[str, str] | None = None) -> Path:
    """``$XLA_CACHE_DIR``, else ``$XDG_CACHE_HOME/xla-cache``, else ``~/.cache/xla-cache``."""
    env = os.environ if env is None else env
    configured = env.get("XLA_CACHE_DIR")
    if configured:
        return Path(configured)
    base = env.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "xla-cache"


def namespace_dir(cache_dir: Path | str, namespace: str) -> Path:
    """The directory the framework's cache uses for one namespace: ``<cache_dir>/<namespace>``.

    One directory per namespace keeps entries of different runtimes apart on disk too.
    """
    return Path(cache_dir) / namespace


@dataclass(frozen=True)
class ClientConfig:
    """The server (None: local cache only), the token and the base cache directory of one call; the signing
    key and the trusted keys as configured (texts or paths; read by :meth:`signer` and :meth:`verifier`)."""

    server: str | None
    token: str | None
    cache_dir: Path
    signing_key: str | None = None
    trusted_keys: str | None = None

    def signer(self) -> Signer | None:
        """The key uploads are signed with (``XLA_CACHE_SIGNING_KEY``), or None. :class:`ClientError` when
        it is set but cannot be read: a job must not upload unsigned what it was told to sign."""
        if not self.signing_key:
            return None
        try:
            return Signer.from_text(read_key_texts(self.signing_key))
        except (OSError, BadKey, ValueError) as exc:
            raise ClientError(f"{SIGNING_KEY_ENV}: {exc}") from None

    def verifier(self) -> Verifier | None:
        """The trusted public keys (``XLA_CACHE_TRUSTED_KEYS``), or None: nothing is verified.
        :class:`ClientError` when set but unreadable or empty: a job told to verify never skips it."""
        if not self.trusted_keys:
            return None
        try:
            keys = parse_public_keys(read_key_texts(self.trusted_keys))
        except (OSError, BadKey, ValueError) as exc:
            raise ClientError(f"{TRUSTED_KEYS_ENV}: {exc}") from None
        if not keys:
            raise ClientError(f"{TRUSTED_KEYS_ENV} is set but names no key")
        return Verifier(keys)

    @classmethod
    def resolve(
        cls,
        server: str | None = None,
        token: str | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
        env: Mapping[str, str] | None = None,
    ) -> ClientConfig:
        """The given values, each missing one from the environment."""
        env = os.environ if env is None else env
        return cls(
            server=server or env.get("XLA_CACHE_SERVER") or None,
            token=token or env.get("XLA_CACHE_TOKEN") or None,
            cache_dir=Path(cache_dir) if cache_dir is not None else default_cache_dir(env),
            signing_key=env.get(SIGNING_KEY_ENV) or None,
            trusted_keys=env.get(TRUSTED_KEYS_ENV) or None,
        )
