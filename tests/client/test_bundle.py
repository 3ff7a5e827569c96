"""Reading a bundle: only requested, regular, verified members land in the directory."""

from __future__ import annotations

import io
import os
import tarfile
from collections.abc import Iterator
from pathlib import Path

from tests.support.api import sha
from xla_cache.http.api import RemoteEntry
from xla_cache.transfer.bundle import extract_bundle


def tar_of(members: list[tuple[str, bytes]], *, links: tuple[str, ...] = ()) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as archive:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
        for name in links:
            info = tarfile.TarInfo(name)
            info.type = tarfile.SYMTYPE
            info.linkname = "/etc/passwd"
            archive.addfile(info)
    return buffer.getvalue()


def chunked(data: bytes, size: int = 1000) -> Iterator[bytes]:
    for start in range(0, len(data), size):
        yield data[start : start + size]


def entry(key: str, data: bytes) -> RemoteEntry:
    return RemoteEntry(key, len(data), sha(data))


def test_good_members_are_written(tmp_path: Path) -> None:
    members = [(str(i), os.urandom(3000 + i)) for i in range(5)]
    wanted = {k: entry(k, d) for k, d in members}
    result = extract_bundle(chunked(tar_of(members)), wanted, tmp_path)
    assert result.errors == []
    assert sorted(result.written) == sorted(wanted)
    assert result.bytes == sum(len(d) for _, d in members)
    for key, data in members:
        assert (tmp_path / key).read_bytes() == data


def test_a_corrupt_member_is_refused_and_the_others_kept(tmp_path: Path) -> None:
    good, bad = os.urandom(2000), os.urandom(2000)
    wanted = {"1": entry("1", good), "2": entry("2", bad)}
    corrupted = bytes([bad[0] ^ 1]) + bad[1:]
    result = extract_bundle(chunked(tar_of([("1", good), ("2", corrupted)])), wanted, tmp_path)
    assert result.written == ["1"]
    assert len(result.errors) == 1 and "entry 2" in result.errors[0] and "SHA-256" in result.errors[0]
    assert sorted(os.listdir(tmp_path)) == ["1"]


def test_unrequested_links_and_escaping_names_never_land(tmp_path: Path) -> None:
    data = b"payload"
    target = tmp_path / "dir"
    target.mkdir()
    stream = tar_of([("../escape", data), ("other", data), ("1", data)], links=("2",))
    wanted = {"1": entry("1", data), "2": entry("2", data)}
    result = extract_bundle(chunked(stream), wanted, target)
    assert result.written == ["1"]
    assert len(result.errors) == 3
    assert sorted(os.listdir(target)) == ["1"]
    assert sorted(os.listdir(tmp_path)) == ["dir"]


def test_size_other_than_the_manifest_is_refused(tmp_path: Path) -> None:
    result = extract_bundle(
        chunked(tar_of([("1", b"abcd")])), {"1": RemoteEntry("1", 3, sha(b"abc"))}, tmp_path
    )
    assert result.written == [] and "4 bytes" in result.errors[0]


def test_truncated_stream_keeps_what_verified(tmp_path: Path) -> None:
    members = [("1", os.urandom(5000)), ("2", os.urandom(5000))]
    stream = tar_of(members)
    result = extract_bundle(chunked(stream[:7000]), {k: entry(k, d) for k, d in members}, tmp_path)
    assert result.written == ["1"]
    assert any("not a valid tar stream" in e for e in result.errors)
    assert sorted(os.listdir(tmp_path)) == ["1"]


def test_garbage_is_reported(tmp_path: Path) -> None:
    result = extract_bundle(chunked(b"not a tar" * 200), {"1": entry("1", b"x")}, tmp_path)
    assert result.written == [] and "not a valid tar stream" in result.errors[0]
    assert os.listdir(tmp_path) == []
