"""An exclusive lock on a cache directory, so two processes never warm the same directory at once.

``fcntl.flock`` on a lock file inside the directory: the kernel drops it when the holder exits or crashes,
so a killed job never leaves the directory locked. Two ``DirLock`` objects conflict even in one process
(each opens its own file description). The warm's lock is ``LOCK_NAME``; the uploaders of the processes
sharing one directory (ranks of one host) take ``UPLOAD_LOCK_NAME`` around each pass, so that the second
asks the server only after the first's uploads are stored, and no entry goes up twice from one host.
"""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path
from types import TracebackType

from xla_cache.localcache.cachedir import LOCK_NAME

__all__ = ["DirLock"]

_POLL_SECONDS = 0.05


class DirLock:
    """Exclusive, process-crash-safe lock on one cache directory."""

    def __init__(self, directory: Path, name: str = LOCK_NAME) -> None:
        self.path = directory / name
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        """Whether this object holds the lock."""
        return self._fd is not None

    def acquire(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for the lock; True if acquired."""
        if self._fd is not None:
            return True
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        deadline = time.monotonic() + max(0.0, timeout)
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    os.close(fd)
                    return False
                time.sleep(min(_POLL_SECONDS, remaining))
                continue
            except BaseException:
                os.close(fd)
                raise
            self._fd = fd
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
            return True

    def holder_pid(self) -> int | None:
        """The pid the current holder wrote into the lock file, if readable (for messages)."""
        try:
            text = self.path.read_text().strip()
        except OSError:
            return None
        return int(text) if text.isdigit() else None

    def release(self) -> None:
        """Release the lock (no-op when not held)."""
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        try:
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    def __enter__(self) -> DirLock:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.release()
