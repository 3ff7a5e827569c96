"""The cache directory: what counts as an entry, verified writes, files still being written."""

from __future__ import annotations

import itertools
import os
from pathlib import Path

import pytest

from tests.support.api import sha
from xla_cache.errors import CorruptTransfer
from xla_cache.localcache import cachedir
from xla_cache.localcache.cachedir import (
    TEMP_SUFFIX,
    VerifiedWriter,
    files_open_for_writing,
    is_entry_name,
    read_fingerprint,
    remove_temp_files,
    scan,
    write_fingerprint,
)


def test_entry_names() -> None:
    assert is_entry_name("137088755305343888964398401303341114028")
    assert not is_entry_name(".xla-cache.lock")
    assert not is_entry_name(".123.abcd.part")
    assert not is_entry_name(".fingerprint.json")
    assert not is_entry_name("a/b")
    assert not is_entry_name("x" * 300)


def test_scan_lists_only_entry_files(tmp_path: Path) -> None:
    (tmp_path / "111").write_bytes(b"abc")
    (tmp_path / ".xla-cache.lock").write_text("1")
    (tmp_path / ".222.ff.part").write_bytes(b"partial")
    (tmp_path / "333").mkdir()
    (tmp_path / "444").symlink_to(tmp_path / "111")
    found = scan(tmp_path)
    assert list(found) == ["111"]
    assert found["111"].size == 3
    assert scan(tmp_path / "absent") == {}


def test_verified_writer_renames_only_a_verified_file(tmp_path: Path) -> None:
    data = b"executable" * 100
    with VerifiedWriter(tmp_path, "42", size=len(data), sha256=sha(data)) as writer:
        writer.write(data[:500])
        assert not (tmp_path / "42").exists()  # torch_xla never sees a partial entry
        writer.write(data[500:])
        writer.commit()
    assert (tmp_path / "42").read_bytes() == data
    assert os.listdir(tmp_path) == ["42"]


def test_verified_writer_refuses_a_wrong_digest_and_keeps_the_old_file(tmp_path: Path) -> None:
    (tmp_path / "42").write_bytes(b"old")
    data = b"new bytes"
    with (
        pytest.raises(CorruptTransfer, match="SHA-256"),
        VerifiedWriter(tmp_path, "42", size=len(data), sha256=sha(b"other bytes")) as writer,
    ):
        writer.write(data)
        writer.commit()
    assert (tmp_path / "42").read_bytes() == b"old"
    assert sorted(os.listdir(tmp_path)) == ["42"]


def test_verified_writer_refuses_too_many_or_too_few_bytes(tmp_path: Path) -> None:
    with (
        pytest.raises(CorruptTransfer, match="more bytes"),
        VerifiedWriter(tmp_path, "1", size=3, sha256="0" * 64) as w,
    ):
        w.write(b"abcd")
    with (
        pytest.raises(CorruptTransfer, match="2 bytes received"),
        VerifiedWriter(tmp_path, "1", size=3, sha256="0" * 64) as w,
    ):
        w.write(b"ab")
        w.commit()
    assert os.listdir(tmp_path) == []


def test_verified_writer_refuses_a_bad_key(tmp_path: Path) -> None:
    with pytest.raises(CorruptTransfer, match="not a valid key"):
        VerifiedWriter(tmp_path, "../escape", size=1, sha256="0" * 64)


def test_files_open_for_writing(tmp_path: Path) -> None:
    (tmp_path / "done").write_bytes(b"x")
    with open(tmp_path / "writing", "wb") as handle, open(tmp_path / "done", "rb"):
        handle.write(b"half")
        assert files_open_for_writing(tmp_path) == {"writing"}
    assert files_open_for_writing(tmp_path) == set()


def test_remove_temp_files(tmp_path: Path) -> None:
    (tmp_path / ".1.aa.part").write_bytes(b"x")
    (tmp_path / "1").write_bytes(b"x")
    assert remove_temp_files(tmp_path) == 1
    assert os.listdir(tmp_path) == ["1"]


def test_fingerprint_file_round_trip(tmp_path: Path) -> None:
    assert read_fingerprint(tmp_path) is None
    write_fingerprint(tmp_path, {"a": 1})
    assert read_fingerprint(tmp_path) == {"a": 1}
    assert scan(tmp_path) == {}


def test_a_temporary_name_a_dead_process_left_is_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Temporary names are the pid and a count: one a crashed process of the same pid left is skipped."""
    monkeypatch.setattr(cachedir, "_temp_numbers", itertools.count())
    stale = tmp_path / f".42.{os.getpid():x}-0{TEMP_SUFFIX}"
    stale.write_bytes(b"left by a crash")
    data = b"the entry"
    with VerifiedWriter(tmp_path, "42", size=len(data), sha256=sha(data)) as writer:
        writer.write(data)
        writer.commit()
    assert (tmp_path / "42").read_bytes() == data
    assert stale.read_bytes() == b"left by a crash"  # not ours: not touched
