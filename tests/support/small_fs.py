"""A real, small filesystem for tests of a full disk: a tmpfs of a few MiB mounted on a directory.

    with small_filesystem(tmp_path / "store", 4 * MIB) as root:
        ...  # writes past 4 MiB fail with ENOSPC, as on a full disk

A tmpfs is a filesystem like any other for the code under test (``write`` fails with ``ENOSPC``, ``fsync``,
``link`` and ``rename`` work), it costs no disk and it goes away with the mount. Mounting needs root (or
``CAP_SYS_ADMIN``): where that is refused the test is skipped on a developer machine and FAILS where ``CI``
is set (the policy of :mod:`tests.support.needs`), because the CI machines run the suite as root.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

__all__ = ["free_bytes", "small_filesystem"]


@contextmanager
def small_filesystem(path: Path, size_bytes: int) -> Iterator[Path]:
    """Mount a tmpfs of ``size_bytes`` on ``path`` (created if needed), unmount it afterwards."""
    path.mkdir(parents=True, exist_ok=True)
    mount = shutil.which("mount")
    result = (
        subprocess.run(
            [mount, "-t", "tmpfs", "-o", f"size={size_bytes},mode=0755", "tmpfs", str(path)],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        if mount
        else None
    )
    if result is None or result.returncode != 0:
        reason = f"cannot mount a {size_bytes}-byte tmpfs on {path}: " + (
            result.stderr.strip() if result is not None else "no mount command"
        )
        if os.environ.get("CI"):
            pytest.fail(reason + "; in CI this is a failure, not a skip")
        pytest.skip(reason)
    try:
        yield path
    finally:
        # Lazily: a server process killed by the test may still be letting go of its files.
        subprocess.run(["umount", "-l", str(path)], capture_output=True, timeout=30, check=True)


def free_bytes(path: Path) -> int:
    """Bytes still free on the filesystem of ``path``."""
    stat = os.statvfs(path)
    return stat.f_bavail * stat.f_frsize
