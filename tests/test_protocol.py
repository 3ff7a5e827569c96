"""The server and the client speak one protocol (:mod:`cache_protocol`): the same names are valid on both
sides, the headers and the fingerprint file are the ones each side really uses, and the counters of the
index, the rollup and the stats response are one list."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import BigInteger, inspect

import cache_protocol
from cache_protocol.tar import BLOCK, END, BadTar, TarReader, _ustar, member_header, padding
from cache_server.api.admin_schemas import CountersOut, DayOut
from cache_server.domain import COUNTERS
from cache_server.errors import InvalidName
from cache_server.index.models import DailyStats, Namespace
from cache_server.names import check_key, check_namespace
from xla_cache.localcache.cachedir import is_entry_name, read_fingerprint, write_fingerprint

NAMES = [
    "0",
    "137088755305343888964398401303341114028",
    "tpu-v5e-8.spmd_1",
    "a" * 128,
    "a" * 129,
    "k" * 256,
    "k" * 257,
    "",
    ".hidden",
    "-dash",
    "a..b",
    "a/b",
    "a\\b",
    "nul\x00",
    "space here",
    "ünïcode",
]


def _server_accepts(check: Callable[[str], str], name: str) -> bool:
    try:
        check(name)
    except InvalidName:
        return False
    return True


@pytest.mark.parametrize("name", NAMES)
def test_server_and_client_accept_the_same_names(name: str) -> None:
    assert _server_accepts(check_key, name) == is_entry_name(name) == cache_protocol.is_key(name)
    assert _server_accepts(check_namespace, name) == cache_protocol.is_namespace(name)


def test_headers_on_the_wire_are_the_protocols(client: TestClient) -> None:
    data = b"an executable"
    digest = hashlib.sha256(data).hexdigest()
    url = "/v1/namespaces/ns/entries/1"
    put = client.put(
        url,
        content=data,
        headers={cache_protocol.SHA256_HEADER: digest, cache_protocol.COMPILE_TIME_HEADER: "1500"},
    )
    assert put.status_code == 201
    assert client.get(url).headers[cache_protocol.SHA256_HEADER] == digest
    assert client.put(url, content=data).status_code == 400  # the digest header is the one required
    saved = client.get("/admin/stats").json()["totals"]["compile_seconds_saved"]
    assert saved == 1.5  # the compile-time header was read: one hit of a 1.5 s compile


def test_the_fingerprint_file_is_the_protocols(tmp_path: Path) -> None:
    write_fingerprint(tmp_path, {"torch_xla": "2.7.0"})
    assert json.loads((tmp_path / cache_protocol.FINGERPRINT_FILE).read_text()) == {"torch_xla": "2.7.0"}
    assert read_fingerprint(tmp_path) == {"torch_xla": "2.7.0"}
    assert not is_entry_name(cache_protocol.FINGERPRINT_FILE)


def test_counters_are_one_list() -> None:
    for table in (Namespace, DailyStats):
        counter_columns = {
            column.name
            for column in inspect(table).columns
            if isinstance(column.type, BigInteger) and column.name != "size"
        }
        assert counter_columns == set(COUNTERS), table.__tablename__
    shown = {name.replace("_ms_saved", "_seconds_saved") for name in COUNTERS}
    assert shown <= set(CountersOut.model_fields) and shown <= set(DayOut.model_fields)


def test_written_members_read_back_by_tarfile_and_by_the_strict_reader() -> None:
    members = [
        ("1" * 39, b"abc", {"XLA_CACHE.sha256": "a" * 64, "XLA_CACHE.compile_time_ms": "12"}),
        ("jit_f-" + "e" * 120, b"x" * 513, {}),  # longer than the 100 bytes a plain header holds
        ("ümlaut", b"", {"note": "v" * 300}),  # not ASCII; a record whose length needs three digits
        ("plain", b"y" * 512, {}),
    ]
    stream = b"".join(member_header(n, len(d), 1_700_000_000, r) + d + padding(len(d)) for n, d, r in members)
    stream += END
    assert len(stream) % BLOCK == 0
    with tarfile.open(fileobj=io.BytesIO(stream), mode="r|") as archive:
        for (name, data, records), member in zip(members, archive, strict=True):
            assert (member.name, member.size, member.mode, member.mtime) == (
                name,
                len(data),
                0o644,
                1_700_000_000,
            )
            assert member.isreg()
            extracted = archive.extractfile(member)
            assert extracted is not None and extracted.read() == data
            assert {k: member.pax_headers[k] for k in records} == records
    pieces = iter([stream])
    read = [(m.name, b"".join(m.chunks())) for m in TarReader(lambda _n: next(pieces, b"")).members()]
    assert read == [(name, data) for name, data, _ in members]


def test_a_size_over_the_plain_header_goes_in_a_pax_record() -> None:
    size = 9 * 1024**3  # over the 8 GiB an octal size field holds
    header = member_header("big", size)
    pieces = iter([header])
    member = next(TarReader(lambda _n: next(pieces, b"")).members())
    assert (member.name, member.size) == ("big", size)


@pytest.mark.timeout(10)
@pytest.mark.parametrize("kind", [b"x", b"0"])
def test_a_negative_size_is_refused_not_read_backwards(kind: bytes) -> None:
    """An octal field may carry a sign: -512 once made the reader step back over the same header forever."""
    pieces = iter([_ustar(b"k", -512, 0, kind) + END])
    with pytest.raises(BadTar, match="negative"):
        list(TarReader(lambda _n: next(pieces, b"")).members())
    with pytest.raises(BadTar, match="negative"):
        TarReader(lambda _n: b"").exact(-1)


# -- fingerprints: the flags and how two fingerprints differ ------------------------------------------------


def test_parse_flags_keeps_the_last_value_of_each_xla_flag_sorted() -> None:
    from cache_protocol.fingerprint import parse_flags

    assert parse_flags(None) == {} and parse_flags("-v --other=1") == {}
    flags = parse_flags("--xla_b --xla_a=1 -v --xla_a='2 3' --xla_c=")
    assert flags == {"--xla_a": "2 3", "--xla_b": None, "--xla_c": ""}
    assert list(flags) == ["--xla_a", "--xla_b", "--xla_c"]
    assert parse_flags('--xla_a="unbalanced') == {"--xla_a": '"unbalanced'}  # XLA splits on whitespace


def test_differences_resolve_flags_and_fall_back_to_digests() -> None:
    from cache_protocol.fingerprint import REDACTED, differences

    base = {
        "framework": "jax",
        "jax_version": "0.10.2",
        "xla_flags_digest": "a",
        "xla_flags": {"--xla_x": "1"},
    }
    other = {**base, "xla_flags_digest": "b", "xla_flags": {"--xla_x": "2", "--xla_y": None}}
    count, found = differences(base, other)
    assert count == 1
    assert [d.text for d in found] == ["--xla_x=1 (theirs: --xla_x=2)", "unset (theirs: --xla_y)"]
    assert {d.field for d in found} == {"XLA_FLAGS"}
    # a fingerprint from before the flag maps: the digests
    old = {k: v for k, v in other.items() if k != "xla_flags"}
    assert [(d.field, d.ours, d.theirs) for d in differences(base, old)[1]] == [
        ("xla_flags_digest", "a", "b")
    ]
    # redacted values: a flag only one side has is named; a flag both have with hidden values only when
    # nothing else explains the differing digests
    hidden = {**base, "xla_flags": {"--xla_x": REDACTED}}
    hidden_other = {**other, "xla_flags": {"--xla_x": REDACTED, "--xla_y": None}}
    assert [d.text for d in differences(hidden, hidden_other)[1]] == ["unset (theirs: --xla_y)"]
    same_names = {**other, "xla_flags": {"--xla_x": REDACTED}}
    assert [d.text for d in differences(hidden, same_names)[1]] == [
        "--xla_x=<redacted> (theirs: --xla_x=<redacted>)"
    ]
    # the maps alone never make a difference (equal digests: equal flags); LIBTPU_INIT_ARGS as XLA_FLAGS
    assert differences(base, {**base, "xla_flags": {}}) == (0, [])
    tpu = {**base, "libtpu_init_args_digest": "c", "libtpu_init_args": {"--xla_tpu_z": "1"}}
    assert [(d.field, d.text) for d in differences(tpu, {**base, "libtpu_init_args": {}})[1]] == [
        ("LIBTPU_INIT_ARGS", "--xla_tpu_z=1 (theirs: unset)")
    ]
