"""The local cache directory: which files are entries, their digests, and verified atomic writes.

torch_xla names each entry after its graph hash (decimal digits) and writes it in place, without a temporary
name or a rename (``open(O_WRONLY|O_CREAT|O_TRUNC)``, write, close). So a file can be seen half written;
:func:`files_open_for_writing` and a stable size tell the uploader when one is complete. Files this client
writes go through :class:`VerifiedWriter`: a hidden temporary file, SHA-256 checked, then renamed, so
torch_xla only ever sees complete, verified entries.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import os
import secrets
import time
from collections.abc import Callable, Container
from dataclasses import asdict, dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from cache_protocol import FINGERPRINT_FILE, is_key
from xla_cache.errors import CorruptTransfer

__all__ = [
    "CHUNK",
    "LAST_WARM_FILE",
    "LOCK_NAME",
    "TEMP_SUFFIX",
    "UPLOAD_LOCK_NAME",
    "EntryCheck",
    "LastWarm",
    "ListingWatch",
    "LocalFile",
    "VerifiedWriter",
    "file_sha256",
    "files_open_for_writing",
    "fsync_directory",
    "is_entry_name",
    "read_fingerprint",
    "read_last_warm",
    "record_last_warm",
    "remove_temp_files",
    "scan",
    "write_fingerprint",
]

CHUNK = 1024 * 1024
LOCK_NAME = ".xla-cache.lock"
UPLOAD_LOCK_NAME = ".xla-cache-upload.lock"  # one process of a host uploads at a time: dirlock.py
TEMP_SUFFIX = ".part"
LAST_WARM_FILE = "last-warm.json"  # in the base cache directory: see LastWarm

# A temporary file is named by the pid and a count, no longer than the random name it had (os.urandom per
# file cost 15 us, a tenth of writing a small entry); a name a dead process of the same pid left is skipped.
_temp_numbers = itertools.count()

EntryCheck = Callable[[Path], "str | None"]
"""Why an entry file cannot be loaded by the framework, or None when it can."""


def is_entry_name(name: str) -> bool:
    """Whether a file name in the cache directory is an entry (not our lock or temporary files)."""
    return is_key(name) and not name.endswith(TEMP_SUFFIX)


@dataclass(frozen=True)
class LocalFile:
    """One entry file as last seen on disk."""

    key: str
    path: Path
    size: int
    mtime_ns: int


def scan(
    directory: Path, is_entry: Callable[[str], bool] = is_entry_name, *, skip: Container[str] = ()
) -> dict[str, LocalFile]:
    """Every entry file in ``directory`` (regular files whose name ``is_entry``), by key; names in ``skip``
    are left out before any ``stat``."""
    found: dict[str, LocalFile] = {}
    try:
        iterator = os.scandir(directory)
    except FileNotFoundError:
        return found
    with iterator:
        for item in iterator:
            if item.name in skip or not is_entry(item.name):
                continue
            try:
                if not item.is_file(follow_symlinks=False):
                    continue
                info = item.stat(follow_symlinks=False)
            except FileNotFoundError:  # removed between listing and stat
                continue
            found[item.name] = LocalFile(item.name, Path(item.path), info.st_size, info.st_mtime_ns)
    return found


@dataclass(frozen=True)
class _Look:
    """The directory as a scan started: its identity and time stamps, our clock then."""

    identity: tuple[int, int, int, int]  # device, inode, modification and change time (ns)
    mtime_ns: int
    wall_ns: int
    at: float  # monotonic


class ListingWatch:
    """Whether a directory's list of files may have changed since a scan that left nothing to look at again.

    Creating, removing or renaming a file moves the directory's modification (and change) time; writing
    into a file does not. So a caller that scanned the directory and found nothing waiting (every file
    settled, none still being written) may skip its next scan while the directory's times are those read
    just before that scan (:meth:`begin`, then :meth:`settled` after the scan). Two cases keep it scanning:

    - a time stamp not clearly older than the scan's start (by :data:`margin_ns`, a second): a file
      created in the same clock tick as the last change, after the scan listed the directory, would
      leave the directory's time as it was (file systems stamp with a coarse clock; a network one with
      another machine's);
    - ``longest`` seconds since the last full scan: a scan runs at least that often whatever the times say
      (a file rewritten in place, or a clock that went back).
    """

    def __init__(
        self,
        directory: Path,
        *,
        margin_ns: int = 1_000_000_000,
        longest: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.directory = directory
        self.margin_ns = margin_ns
        self.longest = longest
        self._clock = clock
        self._quiet: _Look | None = None

    def _look(self) -> _Look | None:
        try:
            info = os.stat(self.directory)
        except OSError:
            return None
        identity = (info.st_dev, info.st_ino, info.st_mtime_ns, info.st_ctime_ns)
        return _Look(identity, info.st_mtime_ns, time.time_ns(), self._clock())

    def begin(self) -> _Look | None:
        """Read the directory's times before a scan (None: it cannot be read; the scan says what is there)."""
        return self._look()

    def settled(self, look: _Look | None) -> None:
        """The scan begun with ``look`` found nothing waiting: the next may be skipped while nothing moves
        (unless the directory's time was too close to the scan's start to tell)."""
        clearly_older = look is not None and look.mtime_ns < look.wall_ns - self.margin_ns
        self._quiet = look if clearly_older else None

    def forget(self) -> None:
        """Something is waiting (a file being written, not yet settled, not yet sent): scan next time."""
        self._quiet = None

    def unchanged(self) -> bool:
        """Whether the directory's list cannot have changed since the last settled scan."""
        quiet = self._quiet
        if quiet is None:
            return False
        now = self._look()
        return now is not None and now.identity == quiet.identity and now.at - quiet.at < self.longest


