"""Namespaces: registered by each job's client with its runtime's fingerprint and labels."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cache_server.domain import Clock, NamespaceInfo, utcnow
from cache_server.errors import NamespaceNotFound
from cache_server.index.namespaces import NamespaceRepository
from cache_server.names import check_namespace
from cache_server.service.quotas import Quotas

__all__ = ["Namespaces"]


class Namespaces:
    """The namespaces of the index's :class:`NamespaceRepository`; ``quotas`` caps how many one token
    creates (None: no cap), ``clock`` dates them."""

    def __init__(self, rows: NamespaceRepository, *, quotas: Quotas | None, clock: Clock = utcnow) -> None:
        self._rows = rows
        self._quotas = quotas
        self._clock = clock

    def register(
        self,
        namespace: str,
        fingerprint: Mapping[str, Any],
        labels: Mapping[str, str],
        *,
        created_by: str | None = None,
    ) -> tuple[NamespaceInfo, bool]:
        """Create the namespace or replace its fingerprint and labels; returns it and whether it is new.

        Registering it again as it is writes nothing (a fleet of jobs starting at once registers one
        namespace many times over; its last use moves with its hits anyway). ``created_by``: the id of the
        token registering it, counted against ``XLA_CACHE_MAX_NAMESPACES_PER_TOKEN`` when it is new.
        """
        existing = self._rows.get_namespace(check_namespace(namespace))
        if (
            existing is not None
            and existing.fingerprint == dict(fingerprint)
            and existing.labels == dict(labels)
        ):
            return existing, False
        if existing is None and self._quotas is not None:
            self._quotas.check_new_namespace(namespace, created_by)
        return self._rows.upsert_namespace(
            namespace, fingerprint, labels, now=self._clock(), created_by=created_by
        )

    def get(self, namespace: str) -> NamespaceInfo:
        """The namespace; :class:`NamespaceNotFound` if it was never registered."""
        info = self._rows.get_namespace(check_namespace(namespace))
        if info is None:
            raise NamespaceNotFound(f"The namespace {namespace!r} has never been registered.")
        return info
