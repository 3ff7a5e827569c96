"""Why a namespace is empty or thin: the populated namespaces of the same framework whose fingerprints are
nearest to its own, each with the fields (and XLA flags) that differ.

A job whose runtime differs from the last one in a single field (a library's revision, one flag in
``XLA_FLAGS``, a device count) gets a new, empty namespace; this names the field. Ranked by how many
fingerprint fields differ, then by entries stored (more first), then by last use (recent first). The work is
bounded: at most ``XLA_CACHE_NEAREST_CANDIDATES`` namespaces (the most recently used) are compared.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from cache_protocol.fingerprint import Difference, differences
from cache_server.auth.tokens import Principal
from cache_server.errors import NamespaceNotFound
from cache_server.index.namespaces import NamespaceRepository
from cache_server.index.nearest import NearestRepository
from cache_server.names import check_namespace

__all__ = ["NearNamespace", "NearestAnswer", "NearestNamespaces"]


@dataclass(frozen=True)
class NearNamespace:
    """A populated namespace near another: what it stores, when it was used, and how it differs."""

    namespace: str
    entries: int
    last_used_at: dt.datetime
    differing_fields: int  # fingerprint fields that differ (several flags of one variable count once)
    differences: list[Difference] = field(default_factory=list)


@dataclass(frozen=True)
class NearestAnswer:
    """A namespace, its entries, and its nearest populated namespaces, nearest first."""

    namespace: str
    entries: int
    nearest: list[NearNamespace]


class NearestNamespaces:
    """Compares a namespace's fingerprint with those of the populated namespaces of its framework."""

    def __init__(self, namespaces: NamespaceRepository, index: NearestRepository, *, candidates: int) -> None:
        self._namespaces = namespaces
        self._index = index
        self._candidates = candidates

    def nearest(
        self,
        namespace: str,
        fingerprint: Mapping[str, Any] | None = None,
        *,
        principal: Principal | None = None,
        limit: int = 3,
    ) -> NearestAnswer:
        """The ``limit`` nearest populated namespaces to ``namespace``, compared by ``fingerprint`` (None:
        the one it was registered with; :class:`NamespaceNotFound` if it never was). A token limited to
        namespace patterns (``principal``) learns only of namespaces it may read."""
        info = self._namespaces.get_namespace(check_namespace(namespace))
        if fingerprint is None:
            if info is None:
                raise NamespaceNotFound(f"The namespace {namespace!r} has never been registered.")
            fingerprint = info.fingerprint
        entries = info.entries if info is not None else 0
        framework = fingerprint.get("framework")
        if not isinstance(framework, str):
            return NearestAnswer(namespace, entries, [])
        patterns = principal.namespaces if principal is not None else None
        found = []
        for candidate in self._index.candidates(
            framework, exclude=namespace, limit=self._candidates, patterns=patterns
        ):
            if principal is not None and not principal.may_use(candidate.namespace):
                continue
            count, diffs = differences(fingerprint, candidate.fingerprint)
            found.append(
                NearNamespace(candidate.namespace, candidate.entries, candidate.last_used_at, count, diffs)
            )
        found.sort(key=lambda n: (n.differing_fields, -n.entries, -n.last_used_at.timestamp(), n.namespace))
        return NearestAnswer(namespace, entries, found[:limit])
