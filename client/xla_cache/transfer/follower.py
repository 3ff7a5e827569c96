"""The follower: while a job runs, fetches each entry another job stores in its namespace.

``warm(..., follow=True)`` (or ``xla-cache warm --follow`` beside a job) starts one. It long-polls the
server's change feed (``GET .../feed``) from the cursor taken before the warm's manifest, so nothing stored
in between is missed, and places each new entry in the cache directory the way a warm does: verified
(size, SHA-256 and the framework's check) in a temporary file, then linked into place only if the job has
not written that key itself meanwhile (never over a file of the job's). torch_xla and JAX look for an
entry's file when they compile a graph, so the next compilation of that graph loads it instead.

It fails open like warm: a server that goes away costs one warning, then it retries with backoff, quietly,
until the server is back; it never raises into the job, and :meth:`Follower.stop` returns within a bound.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path

from cache_protocol.signing import Verifier
from xla_cache.errors import ClientError, ServerProblem
from xla_cache.http.api import CacheApi, RemoteEntry
from xla_cache.http.deadline import Deadline
from xla_cache.localcache.cachedir import EntryCheck, VerifiedWriter
from xla_cache.logs import logger
from xla_cache.transfer.trust import EntryTrust

__all__ = ["FOLLOW_WAIT_SECONDS", "FollowReport", "Follower"]


FOLLOW_WAIT_SECONDS = 5.0  # one long poll: the bound on how long stop() may wait for it, too
MAX_BACKOFF_SECONDS = 30.0


@dataclass
class FollowReport:
    """What the follower fetched so far: entries placed and their bytes, entries the directory already had
    (the job compiled them itself), and the last errors."""

    delivered: int = 0
    bytes: int = 0
    already_here: int = 0
    errors: list[str] = field(default_factory=list)
    unverified: int = 0  # skipped: no trusted key signed them (XLA_CACHE_TRUSTED_KEYS)


class Follower:
    """A background thread that keeps ``directory`` up to date with ``namespace`` as other jobs fill it."""

    def __init__(
        self,
        api: CacheApi,
        namespace: str,
        directory: Path,
        cursor: int,
        *,
        check: EntryCheck | None = None,
        wait: float = FOLLOW_WAIT_SECONDS,
        trusted: Verifier | None = None,
    ) -> None:
        self.api = api
        self.namespace = namespace
        self.directory = directory
        self.cursor = cursor
        self.wait = wait
        self._check = check
        self._handled: set[str] = set()  # keys already placed or found here: the feed repeats a few
        self._placed: set[str] = set()  # keys this follower placed (or is placing): not the job's compiles
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._report = FollowReport()
        self._warned = False
        self._trust = EntryTrust(trusted, namespace) if trusted else None
        self._warned_unverified = False

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="xla-cache-follower", daemon=True)
        self._thread.start()

    def stop(self, timeout: float | None = None) -> FollowReport:
        """Stop following; waits at most ``timeout`` (default: one long poll and a bit) for the thread."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self.wait + 2.0 if timeout is None else timeout)
        return self.report()

    def report(self) -> FollowReport:
        with self._lock:
            return FollowReport(
                self._report.delivered,
                self._report.bytes,
                self._report.already_here,
                list(self._report.errors),
                self._trust.refused if self._trust is not None else 0,
            )

    def placed_keys(self) -> frozenset[str]:
        """The keys this follower placed in the directory (and the one it is placing now)."""
        with self._lock:
            return frozenset(self._placed)

    def _run(self) -> None:
        backoff = 0.5
        while not self._stop.is_set():
            try:
                answer = self.api.feed(self.namespace, self.cursor, self.wait, Deadline(self.wait + 10.0))
            except ServerProblem as exc:
                self._trouble(exc.reason)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF_SECONDS)
                continue
            if self._warned:
                logger.info("xla-cache: following namespace %s again", self.namespace)
                self._warned = False
            backoff = 0.5
            for entry in answer.entries:
                if self._stop.is_set():
                    return
                if entry.key not in self._handled:
                    self._fetch(entry)
            self.cursor = max(self.cursor, answer.cursor)

    def _fetch(self, entry: RemoteEntry) -> None:
        key, size, sha256 = entry.key, entry.size, entry.sha256
        if self._trust is not None and not self._trust.allows(entry):
            self._handled.add(key)
            if not self._warned_unverified:  # once: the report counts them all
                self._warned_unverified = True
                logger.warning(
                    "xla-cache: following namespace %s, skipped %s: no trusted key signed it (%s; "
                    "XLA_CACHE_TRUSTED_KEYS); later ones are counted in the report",
                    self.namespace,
                    key,
                    self._trust.reasons(),
                )
            return
        if (self.directory / key).exists():
            self._handled.add(key)
            with self._lock:
                self._report.already_here += 1
            return
        with self._lock:
            self._placed.add(key)  # before the file appears: a run report must not take it for a compile
        placed = False
        try:
            with (
                self.api.entry(self.namespace, key, Deadline(60.0), live=True) as (_, chunks),
                VerifiedWriter(
                    self.directory, key, size=size, sha256=sha256, check=self._check, replace=False
                ) as writer,
            ):
                for chunk in chunks:
                    writer.write(chunk)
                placed = writer.commit()
        except ServerProblem as exc:
            if getattr(exc, "status", None) == 404:  # evicted since: nothing to fetch
                return
            self._trouble(exc.reason)
            return
        except (ClientError, OSError) as exc:  # a corrupt transfer, a full disk: this entry only
            with self._lock:
                self._report.errors.append(f"{key}: {exc}")
            return
        finally:
            if not placed:
                with self._lock:
                    self._placed.discard(key)
        self._handled.add(key)
        with self._lock:
            if placed:
                self._report.delivered += 1
                self._report.bytes += size
            else:
                self._report.already_here += 1  # the job wrote it meanwhile: its own file stays

    def _trouble(self, reason: str) -> None:
        with self._lock:
            self._report.errors.append(reason)
            del self._report.errors[:-20]
        if not self._warned:
            self._warned = True
            logger.warning(
                "xla-cache: cannot follow namespace %s (%s); the job goes on, and following resumes "
                "when the server is back",
                self.namespace,
                reason,
            )
