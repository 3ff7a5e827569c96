"""Where the client's settings come from: a flag (or the call's own argument) first, then the environment,
then the config file (:mod:`xla_cache.config_file`), then the default. :meth:`ClientConfig.resolve` does it
once per call and records where each value came from (``xla-cache config`` prints that).

``XLA_CACHE_SERVER`` (the server's URL; default :data:`DEFAULT_SERVER`, where ``./scripts/serve`` listens;
``none`` for the local cache only; its URL's rules are :mod:`xla_cache.server_url`), ``XLA_CACHE_TOKEN``
(a bearer token; a token of the config file goes to its own server only, :func:`choose_token`),
``XLA_CACHE_DIR`` (the base
cache directory; else ``$XDG_CACHE_HOME/xla-cache``, else ``~/.cache/xla-cache``),
``XLA_CACHE_SIGNING_KEY`` (the key this client signs its uploads with: the key itself or a file holding it),
``XLA_CACHE_TRUSTED_KEYS`` (public keys, or files of them, comma separated: with any, only entries they
signed are placed; :mod:`xla_cache.transfer.trust`): each also a key of the config file.
``XLA_CACHE_CONFIG`` names the config file. Environment only, read by :meth:`ClientConfig.resolve` too:
``XLA_CACHE_COMPRESSION`` (``auto``, ``on`` or ``off``: whether bulk uploads and bundles travel
zstd-compressed; see :func:`wants_compression`; :attr:`ClientConfig.compression`), ``XLA_CACHE_RUN_REPORTS``
(``0`` turns run reports off) and ``XLA_CACHE_REPORT_INTERVAL`` (seconds between a running job's reports;
:attr:`ClientConfig.run_reports`). ``warm()``, the CLI and ``doctor`` all resolve them here, once per call.
``XLA_CACHE_REDACT_FLAG_VALUES`` (``1``: the fingerprint names each XLA flag but not its value; see
:func:`redacts_flag_values`) is read with the rest of the fingerprint, from the environment the runtime's
fingerprint is collected from.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from cache_protocol.runs import REPORT_INTERVAL_SECONDS
from cache_protocol.signing import BadKey, Signer, Verifier, parse_public_keys, read_key_texts
from xla_cache.config_file import CONFIG_ENV, KEYS, ConfigFile, FileToken, read_config_file
from xla_cache.errors import ClientError
from xla_cache.logs import logger
from xla_cache.server_url import (
    DEFAULT_SERVER,
    LOCAL_ONLY,
    is_local_only,
    is_loopback,
    normalize_server,
    server_identity,
    server_url_problem,
    token_problem,
)

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
    "TokenChoice",
    "auto_compression",
    "choose_token",
    "default_cache_dir",
    "is_loopback",
    "namespace_dir",
    "normalize_server",
    "redacts_flag_values",
    "run_report_settings",
    "server_url_problem",
    "tokens_for",
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
        "XLA_CACHE_SERVER",
        DEFAULT_SERVER,
        "The server's URL (none: the local cache only); warm()'s argument and --server win over it, it wins "
        "over the config file's server.",
    ),
    EnvironmentVariable(
        "XLA_CACHE_TOKEN",
        "(none)",
        "Bearer token sent to the server named (with auth on); over the config file's, whose tokens go "
        "only to their own servers.",
    ),
    EnvironmentVariable(
        "XLA_CACHE_DIR",
        "$XDG_CACHE_HOME/xla-cache, else ~/.cache/xla-cache",
        "Base cache directory: each namespace's entries live in <dir>/<namespace>; over the config file's.",
    ),
    EnvironmentVariable(
        CONFIG_ENV,
        "$XDG_CONFIG_HOME/xla-cache/config.toml, else ~/.config/xla-cache/config.toml",
        'The config file (TOML: server, token, cache_dir, signing_key, trusted_keys, and [servers."URL"] '
        "tables of a token per server); empty: none.",
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
        "XLA_CACHE_AUTO",
        "0",
        "1: every Python job that imports torch_xla or jax warms and uploads as warm() does, through the "
        "start-up hook the package installs (xla_cache_hook.py); xla-cache run sets it for one command.",
    ),
    EnvironmentVariable(
        REPORT_INTERVAL_ENV,
        str(REPORT_INTERVAL_SECONDS),
        "Seconds between a running job's run reports.",
    ),
)


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
    ``default``). ``token_server`` is the server a token from the config file belongs to (None for a token
    given otherwise), ``file_tokens`` every token of the config file with its server."""

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
    token_server: str | None = field(default=None, compare=False)
    file_tokens: tuple[FileToken, ...] = field(default=(), compare=False)

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
        default; the token last, as :func:`choose_token` says (a config file's token goes to its own server
        only). ``flags`` names the argument each given value came from (``--server``; default
        ``argument``), for :attr:`sources`. A server of ``none`` or ``off`` means the local cache only."""
        env = os.environ if env is None else env
        given = {"server": server, "cache_dir": None if cache_dir is None else str(cache_dir)}
        config_file = read_config_file(env)
        values: dict[str, str | None] = {}
        sources: dict[str, str] = {}
        for key, variable in KEYS.items():
            if key == "token":
                continue
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
        elif is_local_only(chosen_server):
            chosen_server = None
        given_token = TokenChoice(token, (flags or {}).get("token", "argument"))
        chosen_token = choose_token(given_token, env, config_file, chosen_server, sources["server"])
        sources["token"] = chosen_token.source
        if values["cache_dir"]:
            chosen_dir = Path(values["cache_dir"]).expanduser()
        else:
            chosen_dir = Path(env.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")) / "xla-cache"
        return cls(
            server=chosen_server,
            token=chosen_token.token,
            cache_dir=chosen_dir,
            signing_key=values["signing_key"],
            trusted_keys=values["trusted_keys"],
            compression=wants_compression(chosen_server or DEFAULT_SERVER, env),
            run_reports=run_report_settings(env),
            sources={key: sources[key] for key in KEYS},
            config_file=config_file.path,
            token_server=chosen_token.server,
            file_tokens=config_file.tokens,
        )


@dataclass(frozen=True)
class TokenChoice:
    """The token a call sends (None: none), where it came from, and the server a config file's token
    belongs to (None when it was given otherwise)."""

    token: str | None
    source: str
    server: str | None = None


# (config file, server) pairs already warned about: one warning per process, however often it resolves.
_WITHHELD_WARNED: set[tuple[str, str]] = set()


def choose_token(
    given: TokenChoice,
    env: Mapping[str, str],
    config_file: ConfigFile,
    server: str | None,
    server_source: str,
) -> TokenChoice:
    """The token of one call (``given``: the argument's, if any, and the flag it came from), by the first
    of these rules that applies:

    1. the argument (``--token``, ``warm(token=)``): the user chose it, it goes where it is told;
    2. ``XLA_CACHE_TOKEN``: likewise;
    3. no server (the local cache only): none is sent anywhere;
    4. the config file's token for this server (:meth:`ConfigFile.token_for`);
    5. none: a config file's token for another server is never sent here (to a test or hostile server
       that ``--server`` or ``XLA_CACHE_SERVER`` names), with one warning naming both servers.

    A token that cannot travel in an HTTP header is a :class:`ClientError` naming where it came from."""
    if given.token:
        choice = given
    elif env.get(KEYS["token"]):
        choice = TokenChoice(env[KEYS["token"]], KEYS["token"])
    elif server is None:
        return TokenChoice(None, "default")
    else:
        choice = _file_token(config_file, server) or _withheld(config_file, server, server_source)
    problem = token_problem(choice.token or "")
    if problem:
        raise ClientError(f"the token ({choice.source}) {problem}")
    return choice


def tokens_for(tokens: tuple[FileToken, ...]) -> str:
    """``a token for URL`` or ``tokens for URL, URL``: whose tokens a config file holds, for messages."""
    servers = ", ".join(t.server for t in tokens)
    return f"a token for {servers}" if len(tokens) == 1 else f"tokens for {servers}"


def _file_token(config_file: ConfigFile, server: str) -> TokenChoice | None:
    found = config_file.token_for(server)
    if found is None:
        return None
    return TokenChoice(found.token, f"config file {config_file.path}", found.server)


def _withheld(config_file: ConfigFile, server: str, server_source: str) -> TokenChoice:
    """No token; when the config file holds tokens for other servers, one warning per process and server
    naming them and this one."""
    seen = (str(config_file.path), server_identity(server))
    if not config_file.tokens or seen in _WITHHELD_WARNED:
        return TokenChoice(None, "default")
    _WITHHELD_WARNED.add(seen)
    logger.warning(
        "xla-cache: not sending the config file's token to %s (from %s): %s holds %s only; to send one, add "
        '[servers."%s"] with its token to the file, or give it (--token, %s)',
        normalize_server(server),
        server_source,
        config_file.path,
        tokens_for(config_file.tokens),
        normalize_server(server),
        KEYS["token"],
    )
    return TokenChoice(None, "default")
