"""Slots shared by every process of one server: at most ``count`` of a kind of heavy work at once.

``xla-cache-server serve --workers N`` runs N processes, so a per-process semaphore lets N times the work
through; a limit that must hold for the server (a read token's reports, each up to a second or two of CPU)
is kept in the kernel instead: slot ``i`` of kind ``name`` is the file ``<directory>/<name>.<i>.lock``, and
holding it is holding an exclusive ``flock`` on it. Every process (and every thread: each try opens the file
anew, so each holder has a lock of its own) tries the slots in turn without blocking, and polls until a
timeout; a process that dies, even by SIGKILL, frees its slots with its files. The lock files stay (empty);
the directory is made on the first try.

    slots = ServerSlots("graph-reports", 2, settings.slots_directory)
    try:
        with slots.hold(timeout=2.0):
            ...  # the heavy work
    except SlotsBusy:
        raise GraphsBusy("...") from None  # 503 with Retry-After

Every process of one server must see the same ``directory`` (a local file system: ``flock`` on network file
systems is not to be trusted); two servers given the same directory share their slots. A child forked while a
slot is held would hold it too: the server starts its children with ``spawn`` (and the descriptors are
close-on-exec).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path

__all__ = ["POLL_SECONDS", "ServerSlots", "SlotsBusy"]

POLL_SECONDS = 0.02  # between rounds of tries while every slot is held
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")


class SlotsBusy(TimeoutError):
    """Every slot stayed held for the whole timeout."""


class ServerSlots:
    """``count`` slots of kind ``name`` (letters, digits, ``_-``), shared by every process whose
    ``directory`` is this one. Thread-safe and process-safe; holds no file open between holds."""

    def __init__(self, name: str, count: int, directory: Path) -> None:
        if not _NAME.fullmatch(name) or count < 1:
            raise ValueError(f"slots need a plain name and a count of at least 1, not {name!r}, {count}")
        self.name = name
        self.count = count
        self.directory = directory

    def _path(self, slot: int) -> Path:
        return self.directory / f"{self.name}.{slot}.lock"

    def _try(self) -> int | None:
        """An open descriptor holding a free slot's lock, or None when every slot is held."""
        self.directory.mkdir(parents=True, exist_ok=True)
        for slot in range(self.count):
            fd = os.open(self._path(slot), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            except BaseException:
                os.close(fd)
                raise
            return fd
        return None

    @contextlib.contextmanager
    def hold(self, timeout: float) -> Iterator[None]:
        """Hold one slot for the block, waiting up to ``timeout`` seconds for one (0: one round of tries);
        :class:`SlotsBusy` if none came free. The slot is let go when the block ends, however it ends."""
        deadline = time.monotonic() + timeout
        fd = self._try()
        while fd is None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise SlotsBusy(f"all {self.count} {self.name} slots stayed held for {timeout:g} s")
            time.sleep(min(POLL_SECONDS, left))
            fd = self._try()
        try:
            yield
        finally:
            os.close(fd)  # closing the last descriptor of the open file lets the lock go
