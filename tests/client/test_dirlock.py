"""Two processes never warm the same directory at once."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

from xla_cache.localcache.dirlock import DirLock

HOLD = """
import sys, time
from pathlib import Path
from xla_cache.localcache.dirlock import DirLock
lock = DirLock(Path(sys.argv[1]))
assert lock.acquire(5)
print("held", flush=True)
time.sleep(60)
"""


def test_second_holder_waits_then_gets_it(tmp_path: Path) -> None:
    first, second = DirLock(tmp_path), DirLock(tmp_path)
    assert first.acquire(1)
    assert not second.acquire(0.2)
    assert second.holder_pid() is not None
    first.release()
    assert second.acquire(1)
    second.release()


def test_lock_is_released_when_the_holder_process_dies(tmp_path: Path) -> None:
    # As a context manager, Popen closes the pipe and reaps the process however the test ends.
    with subprocess.Popen(
        [sys.executable, "-c", HOLD, str(tmp_path)], stdout=subprocess.PIPE, text=True
    ) as holder:
        try:
            assert holder.stdout is not None
            assert holder.stdout.readline().strip() == "held"
            lock = DirLock(tmp_path)
            assert not lock.acquire(0.2)
            assert lock.holder_pid() == holder.pid
            holder.send_signal(signal.SIGKILL)
            holder.wait()
            started = time.monotonic()
            assert lock.acquire(5)
            assert time.monotonic() - started < 5
            lock.release()
        finally:
            if holder.poll() is None:
                holder.kill()
