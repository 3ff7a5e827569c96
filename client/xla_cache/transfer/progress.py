"""Progress reporting for transfers: silent by default, two tqdm bars (entries, bytes) in the CLI."""

from __future__ import annotations

import sys
import threading
from typing import Any, Protocol

__all__ = ["NullProgress", "Progress", "TqdmProgress"]


class Progress(Protocol):
    """Receives transfer progress; called from several threads."""

    def start(self, label: str, entries: int, nbytes: int) -> None:
        """A transfer of ``entries`` entries totalling ``nbytes`` begins."""

    def advance(self, entries: int = 0, nbytes: int = 0) -> None:
        """``entries`` more entries finished, ``nbytes`` more bytes moved."""

    def close(self) -> None:
        """The transfer ended."""


class NullProgress:
    """Reports nothing."""

    def start(self, label: str, entries: int, nbytes: int) -> None:
        pass

    def advance(self, entries: int = 0, nbytes: int = 0) -> None:
        pass

    def close(self) -> None:
        pass


class TqdmProgress:
    """An entries bar and a bytes bar on stderr (hidden when stderr is not a terminal, unless forced)."""

    def __init__(self, *, force: bool = False) -> None:
        self._disable: bool | None = False if force else None
        self._bars: list[Any] = []
        self._lock = threading.Lock()

    def start(self, label: str, entries: int, nbytes: int) -> None:
        from tqdm import tqdm

        self.close()
        self._bars = [
            tqdm(
                total=entries, desc=f"{label} entries", unit="entry", file=sys.stderr, disable=self._disable
            ),
            tqdm(
                total=nbytes,
                desc=f"{label} bytes",
                unit="B",
                unit_scale=True,
                unit_divisor=1024,
                file=sys.stderr,
                disable=self._disable,
            ),
        ]

    def advance(self, entries: int = 0, nbytes: int = 0) -> None:
        with self._lock:
            if self._bars:
                if entries:
                    self._bars[0].update(entries)
                if nbytes:
                    self._bars[1].update(nbytes)

    def close(self) -> None:
        with self._lock:
            for bar in self._bars:
                bar.close()
            self._bars = []
