"""Where the client's settings come from: a flag (or the call's own argument) first, then the environment,
then the config file (:mod:`xla_cache.config_file`), then the default. :meth:`ClientConfig.resolve` does it
once per call and records where each value came from (``xla-cache config`` prints that).

``XLA_CACHE_SERVER`` (the server's URL; default :data:`DEFAULT_SERVER`, where ``./scripts/serve`` listens;
``none`` for the local cache only), ``XLA_CACHE_TOKEN`` (a bearer token), ``XLA_CACHE_DIR`` (the base
cache directory; else ``$XDG_CACHE_HOME/xla-cache``, else ``~/.cache/xla-cache``),
``XLA_CACHE_SIGNING_KEY`` (the key this client signs its uploads with: the key itself or a file holding it),
``XLA_CACHE_TRUSTED_KEYS`` (public keys, or files of them, comma separated: with any, only entries they
signed are placed; :mod:`xla_cache.trust`): each also a key of the config file. ``XLA_CACHE_CONFIG`` names
the config file. Environment only, read by :meth:`ClientConfig.resolve` too: ``XLA_CACHE_COMPRESSION``
(``auto``, ``on`` or ``off``: whether bulk uploads and bundles travel zstd-compressed; see
:func:`wants_compression`; :attr:`ClientConfig.compression`), ``XLA_CACHE_RUN_REPORTS`` (``0`` turns run
reports off) and ``XLA_CACHE_REPORT_INTERVAL`` (seconds between a running job's reports;
:attr:`ClientConfig.run_reports`). ``warm()``, the CLI and ``doctor`` all resolve them here, once per call.
``XLA_CACHE_REDACT_FLAG_VALUES`` (``1``: the fingerprint names each XLA flag but not its value; see
:func:`redacts_flag_values`) is read with the rest of the fingerprint, from the environment the runtime's
fingerprint is collected from.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from cache_protocol.runs import REPORT_INTERVAL_SECONDS
from cache_protocol.signing import BadKey, Signer, Verifier, parse_public_keys, read_key_texts
from xla_cache.config_file import CONFIG_ENV, KEYS, read_config_file
from xla_cache.errors import ClientError
from xla_cache.logs import logger

__all__ = [
    "COMPRESSION_ENV",
    "DEFAULT_SERVER",
    "ENVIRONMENT",
    "LOCAL_ONLY",
    "REDACT_FLAG_VALUES_ENV",
    "REPORT_INTERVAL_ENV",
    "RUN_REPORTS_ENV",
    "SIGNING_KEY_ENV",
    "TRUSTED_KEYS_ENV",
    "ClientConfig",
    "Compression",
    "EnvironmentVariable",
    "RunReportSettings",
    "auto_compression",
    "default_cache_dir",
    "is_loopback",
    "namespace_dir",
    "normalize_server",
    "redacts_flag_values",
    "run_report_settings",
    "server_url_problem",
    "wants_compression",
]

DEFAULT_SERVER = "http://127.0.0.1:8080"  # where ./scripts/serve and xla-cache-server serve listen
LOCAL_ONLY = ("none", "off")  # a server setting that means: no server, the local cache only
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
        "XLA_CACHE_SERVER",
        DEFAULT_SERVER,
        "The server's URL (none: the local cache only); warm()'s argument and --server win over it, it wins "
        "over the config file's server.",
    ),
    EnvironmentVariable(
        "XLA_CACHE_TOKEN", "(none)", "Bearer token sent to the server (with auth on); over the config file's."
    ),
    EnvironmentVariable(
        "XLA_CACHE_DIR",
        "$XDG_CACHE_HOME/xla-cache, else ~/.cache/xla-cache",
        "Base cache directory: each namespace's entries live in <dir>/<namespace>; over the config file's.",
    ),
    EnvironmentVariable(
        CONFIG_ENV,
        "$XDG_CONFIG_HOME/xla-cache/config.toml, else ~/.config/xla-cache/config.toml",
        "The config file (TOML: server, token, cache_dir, signing_key, trusted_keys); empty: none.",
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


def normalize_server(server: str) -> str:
    """``host:port`` or a URL -> a base URL without a trailing slash."""
    server = server.strip()
    if "://" not in server:
        server = "http://" + server
    return server.rstrip("/")


# The first segments of the server's own paths: a server URL ending in one of them is a path of the API,
# not the server's base URL (which may have a path of its own, behind a proxy).
_API_SEGMENTS = ("v1", "admin", "dashboard", "metrics", "healthz", "readyz", "docs", "openapi.json")


def server_url_problem(server: str) -> str | None:
    """Why ``server`` is not a usable base URL (a scheme other than http or https, no host, or a path of
    the API itself such as ``http://host:8080/v1``), or None."""
    url = normalize_server(server)
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        return f"{server!r} is not an http:// or https:// URL"
    if not parts.hostname:
        return f"{server!r} names no host"
    segments = parts.path.strip("/").split("/")
    if segments[-1] in _API_SEGMENTS:
        base = url[: url.rindex("/" + segments[-1])] or f"{parts.scheme}://{parts.netloc}"
        return (
            f"{server!r} is a path of the server's API, not its base URL: use {base} (the client adds "
            f"/{segments[-1]} and the other paths itself)"
        )
    return None


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


def auto_compression(server_url: str) -> Compression:
    """``XLA_CACHE_COMPRESSION=auto``: uploads compressed always, bundles unless the server is on loopback
    (see :func:`wants_compression`)."""
    return Compression(uploads=True, bundles=not is_loopback(server_url))


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
    return auto_compression(server_url)


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
    """``$XLA_CACHE_DIR``, else the config file's ``cache_dir``, else ``$XDG_CACHE_HOME/xla-cache``, else
    ``~/.cache/xla-cache``."""
    return ClientConfig.resolve(env=env).cache_dir


def namespace_dir(cache_dir: Path | str, namespace: str) -> Path:
    """The directory the framework's cache uses for one namespace: ``<cache_dir>/<namespace>``.

    One directory per namespace keeps entries of different runtimes apart on disk too.
    """
    return Path(cache_dir) / namespace


@dataclass(frozen=True)
class ClientConfig:
    """The server (None: local cache only), the token and the base cache directory of one call; the signing
    key and the trusted keys as configured (texts or paths; read by :meth:`signer` and :meth:`verifier`);
    whether transfers travel compressed and how the job reports its run (the environment read once, here);
    and where each came from (``sources``: ``--server``, ``XLA_CACHE_SERVER``, ``config file PATH`` or
    ``default``)."""

    server: str | None
    token: str | None
    cache_dir: Path
    signing_key: str | None = None
    trusted_keys: str | None = None
    compression: Compression = field(default_factory=lambda: Compression(uploads=True, bundles=True))
    run_reports: RunReportSettings = field(
        default_factory=lambda: RunReportSettings(enabled=True, interval=REPORT_INTERVAL_SECONDS)
    )
    sources: Mapping[str, str] = field(default_factory=dict, compare=False)
    config_file: Path | None = field(default=None, compare=False)

    def signer(self) -> Signer | None:
        """The key uploads are signed with (``XLA_CACHE_SIGNING_KEY``), or None. :class:`ClientError` when
        it is set but cannot be read: a job must not upload unsigned what it was told to sign."""
        if not self.signing_key:
            return None
        try:
            return Signer.from_text(read_key_texts(self.signing_key))
        except (OSError, BadKey, ValueError) as exc:
            raise ClientError(f"{SIGNING_KEY_ENV} ({self.sources.get('signing_key')}): {exc}") from None

    def verifier(self) -> Verifier | None:
        """The trusted public keys (``XLA_CACHE_TRUSTED_KEYS``), or None: nothing is verified.
        :class:`ClientError` when set but unreadable or empty: a job told to verify never skips it."""
        if not self.trusted_keys:
            return None
        where = self.sources.get("trusted_keys")
        try:
            keys = parse_public_keys(read_key_texts(self.trusted_keys))
        except (OSError, BadKey, ValueError) as exc:
            raise ClientError(f"{TRUSTED_KEYS_ENV} ({where}): {exc}") from None
        if not keys:
            raise ClientError(f"{TRUSTED_KEYS_ENV} ({where}) is set but names no key")
        return Verifier(keys)

    def server_hint(self) -> str:
        """Where the server's URL came from, and how to set another (for messages about it)."""
        source = self.sources.get("server", "default")
        if source == "default":
            where = f" or server in {self.config_file}" if self.config_file is not None else ""
            return f"the default server; set XLA_CACHE_SERVER{where} to use another"
        return f"from {source}"

    @classmethod
    def resolve(
        cls,
        server: str | None = None,
        token: str | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
        env: Mapping[str, str] | None = None,
        *,
        flags: Mapping[str, str] | None = None,
    ) -> ClientConfig:
        """Each value from the given argument, else the environment, else the config file, else its
        default. ``flags`` names the argument each given value came from (``--server``; default
        ``argument``), for :attr:`sources`. A server of ``none`` or ``off`` means the local cache only."""
        env = os.environ if env is None else env
        given = {"server": server, "token": token, "cache_dir": None if cache_dir is None else str(cache_dir)}
        config_file = read_config_file(env)
        values: dict[str, str | None] = {}
        sources: dict[str, str] = {}
        for key, variable in KEYS.items():
            if given.get(key):
                values[key], sources[key] = given[key], (flags or {}).get(key, "argument")
            elif env.get(variable):
                values[key], sources[key] = env[variable], variable
            elif config_file.values.get(key):
                values[key], sources[key] = config_file.values[key], f"config file {config_file.path}"
            else:
                values[key], sources[key] = None, "default"
        chosen_server = values["server"]
        if chosen_server is None:
            chosen_server = DEFAULT_SERVER
        elif chosen_server.strip().lower() in LOCAL_ONLY:
            chosen_server = None
        if values["cache_dir"]:
            chosen_dir = Path(values["cache_dir"]).expanduser()
        else:
            chosen_dir = Path(env.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")) / "xla-cache"
        return cls(
            server=chosen_server,
            token=values["token"],
            cache_dir=chosen_dir,
            signing_key=values["signing_key"],
            trusted_keys=values["trusted_keys"],
            compression=wants_compression(chosen_server or DEFAULT_SERVER, env),
            run_reports=run_report_settings(env),
            sources=sources,
            config_file=config_file.path,
        )
