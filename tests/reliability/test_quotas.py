"""Quotas against a real ``xla-cache-server``: a namespace's and a token's entry and byte quotas refuse an
upload past them with 507 before anything of it is stored (single PUT, with and without Content-Length, and
bulk members), deletes free them, and one token creates at most XLA_CACHE_MAX_NAMESPACES_PER_TOKEN
namespaces."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
import zstandard

from cache_server.auth.tokens import Role, TokenManager
from cache_server.index import Database, TokenRepository
from cache_server.settings import Settings
from cache_server.storage.base import blob_name
from cache_server.storage.local import LocalBlobStore
from tests.support.api import bearer, member, post_bulk, put, tar_of
from tests.support.migrated import migrated
from tests.support.server import LiveServer, run_server

MIB = 1024 * 1024


def _body(tag: str, size: int) -> bytes:
    return (tag.encode() * size)[:size]


class Cache:
    """A client of the live server with one token, and a look at its blob directory."""

    def __init__(self, server: LiveServer, token: str, data_dir: Path) -> None:
        self.http = httpx.Client(base_url=server.url, headers=bearer(token), timeout=30)
        self._blobs = LocalBlobStore(data_dir / "blobs")

    def put(self, namespace: str, key: str, data: bytes, *, chunked: bool = False) -> httpx.Response:
        """One PUT; ``chunked``: in two pieces, without a Content-Length."""
        return put(self.http, namespace, key, data, body=[data[:7], data[7:]] if chunked else None)

    def bulk(self, namespace: str, members: list[tuple[str, bytes]]) -> httpx.Response:
        return post_bulk(self.http, namespace, [member(key, data) for key, data in members])

    def stored(self, namespace: str, key: str) -> bool:
        """Whether a GET serves the entry; asserts that nothing of it lies in the store when it does not."""
        found = self.http.get(f"/v1/namespaces/{namespace}/entries/{key}").status_code == 200
        if not found:
            assert self._blobs.stat(blob_name(namespace, key)) is None, (
                f"a blob of {namespace}/{key} was left"
            )
        return found


Connect = Callable[[str], Cache]


@pytest.fixture
def connect(tmp_path: Path, server_env: dict[str, str]) -> Iterator[Connect]:
    """A server with auth on and a namespace cap of 5 per token; a client of it by token name (admin, ci,
    other, maker), closed afterwards."""
    settings = Settings(data_dir=tmp_path, auth=True)
    migrated(settings)
    database = Database.from_settings(settings)
    manager = TokenManager(TokenRepository(database))
    tokens = {"admin": manager.create("ops", Role.ADMIN)[0]}
    tokens.update({name: manager.create(name, Role.WRITE)[0] for name in ("ci", "other", "maker")})
    database.dispose()
    env = {**server_env, "XLA_CACHE_AUTH": "on", "XLA_CACHE_MAX_NAMESPACES_PER_TOKEN": "5"}
    clients: list[Cache] = []

    def client(name: str) -> Cache:
        clients.append(Cache(server, tokens[name], tmp_path))
        return clients[-1]

    with run_server(tmp_path, env) as server:
        yield client
        for opened in clients:
            opened.http.close()


def test_namespace_quotas_refuse_before_storing_and_free_after_a_delete(
    connect: Connect, tmp_path: Path
) -> None:
    admin, ci = connect("admin"), connect("ci")

    # two entries at most: the third PUT is refused (507), nothing of it stored; the same bytes again fit
    quota = admin.http.put("/admin/quotas/namespace/two", json={"max_entries": 2})
    assert quota.status_code == 200 and quota.json()["entries"] == 0
    assert [ci.put("two", f"k{i}", _body(f"e{i}", 100)).status_code for i in range(2)] == [201, 201]
    refused = ci.put("two", "k2", _body("e2", 100))
    assert (refused.status_code, refused.json()["error"]) == (507, "quota_exceeded")
    assert "quota is 2 entries" in refused.json()["detail"]
    assert not ci.stored("two", "k2")
    assert ci.put("two", "k0", _body("e0", 100)).status_code == 200  # already stored: adds nothing
    # a bulk upload into the full namespace is refused whole, at once
    full = ci.bulk("two", [("b0", _body("b0", 10))])
    assert (full.status_code, full.json()["error"]) == (507, "quota_exceeded")
    assert not ci.stored("two", "b0")
    # a delete frees the quota
    assert admin.http.delete("/v1/namespaces/two/entries/k1").status_code == 204
    assert ci.put("two", "k2", _body("e2", 100)).status_code == 201
    print(f"\nentry quota 2: third PUT {refused.status_code}, bulk into full {full.status_code}; freed: 201")

    # bulk members past the quota are refused one by one with 507; those before and after that fit are kept
    assert admin.http.put("/admin/quotas/namespace/bulk", json={"max_entries": 2}).status_code == 200
    answer = ci.bulk("bulk", [(f"m{i}", _body(f"m{i}", 600)) for i in range(4)])
    assert answer.status_code == 200
    statuses = [(r["key"], r["status"]) for r in answer.json()["results"]]
    assert statuses == [("m0", 201), ("m1", 201), ("m2", 507), ("m3", 507)]
    assert [ci.stored("bulk", f"m{i}") for i in range(4)] == [True, True, False, False]
    # eviction frees it too
    evicted = admin.http.post("/admin/evict", json={"namespace": "bulk", "max_total_bytes": 0})
    assert evicted.status_code == 200 and evicted.json()["evicted"] == 2
    again = ci.bulk("bulk", [(f"m{i}", _body(f"m{i}", 600)) for i in (2, 3)])
    assert [r["status"] for r in again.json()["results"]] == [201, 201]
    print(f"bulk of 4 into entry quota 2: {[status for _, status in statuses]}; after eviction: 201, 201")

    # bytes: a declared length past the quota is refused before the body; without one, once measured
    assert admin.http.put("/admin/quotas/namespace/bytes", json={"max_bytes": 1000}).status_code == 200
    assert ci.put("bytes", "a", _body("a", 600)).status_code == 201
    assert ci.put("bytes", "b", _body("b", 600)).status_code == 507
    assert ci.put("bytes", "c", _body("c", 600), chunked=True).status_code == 507
    assert not ci.stored("bytes", "b") and not ci.stored("bytes", "c")
    assert ci.put("bytes", "d", _body("d", 400), chunked=True).status_code == 201  # exactly the quota
    bulk_bytes = ci.bulk("bytes", [("e", _body("e", 1))])
    assert bulk_bytes.status_code == 507  # full
    assert admin.http.put("/admin/quotas/namespace/bytes", json={"max_bytes": 1500}).status_code == 200
    mixed = ci.bulk("bytes", [("f", _body("f", 300)), ("g", _body("g", 300)), ("h", _body("h", 200))])
    assert [r["status"] for r in mixed.json()["results"]] == [201, 507, 201]
    assert [ci.stored("bytes", key) for key in "fgh"] == [True, False, True]
    # the probe's case: a small zstd body of many large, all-zero members; the byte quota stops it
    assert admin.http.put("/admin/quotas/namespace/bomb", json={"max_bytes": 4 * MIB}).status_code == 200
    members = [(f"z{i:02d}", bytes(MIB)) for i in range(40)]
    body = zstandard.ZstdCompressor().compress(tar_of(member(key, data) for key, data in members))
    bomb = ci.http.post(
        "/v1/namespaces/bomb/entries",
        content=body,
        headers={"Content-Type": "application/x-tar", "Content-Encoding": "zstd"},
    )
    assert bomb.status_code == 200, bomb.text
    results = [r["status"] for r in bomb.json()["results"]]
    assert bomb.status_code == 200 and results == [201] * 4 + [507] * 36
    on_disk = sum(f.stat().st_size for f in (tmp_path / "blobs" / "bomb").rglob("*") if f.is_file())
    assert on_disk <= 4 * MIB + 64 * 1024  # the entries, and their metadata
    print(f"zstd body of {len(body):,} bytes, 40 members of 1 MiB, quota 4 MiB: {on_disk:,} bytes on disk")
    listed = {(q["kind"], q["subject"]): q for q in admin.http.get("/admin/quotas").json()["quotas"]}
    assert (listed[("namespace", "bytes")]["bytes"], listed[("namespace", "bytes")]["entries"]) == (1500, 4)
    print(
        "byte quota 1000: 600+600 PUT 507, chunked 507, 400 fits; bulk 300/300/200 into 500 left: 201/507/201"
    )


def test_token_quota_spans_namespaces_and_the_namespace_cap(connect: Connect) -> None:
    admin, other, ci = connect("admin"), connect("other"), connect("ci")

    set_quota = admin.http.put("/admin/quotas/token/other", json={"max_entries": 2, "max_bytes": 10_000})
    assert set_quota.status_code == 200 and len(set_quota.json()["quotas"]) == 1
    assert admin.http.put("/admin/quotas/token/nobody", json={"max_entries": 1}).status_code == 404
    for bad in (
        {"max_entries": -1},
        {"max_entries": True},
        {"max_bytes": "5"},
        {"max_bytes": 2**63},
        {"x": 1},
    ):
        assert admin.http.put("/admin/quotas/namespace/t1", json=bad).status_code == 400, bad
    assert admin.http.put("/admin/quotas/namespace/a..b", json={"max_entries": 1}).status_code == 400
    assert other.http.put("/admin/quotas/namespace/t1", json={"max_entries": 9}).status_code == 403
    assert admin.http.get("/admin/quotas").json()["quotas"] == [set_quota.json()["quotas"][0]]
    assert other.put("t1", "a", _body("a", 50)).status_code == 201
    assert other.put("t2", "a", _body("a", 50)).status_code == 201  # another namespace, the same token
    refused = other.put("t1", "b", _body("b", 50))
    assert refused.status_code == 507 and "token" in refused.json()["detail"]
    bulk = other.bulk("t2", [("c", _body("c", 5))])
    assert bulk.status_code == 507
    assert not other.stored("t1", "b") and not other.stored("t2", "c")
    assert ci.put("t1", "b", _body("b", 50)).status_code == 201  # another token: the namespace has room
    # an eviction (here: the namespace deleted) frees the token's quota
    assert admin.http.delete("/admin/namespaces/t2").status_code == 200
    assert other.put("t1", "c", _body("c", 50)).status_code == 201
    print(f"\ntoken quota 2 entries over two namespaces: third {refused.status_code}; after delete 201")

    # one token creates at most 5 namespaces (XLA_CACHE_MAX_NAMESPACES_PER_TOKEN), by registering or storing
    maker = connect("maker")
    created = [maker.http.put(f"/v1/namespaces/made{i}", json={}).status_code for i in range(4)]
    assert created == [201] * 4 and maker.put("made4", "k", _body("k", 10)).status_code == 201
    sixth = maker.http.put("/v1/namespaces/made5", json={})
    assert (sixth.status_code, sixth.json()["error"]) == (507, "quota_exceeded")
    assert maker.put("made6", "k", _body("k", 10)).status_code == 507
    assert maker.bulk("made7", [("k", _body("k", 10))]).status_code == 507
    assert maker.http.get("/v1/namespaces/made5").status_code == 404
    assert maker.http.put("/v1/namespaces/made0", json={"labels": {"a": "b"}}).status_code == 200
    assert maker.put("made1", "k", _body("k", 10)).status_code == 201  # its own namespaces still take entries
    print(f"namespaces per token capped at 5: the sixth's registration {sixth.status_code}")


def test_stats_page_through_hundreds_of_namespaces(tmp_path: Path, server_env: dict[str, str]) -> None:
    """/admin/stats and /dashboard/data give every namespace once across small pages, largest first, with
    totals over all of them; the default page is bounded (the probe's 10,000 namespaces made 3.0 MB)."""
    with run_server(tmp_path, server_env) as server, httpx.Client(base_url=server.url, timeout=30) as http:
        for i in range(300):
            assert http.put(f"/v1/namespaces/ns{i:03d}", json={}).status_code == 201
        for i in (7, 8, 250):  # three with entries, of different sizes: they lead the order
            data = _body(f"n{i}", 100 + i)
            assert put(http, f"ns{i:03d}", "k", data).status_code == 201
        first = http.get("/admin/stats")
        assert first.status_code == 200 and len(first.json()["namespaces"]) == 100  # the default page
        everything = http.get("/admin/stats", params={"limit": 10_000})  # one page of all, as before paging
        assert len(everything.json()["namespaces"]) == 300 and everything.json()["next_after"] is None
        for path in ("/admin/stats", "/dashboard/data"):
            seen: list[str] = []
            after: str | None = None
            pages = 0
            while True:
                params: dict[str, str | int] = {"limit": 37, **({"after": after} if after else {})}
                body = http.get(path, params=params).json()
                assert body["namespace_count"] == 300 and body["totals"]["entries"] == 3
                seen += [ns["namespace"] for ns in body["namespaces"]]
                pages += 1
                after = body["next_after"]
                if after is None:
                    break
            assert pages == 9 and len(seen) == len(set(seen)) == 300
            assert seen[:3] == ["ns250", "ns008", "ns007"]  # most bytes first, then by name
            assert seen[3:] == sorted(seen[3:])
        for cursor in ("nonsense", "9223372036854775808:ns001", "-1:ns001", "12:", "\u0661:ns001"):
            assert http.get("/admin/stats", params={"after": cursor}).status_code == 400, cursor
        assert http.get("/admin/stats", params={"limit": 0}).status_code == 400
        print(
            f"\n300 namespaces: 9 pages of 37, none twice; default page (100): {len(first.content)} bytes, "
            f"all 300 in one answer: {len(everything.content)} bytes"
        )
