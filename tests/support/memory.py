"""How much more resident memory this process needed at its peak while a block ran.

    with PeakRss() as meter:
        stream_something()
    assert meter.growth < 64 * MIB

Linux only. Preferred method: reset the kernel's high-water mark (``/proc/self/clear_refs``), then read
``VmHWM``: that catches even a spike that lasts a microsecond. Where the reset is not allowed, a thread
samples ``VmRSS`` every millisecond instead. Before the baseline is taken, free heap memory is handed back to
the kernel (``malloc_trim``) so a buffering backend cannot hide in pages the process already holds.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import re
import threading
from types import TracebackType

__all__ = ["MIB", "PeakRss", "hwm_reset_works"]

MIB = 1024 * 1024
_STATUS = "/proc/self/status"


def _status_kib(field: str) -> int:
    with open(_STATUS) as handle:
        match = re.search(rf"^{field}:\s+(\d+) kB", handle.read(), re.MULTILINE)
    if match is None:
        raise RuntimeError(f"{_STATUS} has no {field} line.")
    return int(match.group(1))


def _rss() -> int:
    return _status_kib("VmRSS") * 1024


def _reset_hwm() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as handle:
            handle.write("5")
    except OSError:
        return False
    return True


def hwm_reset_works() -> bool:
    """Whether this kernel lets the process reset its peak-RSS mark."""
    return _reset_hwm()


def _trim_heap() -> None:
    gc.collect()
    libc_name = ctypes.util.find_library("c")
    if libc_name:
        libc = ctypes.CDLL(libc_name)
        if hasattr(libc, "malloc_trim"):
            libc.malloc_trim(0)


class PeakRss:
    """Measures peak RSS growth (bytes) over a ``with`` block; see the module docstring."""

    def __init__(self, method: str = "auto", interval: float = 0.001) -> None:
        if method not in ("auto", "hwm", "sampling"):
            raise ValueError(f"unknown method {method!r}")
        self.requested = method
        self.method = ""
        self.interval = interval
        self.baseline = 0
        self.peak = 0
        self._stop = threading.Event()
        self._sampler: threading.Thread | None = None

    @property
    def growth(self) -> int:
        return max(0, self.peak - self.baseline)

    def __enter__(self) -> PeakRss:
        _trim_heap()
        if self.requested in ("auto", "hwm") and _reset_hwm():
            self.method = "hwm"
        elif self.requested == "hwm":
            raise RuntimeError("This kernel does not let the process reset VmHWM.")
        else:
            self.method = "sampling"
            self._sampler = threading.Thread(target=self._sample, name="rss-sampler", daemon=True)
        self.baseline = _rss()
        self.peak = self.baseline
        if self._sampler is not None:
            self._sampler.start()
        return self

    def _sample(self) -> None:
        while not self._stop.wait(self.interval):
            self.peak = max(self.peak, _rss())

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._sampler is not None:
            self._stop.set()
            self._sampler.join()
            self.peak = max(self.peak, _rss())
        else:
            self.peak = max(self.peak, _status_kib("VmHWM") * 1024)
