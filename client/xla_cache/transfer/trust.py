"""Which entries a job may place: those a trusted key signed (``XLA_CACHE_TRUSTED_KEYS``).

With trusted keys configured, a warm and the follower place an entry only if one of those keys signed
exactly its namespace, key and SHA-256 (:mod:`cache_protocol.signing`); its bytes are then checked against
that SHA-256 as always, so what lands in the cache directory is what the key holder uploaded, whatever the
server, its index or its bucket say. Anything else is skipped and counted, and the warm names the count and
the reasons in one warning. Without trusted keys nothing is checked (the server's word is taken, as before).

The signatures come with the manifest, so they are checked in a thread (Ed25519 in ``cryptography``
releases the GIL) while the bundles download: by the time an entry's bytes arrive its verdict is usually
ready, and one not ready yet is checked on the spot. A verdict is computed once per (key, SHA-256,
signature) and holds for exactly those three: the bytes an entry places are checked against the same
SHA-256 the verdict was on, so a server that names a key again with other bytes or no signature (in the same
manifest, or in a later feed answer after failing the first fetch) gets a verdict of its own for them.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Sequence

from cache_protocol.signing import Verifier
from xla_cache.http.api import RemoteEntry

__all__ = ["EntryTrust"]


class EntryTrust:
    """The verdicts on one namespace's entries under ``verifier``'s trusted keys."""

    def __init__(self, verifier: Verifier, namespace: str) -> None:
        self._verifier = verifier
        self._namespace = namespace
        # (key, sha256, signature) -> None (trusted) or why not: never the key alone, see the module's doc
        self._verdicts: dict[tuple[str, str, str | None], str | None] = {}
        self._lock = threading.Lock()
        self._refused: Counter[str] = Counter()
        self._thread: threading.Thread | None = None

    def _judge(self, entry: RemoteEntry) -> str | None:
        judged = (entry.key, entry.sha256, entry.signature)
        verdict = self._verdicts.get(judged, _UNKNOWN)
        if verdict is _UNKNOWN:
            verdict = self._verifier.why_not(self._namespace, entry.key, entry.sha256, entry.signature)
            self._verdicts[judged] = verdict  # a dict store is atomic; two threads agree on the verdict
        return verdict  # type: ignore[return-value]

    def check_ahead(self, entries: Sequence[RemoteEntry]) -> None:
        """Start checking ``entries`` in a background thread, in order (the order they will arrive in)."""

        def run() -> None:
            for entry in entries:
                self._judge(entry)

        self._thread = threading.Thread(target=run, name="xla-cache-verify", daemon=True)
        self._thread.start()

    def allows(self, entry: RemoteEntry) -> bool:
        """Whether a trusted key signed this entry's namespace, key and SHA-256; a refusal is counted."""
        why = self._judge(entry)
        if why is None:
            return True
        with self._lock:
            self._refused[why] += 1
        return False

    @property
    def refused(self) -> int:
        """How many entries were skipped."""
        with self._lock:
            return sum(self._refused.values())

    def reasons(self) -> str:
        """Why entries were skipped: ``"3 unsigned, 1 bad signature"``."""
        with self._lock:
            return ", ".join(f"{count} {why}" for why, count in self._refused.most_common())


_UNKNOWN = object()
