"""A cache server as the client names it: its URL (the default, the values that mean none, the one
normaliser, and what makes two URLs the same server: a config file's token goes to its own server only,
:mod:`xla_cache.config_file`) and what a bearer token sent to it may hold.

Standard library only, so that the config file's reader and the settings' resolver can both use it.
"""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit, urlunsplit

__all__ = [
    "DEFAULT_SERVER",
    "LOCAL_ONLY",
    "is_local_only",
    "is_loopback",
    "normalize_server",
    "server_identity",
    "server_url_problem",
    "token_problem",
]

DEFAULT_SERVER = "http://127.0.0.1:8080"  # where ./scripts/serve and xla-cache-server serve listen
LOCAL_ONLY = ("none", "off")  # a server setting that means: no server, the local cache only
_DEFAULT_PORTS = {"http": 80, "https": 443}


def is_local_only(server: str) -> bool:
    """Whether a server setting means no server (``none`` or ``off``): the local cache only."""
    return server.strip().lower() in LOCAL_ONLY


def normalize_server(server: str) -> str:
    """``host:port`` or a URL -> a base URL without a trailing slash."""
    server = server.strip()
    if "://" not in server:
        server = "http://" + server
    return server.rstrip("/")


def server_identity(server: str) -> str:
    """What two spellings of one server share: the normalised URL with its scheme and host in lower case
    and a default port (80, 443) left out. The path is kept as written (a proxy's prefix may tell two
    servers on one host apart); a URL whose port is no number is compared as normalised."""
    url = normalize_server(server)
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    try:
        port = parts.port
    except ValueError:
        return url
    host = parts.hostname or ""
    if ":" in host:  # IPv6: urlsplit drops the brackets
        host = f"[{host}]"
    netloc = host if port is None or port == _DEFAULT_PORTS.get(scheme) else f"{host}:{port}"
    userinfo, at, _ = parts.netloc.rpartition("@")
    netloc = f"{userinfo}{at}{netloc}"
    return urlunsplit((scheme, netloc, parts.path.rstrip("/"), parts.query, parts.fragment))


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


def token_problem(token: str) -> str | None:
    """Why ``token`` cannot be sent as a bearer token, or None: an HTTP header carries printable ASCII
    only, and a space or a line break would end it. The answer never quotes the token (a secret)."""
    for position, char in enumerate(token, start=1):
        if "!" <= char <= "~":
            continue
        if char == " ":
            kind = "a space"
        elif char.isascii():
            kind = "a control character"
        else:
            kind = "a character that is not ASCII"
        return f"holds {kind} (character {position}): a token is printable ASCII, without spaces"
    return None
