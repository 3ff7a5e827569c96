"""Who may do what: bearer tokens, their roles (read < write < admin) and namespace patterns
(:mod:`.tokens`), and revoking a token inside the uploads it has in flight (:mod:`.revocation`). The HTTP side
of it is :mod:`cache_server.api.auth`; each route declares its role beside itself
(:mod:`cache_server.api.access`)."""
