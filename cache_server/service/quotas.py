"""Quotas: how much a namespace, or the entries one token stored, may hold; how many namespaces a token may
create. Checked before an upload stores anything; refused with :class:`~cache_server.errors.QuotaExceeded`.

A namespace and a token can each have an entry and a byte quota (``xla-cache-server quota set``,
``PUT /admin/quotas/...``). An upload reads the quotas that apply to it once, with its subjects' usage
(:meth:`Quotas.allowance`), and each entry it would store is admitted against that usage plus what the same
upload admitted so far (:meth:`UploadAllowance.admit`): one rule, called by the one entry writer
(:mod:`cache_server.service.writer`) for a single ``PUT`` and each member of a bulk upload alike. An
entry already stored with the same digest is always admitted (it adds nothing). Uploads running at the same
time read the usage before one another's rows are written, so together they may go past a quota by at most
what they have in flight; the next upload sees it and is refused. Eviction, deletes and purges lower the usage
at once (the totals follow every row removed).

A bulk upload reads them again at each group's commit (:meth:`UploadAllowance.reread`), quotas set or changed
since it began included, and admits the group's members again in stream order against them: those past a
quota are refused with :class:`~cache_server.errors.QuotaExceeded`, nothing of them kept; the members before
them, and the groups committed earlier, keep their place (a quota lowered below what a namespace holds removes
nothing; it refuses what comes next).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from cache_server.domain import Clock, utcnow
from cache_server.errors import BadRequest, QuotaExceeded
from cache_server.index.quotas import NAMESPACE, TOKEN, QuotaRepository, QuotaRow
from cache_server.names import check_namespace

__all__ = ["NAMESPACE", "TOKEN", "QuotaRow", "Quotas", "UploadAllowance"]

_HOW = "an admin raises it with `xla-cache-server quota set` or PUT /admin/quotas/{kind}/{subject}"


def _subject(row: QuotaRow) -> str:
    return f"namespace {row.subject!r}" if row.kind == NAMESPACE else f"token {row.subject!r}"


@dataclass
class UploadAllowance:
    """What one upload may still store: the quotas that apply to it, with their subjects' usage when it was
    read, and what this upload admitted since (``entries``, ``bytes``)."""

    namespace: str
    quotas: tuple[QuotaRow, ...] = ()
    entries: int = 0
    bytes: int = 0
    _refresh: Callable[[], tuple[QuotaRow, ...]] | None = field(default=None, repr=False)

    @property
    def limited(self) -> bool:
        """Whether any quota applies (without one, admitting is free)."""
        return bool(self.quotas)

    def refusal(self, entries: int, nbytes: int) -> QuotaExceeded | None:
        """The error for adding ``entries`` entries of ``nbytes`` bytes, or None when they fit."""
        for row in self.quotas:
            if row.max_entries is not None and row.entries + self.entries + entries > row.max_entries:
                return QuotaExceeded(
                    f"The {_subject(row)} holds {row.entries + self.entries} entries; its quota is "
                    f"{row.max_entries} entries ({_HOW}); nothing of this entry was stored."
                )
            if row.max_bytes is not None and row.bytes + self.bytes + nbytes > row.max_bytes:
                return QuotaExceeded(
                    f"The {_subject(row)} holds {row.bytes + self.bytes} bytes; {nbytes} more would pass its "
                    f"quota of {row.max_bytes} bytes ({_HOW}); nothing of this entry was stored."
                )
        return None

    def full(self) -> QuotaExceeded | None:
        """The error when a quota has no room left at all (not one more entry, or not one more byte)."""
        for row in self.quotas:
            if (row.max_entries is not None and row.entries + self.entries >= row.max_entries) or (
                row.max_bytes is not None and row.bytes + self.bytes >= row.max_bytes
            ):
                entries = row.max_entries if row.max_entries is not None else "any number"
                size = row.max_bytes if row.max_bytes is not None else "any number"
                return QuotaExceeded(
                    f"The {_subject(row)} is at its quota ({row.entries} entries of {entries}, {row.bytes} "
                    f"bytes of {size}; {_HOW}); nothing of this upload was stored."
                )
        return None

    def admit(self, nbytes: int, *, stored: Callable[[], bool]) -> None:
        """Count one entry of ``nbytes`` bytes as taken by this upload, or raise :class:`QuotaExceeded`
        (before anything of it is stored) unless ``stored()`` says the same bytes are already stored."""
        if not self.quotas:
            return
        refused = self.refusal(1, nbytes)
        if refused is not None:
            if stored():
                return
            raise refused
        self.entries += 1
        self.bytes += nbytes

    def grow(self, nbytes: int) -> None:
        """An admitted entry turned out ``nbytes`` larger than counted (a ``PUT`` without Content-Length,
        measured once stored): raise :class:`QuotaExceeded` if that passes a quota (the caller removes it)."""
        if not self.quotas:
            return
        refused = self.refusal(0, nbytes)
        if refused is not None:
            raise refused
        self.bytes += nbytes

    def reread(self) -> None:
        """Read the quotas that apply and their subjects' usage again, and count from there: a bulk upload
        does at each group's commit (:mod:`cache_server.service.bulk`), so that a quota set, lowered or
        removed while it streams applies from its next commit on, even where none applied when it began."""
        if self._refresh is not None:
            self.quotas = self._refresh()
            self.entries = self.bytes = 0


class Quotas:
    """The quotas of namespaces and tokens, and the cap on namespaces per token
    (``XLA_CACHE_MAX_NAMESPACES_PER_TOKEN``), over the index's :class:`QuotaRepository`."""

    def __init__(self, repository: QuotaRepository, max_namespaces_per_token: int, *, clock: Clock = utcnow):
        self._repository = repository
        self._max_namespaces = max_namespaces_per_token
        self._clock = clock

    def allowance(self, namespace: str, token: str | None) -> UploadAllowance:
        """What an upload into ``namespace`` by ``token`` (None: auth off) may store. Raises
        :class:`QuotaExceeded` when the namespace does not exist yet and the token may create no more."""
        usage = self._repository.upload_usage(namespace, token, count_created=self._max_namespaces > 0)
        if not usage.namespace_exists:
            self._check_created(token, usage.namespaces_created)

        def refresh() -> tuple[QuotaRow, ...]:
            return self._repository.upload_usage(namespace, token, count_created=False).quotas

        return UploadAllowance(namespace, usage.quotas, _refresh=refresh)

    def check_new_namespace(self, namespace: str, token: str | None) -> None:
        """Raise :class:`QuotaExceeded` if ``token`` may create no more namespaces (registering a new one)."""
        if token and self._max_namespaces > 0:
            self._check_created(token, self._repository.namespaces_created_by(token))

    def _check_created(self, token: str | None, created: int) -> None:
        if token and 0 < self._max_namespaces <= created:
            raise QuotaExceeded(
                f"The token {token!r} has created {created} namespaces, as many as one token may "
                f"(XLA_CACHE_MAX_NAMESPACES_PER_TOKEN={self._max_namespaces}); use an existing namespace."
            )

    # -- admin ------------------------------------------------------------------------------------------
    def set_quota(
        self, kind: str, subject: str, *, max_entries: int | None, max_bytes: int | None
    ) -> QuotaRow:
        """Set the quota of a namespace (by name) or a token (by id); both limits None removes it."""
        if kind == NAMESPACE:
            check_namespace(subject)
        elif kind != TOKEN:
            raise BadRequest(f"A quota is set on a {NAMESPACE} or a {TOKEN}, not on {kind!r}.")
        for name, value in (("max_entries", max_entries), ("max_bytes", max_bytes)):
            if value is not None and value < 0:
                raise BadRequest(f"{name} must not be negative.")
        return self._repository.set_quota(
            kind, subject, max_entries=max_entries, max_bytes=max_bytes, now=self._clock()
        )

    def quotas(self) -> list[QuotaRow]:
        """Every quota set, with its subject's usage now."""
        return self._repository.quotas()
