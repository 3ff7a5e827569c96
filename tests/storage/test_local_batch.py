"""The local store's batch writes the temp files of small blobs on threads (cache_server/storage/local.py,
LocalBatch): a write that fails there surfaces at the commit as the same error a put would have raised,
nothing of the batch is stored and no temp file stays; an abort with writes in flight leaves none; and the
writes waiting are bounded."""

from __future__ import annotations

import errno
import threading
from pathlib import Path

import pytest

from cache_server.errors import StorageUnavailable
from cache_server.storage.local import LocalBatch, LocalBlobStore


def files_under(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if not p.is_dir())


def gate_writes(store: LocalBlobStore, monkeypatch: pytest.MonkeyPatch) -> threading.Event:
    """Every temp file write of ``store`` waits (at most 10 s) until the returned event is set."""
    original = store._write_temp
    gate = threading.Event()

    def held(*args: object, **kwargs: object) -> str:
        gate.wait(10)
        return original(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(store, "_write_temp", held)
    return gate


def test_a_write_failing_on_a_writer_thread_fails_the_commit_and_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = LocalBlobStore(tmp_path / "blobs")
    original = store._write_temp

    def full_for_one(name: str, *args: object, **kwargs: object) -> str:
        if name == "ns/k3":
            raise OSError(errno.ENOSPC, "No space left on device")
        return original(name, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(store, "_write_temp", full_for_one)
    with store.batch() as batch:
        for i in range(8):
            batch.put(f"ns/k{i}", [b"%d" % i * 500], {})
        batch.put("ns/large", [b"x" * (LocalBatch.THREADED_BYTES + 1)], {})  # written on this thread
        with pytest.raises(StorageUnavailable, match="No space left"):
            batch.commit()
    assert list(store.list()) == []
    assert files_under(tmp_path / "blobs") == []  # no temp file of the writes that went through
    monkeypatch.undo()
    with store.batch() as batch:  # a new batch works again
        batch.put("ns/after", [b"after"], {})
        assert batch.commit() == {"ns/after": True}


def test_an_abort_with_writes_in_flight_leaves_no_temp_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = LocalBlobStore(tmp_path / "blobs")
    gate = gate_writes(store, monkeypatch)
    batch = store.batch()
    with batch:
        for i in range(6):
            batch.put(f"ns/k{i}", [b"y" * 1000], {})
        threading.Timer(0.2, gate.set).start()  # the writes end after the abort began waiting for them
        batch.abort()
    assert files_under(tmp_path / "blobs") == []


def test_the_writes_waiting_are_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = LocalBlobStore(tmp_path / "blobs")
    gate = gate_writes(store, monkeypatch)
    monkeypatch.setattr(LocalBatch, "WRITES_AHEAD", 3)
    puts_done: list[int] = []
    with store.batch() as batch:

        def put_five() -> None:
            for i in range(5):
                batch.put(f"ns/k{i}", [b"z" * 100], {})
                puts_done.append(i)

        putter = threading.Thread(target=put_five)
        putter.start()
        putter.join(0.5)
        assert puts_done == [0, 1, 2]  # the fourth waits for a write to end
        gate.set()
        putter.join(10)
        assert puts_done == [0, 1, 2, 3, 4]
        assert batch.commit() == {f"ns/k{i}": True for i in range(5)}
    assert sorted(info.name for info in store.list()) == [f"ns/k{i}" for i in range(5)]
