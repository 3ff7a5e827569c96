"""The client's side of the server's HTTP API: a job's calls (``api.py``: :class:`CacheApi`), the admin
API's (``admin_api.py``), the plumbing under both (``server_http.py``: retries, errors, the one place a
server URL is normalised), httpx without its command line (``lean_httpx.py``) and the one bound on a
call's time (``deadline.py``). A server's URL and what a token may hold are the configuration's
(:mod:`xla_cache.server_url`, at the root, beside :mod:`xla_cache.config`).

Nothing is imported here: ``xla-cache``'s subcommands that never call the server do not pay for httpx.
"""