def file_sha256(path: Path) -> str:
    """Hex SHA-256 of a file, read in chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def files_open_for_writing(directory: Path) -> set[str] | None:
    """Names of files in ``directory`` that this process has open for writing, or None if unknowable.

    torch_xla writes entries from inside this process, so its open descriptors show a file still being
    written. Reads ``/proc/self/fd`` and ``/proc/self/fdinfo`` (Linux); elsewhere returns None.
    """
    fd_dir = Path("/proc/self/fd")
    if not fd_dir.is_dir():
        return None
    target = os.path.realpath(directory)
    names: set[str] = set()
    try:
        descriptors = os.listdir(fd_dir)
    except OSError:
        return None
    for fd in descriptors:
        try:
            link = os.readlink(fd_dir / fd)
        except OSError:
            continue
        if os.path.dirname(link) != target:
            continue
        try:
            flags_line = next(
                line
                for line in Path(f"/proc/self/fdinfo/{fd}").read_text().splitlines()
                if line.startswith("flags:")
            )
        except (OSError, StopIteration):
            continue
        flags = int(flags_line.split()[1], 8)
        if flags & os.O_ACCMODE in (os.O_WRONLY, os.O_RDWR):
            names.add(os.path.basename(link))
    return names


def remove_temp_files(directory: Path) -> int:
    """Remove leftover temporary files (call only while holding the directory lock); returns how many."""
    removed = 0
    with contextlib.suppress(FileNotFoundError), os.scandir(directory) as iterator:
        for item in iterator:
            if item.name.startswith(".") and item.name.endswith(TEMP_SUFFIX):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(item.path)
                    removed += 1
    return removed


def fsync_directory(directory: Path) -> None:
    """Make renames in ``directory`` durable."""
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


class VerifiedWriter:
    """Write one entry through a hidden temporary file; it appears under its key only if it verifies.

    Use as a context manager: :meth:`write` the bytes, then :meth:`commit`. Leaving the block without a
    successful commit removes the temporary file and leaves any existing entry untouched.

    The rename makes the entry appear whole or not at all for every reader. ``durable=True`` also fsyncs
    the data before the rename; it is off by default because it halves the speed of a bundle of small
    entries, and a power cut can only leave a short file behind, which torch_xla (2.7, tried with empty
    and truncated entries) counts as a deserialization failure and recompiles, and which the next warm
    replaces (its size or SHA-256 no longer matches the manifest).
    """

    def __init__(
        self,
        directory: Path,
        key: str,
        *,
        size: int,
        sha256: str,
        durable: bool = False,
        check: EntryCheck | None = None,
        replace: bool = True,
    ) -> None:
        if not is_entry_name(key):
            raise CorruptTransfer(f"the server sent an entry named {key!r}, which is not a valid key")
        self.directory = directory
        self.key = key
        self.expected_size = size
        self.expected_sha256 = sha256.lower()
        self.durable = durable
        self.check = check
        self.replace = replace
        self.written = 0
        self._digest = hashlib.sha256()
        # plain strings, not Paths: pathlib's joins were a tenth of a bundle's time in Python
        self._target = os.path.join(directory, key)
        self._temp = self._temp_name()
        self._fd: int | None = None
        self._committed = False

    def _temp_name(self) -> str:
        number = next(_temp_numbers)
        return os.path.join(self.directory, f".{self.key}.{os.getpid():x}-{number:x}{TEMP_SUFFIX}")

    def __enter__(self) -> VerifiedWriter:
        for _ in range(3):
            try:
                self._fd = os.open(self._temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
                return self
            except FileExistsError:
                self._temp = self._temp_name()
        self._fd = os.open(self._temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        return self

    def write(self, chunk: bytes) -> None:
        """Append bytes; refuses to grow past the announced size."""
        assert self._fd is not None, "use VerifiedWriter as a context manager"
        self.written += len(chunk)
        if self.written > self.expected_size:
            raise CorruptTransfer(
                f"entry {self.key}: more bytes than the {self.expected_size} the manifest announced"
            )
        self._digest.update(chunk)
        view = memoryview(chunk)
        while view:
            done = os.write(self._fd, view)
            view = view[done:]

    def commit(self) -> bool:
        """Check size and SHA-256 (and the framework's ``check``), then rename into place (fsync first when
        durable). With ``replace=False`` an existing file of that name stays, and this returns False."""
        assert self._fd is not None, "use VerifiedWriter as a context manager"
        if self.written != self.expected_size:
            raise CorruptTransfer(
                f"entry {self.key}: {self.written} bytes received, {self.expected_size} announced"
            )
        actual = self._digest.hexdigest()
        if actual != self.expected_sha256:
            raise CorruptTransfer(
                f"entry {self.key}: SHA-256 {actual[:12]}... does not match {self.expected_sha256[:12]}..."
            )
        if self.durable:
            os.fsync(self._fd)
        os.close(self._fd)
        self._fd = None
        problem = self.check(Path(self._temp)) if self.check is not None else None
        if problem is not None:
            raise CorruptTransfer(f"entry {self.key}: the framework could not load it: {problem}")
        if self.replace:
            os.replace(self._temp, self._target)
        else:
            try:
                os.link(self._temp, self._target)  # fails if the name exists: never over it
            except FileExistsError:
                return False
            finally:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self._temp)
        self._committed = True
        return True

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        if not self._committed:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self._temp)


def _write_json(path: Path, value: dict[str, Any]) -> None:
    """``value`` as ``path``, whole or not at all (temporary file + rename)."""
    temp = path.parent / f".{path.name}.{secrets.token_hex(6)}{TEMP_SUFFIX}"
    try:
        temp.write_text(json.dumps(value, sort_keys=True, indent=1) + "\n")
        os.replace(temp, path)
    except BaseException:  # a full disk: no half-written temporary file stays behind
        with contextlib.suppress(FileNotFoundError):
            temp.unlink()
        raise


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        value = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def write_fingerprint(directory: Path, fingerprint: dict[str, Any]) -> None:
    """Record the namespace's fingerprint in its directory."""
    _write_json(directory / FINGERPRINT_FILE, fingerprint)


