"""The admin API (``/admin/...``) as Python calls: stats, the graphs report, eviction, tokens, quotas,
signers, purges and runs. The same plumbing and failures as :class:`~xla_cache.http.api.CacheApi`, whose data
calls a job makes; these are the operators' and the command line's."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from xla_cache.http.api import CacheApi, seg
from xla_cache.http.deadline import Deadline

__all__ = ["AdminApi"]


class AdminApi(CacheApi):
    """Calls to one cache server's admin API (an admin token, or one whose scope covers what is asked)."""

    def admin_stats(
        self,
        deadline: Deadline,
        *,
        limit: int | None = None,
        after: str | None = None,
        namespace: str | None = None,
        top: int | None = None,
    ) -> dict[str, Any]:
        """``GET /admin/stats`` (needs an admin token when auth is on): one page of namespaces, ``limit``
        of them (the server's default page when None) after the cursor ``after`` (a page's
        ``next_after``); with ``namespace``, that namespace's numbers only."""
        what = "the admin stats request"
        given = (("limit", limit), ("after", after), ("namespace", namespace), ("top", top))
        params = {name: value for name, value in given if value is not None}
        return dict(self._json(self._call("GET", "/admin/stats", what, deadline, params=params), what))

    def admin_graphs(
        self, namespace: str, deadline: Deadline, *, top: int = 10, module: str | None = None
    ) -> dict[str, Any]:
        """``GET /admin/graphs``: the namespace's bucketing report (a read token or stronger that reaches the
        namespace, as for the dashboard's graph view); with ``module``, that graph's only."""
        what = "the graphs report"
        params: dict[str, Any] = {"namespace": namespace, "top": top}
        if module is not None:
            params["module"] = module
        return dict(self._json(self._call("GET", "/admin/graphs", what, deadline, params=params), what))

    def admin_evict(self, body: dict[str, Any], deadline: Deadline) -> dict[str, Any]:
        """``POST /admin/evict`` (needs an admin token when auth is on)."""
        what = "the eviction request"
        return dict(self._json(self._call("POST", "/admin/evict", what, deadline, json=body), what))

    def admin_tokens(self, deadline: Deadline) -> dict[str, Any]:
        """``GET /admin/tokens``: every token and what it stored (admin token)."""
        what = "the token listing"
        return dict(self._json(self._call("GET", "/admin/tokens", what, deadline), what))

    def admin_quotas(self, deadline: Deadline) -> dict[str, Any]:
        """``GET /admin/quotas``: every quota with what its namespace or token stores now (admin token)."""
        what = "the quota listing"
        return dict(self._json(self._call("GET", "/admin/quotas", what, deadline), what))

    def admin_set_quota(
        self, kind: str, subject: str, body: dict[str, Any], deadline: Deadline
    ) -> dict[str, Any]:
        """``PUT /admin/quotas/{kind}/{subject}``: set (both limits null: remove) the quota of a namespace or
        of the tokens with a name or id (admin token)."""
        what = f"the quota of {kind} {subject!r}"
        path = f"/admin/quotas/{seg(kind)}/{seg(subject)}"
        return dict(self._json(self._call("PUT", path, what, deadline, json=body), what))

    def admin_signers(self, deadline: Deadline) -> dict[str, Any]:
        """``GET /admin/signers``: entries and bytes per signer key id (admin token)."""
        what = "the signers request"
        return dict(self._json(self._call("GET", "/admin/signers", what, deadline), what))

    def admin_purge_signer(self, signer: str, body: dict[str, Any], deadline: Deadline) -> dict[str, Any]:
        """``POST /admin/signers/{key id or unsigned}/purge``: remove what a key signed (admin token)."""
        what = f"the purge of signer {signer!r}"
        path = f"/admin/signers/{seg(signer)}/purge"
        return dict(self._json(self._call("POST", path, what, deadline, json=body), what))

    def admin_purge_token(self, token: str, body: dict[str, Any], deadline: Deadline) -> dict[str, Any]:
        """``POST /admin/tokens/{token}/purge``: revoke a token and remove what it stored (admin token)."""
        what = f"the purge of token {token!r}"
        path = f"/admin/tokens/{seg(token)}/purge"
        return dict(self._json(self._call("POST", path, what, deadline, json=body), what))

    def admin_token_metrics(self, token: str, counted: bool, deadline: Deadline) -> dict[str, Any]:
        """``PUT /admin/tokens/{token}/metrics``: count a token's run reports in the run metrics, or not
        (admin token)."""
        what = f"the metrics setting of token {token!r}"
        path = f"/admin/tokens/{seg(token)}/metrics"
        return dict(self._json(self._call("PUT", path, what, deadline, json={"counted": counted}), what))

    def admin_delete_namespace(self, namespace: str, max_entries: int, deadline: Deadline) -> dict[str, Any]:
        """``DELETE /admin/namespaces/{ns}``: remove at most ``max_entries`` of the namespace's entries, and
        the namespace once none remain (admin token); the answer says how many are ``remaining``."""
        what = f"the delete of namespace {namespace!r}"
        path = f"/admin/namespaces/{seg(namespace)}"
        params = {"max_entries": max_entries}
        return dict(self._json(self._call("DELETE", path, what, deadline, params=params), what))

    def admin_runs(self, params: Mapping[str, Any], deadline: Deadline) -> dict[str, Any]:
        """``GET /admin/runs``: the runs reported, newest first, filtered by ``params`` (namespace,
        framework, host, since, until, limit)."""
        what = "the run listing"
        query = {name: value for name, value in params.items() if value is not None}
        return dict(self._json(self._call("GET", "/admin/runs", what, deadline, params=query), what))

    def admin_run(
        self, run_id: str, deadline: Deadline, *, offset: int = 0, limit: int = 100
    ) -> dict[str, Any]:
        """``GET /admin/runs/{id}``: one run (``run_id`` may be a unique prefix) with a page of its misses
        and why each compiled, and the count of each reason."""
        what = f"run {run_id}"
        params = {"offset": offset, "limit": limit}
        path = f"/admin/runs/{seg(run_id)}"
        return dict(self._json(self._call("GET", path, what, deadline, params=params), what))