def read_fingerprint(directory: Path) -> dict[str, Any] | None:
    """The fingerprint :func:`write_fingerprint` recorded, or None."""
    return _read_json(directory / FINGERPRINT_FILE)


@dataclass(frozen=True)
class LastWarm:
    """What the last warm of this runtime into a base cache directory recorded: the namespace it filled,
    whose cache it is, when (ISO 8601, UTC) and from which server (None: local only). Commands that want
    "this runtime's namespace" read it instead of starting the runtime to fingerprint it."""

    namespace: str
    framework: str
    at: str
    server: str | None


def record_last_warm(cache_dir: Path, last: LastWarm) -> None:
    """Record ``last`` in ``<cache_dir>/last-warm.json``."""
    _write_json(cache_dir / LAST_WARM_FILE, asdict(last))


def read_last_warm(cache_dir: Path) -> LastWarm | None:
    """The last warm :func:`record_last_warm` recorded under ``cache_dir``, or None (none, or unreadable)."""
    value = _read_json(cache_dir / LAST_WARM_FILE)
    if value is None or not isinstance(value.get("namespace"), str) or not value["namespace"]:
        return None
    server = value.get("server")
    return LastWarm(
        namespace=value["namespace"],
        framework=str(value.get("framework") or ""),
        at=str(value.get("at") or ""),
        server=server if isinstance(server, str) else None,
    )
