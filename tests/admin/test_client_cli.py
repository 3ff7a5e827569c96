"""``xla-cache stats`` and ``xla-cache evict`` against a real server with auth on."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from cache_protocol import SHA256_HEADER
from tests.support.api import sha
from tests.support.cli import run_cli
from tests.support.real_entries import real_entries
from tests.support.server import LiveServer, run_server, server_cli
from tests.support.wait import QUIET_POLL, wait_until
from xla_cache.cli import main as cli_main
from xla_cache.cli.admin_text import parse_duration, parse_size
from xla_cache.http.admin_api import AdminApi
from xla_cache.http.deadline import Deadline

KIB = 1024


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LiveServer, dict[str, str]]]:
    data_dir = tmp_path_factory.mktemp("cli")
    tokens = {}
    for role in ("read", "admin", "write"):
        made = server_cli(data_dir, "token", "create", "--name", f"cli-{role}", "--role", role)
        assert made.returncode == 0, made.stderr
        tokens[role] = made.stdout.strip()
    with run_server(data_dir, {"XLA_CACHE_AUTH": "on"}) as srv:
        admin = {"Authorization": f"Bearer {tokens['admin']}"}
        with httpx.Client(base_url=srv.url, headers=admin, timeout=30) as http:
            for key, data in real_entries().items():
                headers = {SHA256_HEADER: sha(data), "X-Compile-Time-Ms": "90000"}
                assert http.put(
                    f"/v1/namespaces/cpu-job/entries/{key}", content=data, headers=headers
                ).is_success
                assert http.get(f"/v1/namespaces/cpu-job/entries/{key}").status_code == 200
            for i in range(10):
                data = bytes([i]) * KIB
                url = f"/v1/namespaces/small/entries/s{i}"
                assert http.put(url, content=data, headers={SHA256_HEADER: sha(data)}).status_code == 201
            # The entries are parsed in the background: wait until all the real ones are (the first
            # graph can show up before its other variants are parsed).
            wait_until(
                lambda: (
                    sum(g["entries"] for g in http.get("/admin/stats").json()["top_graphs"])
                    >= len(real_entries())
                ),
                timeout=30,
                interval=QUIET_POLL,
                message="the entries were not parsed in time",
            )
        yield srv, tokens


def test_stats_is_readable_and_json(
    server: tuple[LiveServer, dict[str, str]], capsys: pytest.CaptureFixture[str]
) -> None:
    srv, tokens = server
    code, out, _ = run_cli(["stats", "--all", "--server", srv.url, "--token", tokens["admin"]], capsys)
    assert code == 0
    assert "14 entries" in out  # 4 real entries and 10 small ones
    assert "no run reports" in out
    assert "lookups      4 found, 0 not found (manifests and GETs the server answered; not the jobs'" in out
    assert "6.0 min" not in out  # 4 lookups of entries that cost 90 s: downloads, never counted as saved
    assert "cpu-job" in out and "small" in out
    # the costliest graph first (3 compiles of 90 s), its variants a column (issue 46, item 2)
    costly = "   270.0 s      3 compiles     3 variants  SyncTensorsGraph.15  [cpu-job]"
    cheap = "    90.0 s      1 compiles     1 variant   SyncTensorsGraph.12  [cpu-job]"
    assert costly in out and cheap in out and out.index(costly) < out.index(cheap)
    assert "e.g. (f32[16,3], f32[2,16]) -> (f32[3])" in out

    # a job reports what it compiled: the hit rate is the jobs', the server's lookups are shown as such
    run_report = {
        "run_id": "run-stats-0001",
        "namespace": "cpu-job",
        "framework": "torch_xla",
        "host": "h",
        "process_index": 0,
        "started_at": time.time() - 30,
        "hits": 1,
        "misses": 3,
        "compile_seconds": 6.0,
    }
    headers = {"Authorization": f"Bearer {tokens['admin']}"}
    assert httpx.post(f"{srv.url}/v1/runs", json=run_report, headers=headers, timeout=30).status_code == 200
    code, out, _ = run_cli(["stats", "--all", "--server", srv.url, "--token", tokens["admin"]], capsys)
    assert "what jobs reported (runs started in the last 30 days: 1)" in out
    assert "hit rate     25.0 %  (1 loaded from the cache, 3 compiled" in out
    assert "lookups      4 found" in out

    code, out, _ = run_cli(
        ["stats", "--all", "--json", "--server", srv.url, "--token", tokens["admin"]], capsys
    )
    body = json.loads(out)
    assert code == 0 and body["admin"]["totals"]["entries"] == 14
    assert body["admin"]["jobs"] == {
        "runs": 1,
        "hits": 1,
        "compiles": 3,
        "hit_rate": 0.25,
        "compile_seconds": 6.0,
        "saved_seconds": body["admin"]["jobs"]["saved_seconds"],
    }
    assert body["admin"]["top_graphs"][0]["variants"] == 3

    code, out, _ = run_cli(
        ["stats", "--namespace", "small", "--server", srv.url, "--token", tokens["admin"]], capsys
    )
    assert code == 0 and "namespace  small" in out and "stored       10 entries" in out


def test_stats_pages_through_namespaces(
    server: tuple[LiveServer, dict[str, str]], capsys: pytest.CaptureFixture[str]
) -> None:
    srv, tokens = server
    common = ["--server", srv.url, "--token", tokens["admin"]]
    code, out, _ = run_cli(["stats", "--all", "--limit", "1", *common], capsys)
    assert code == 0 and "14 entries" in out  # the totals are every namespace's
    assert "(1 of 2 namespaces; the next page: xla-cache stats --all --after " in out
    cursor = out.split("--after ", 1)[1].split(")", 1)[0]
    code, out, _ = run_cli(["stats", "--all", "--limit", "1", "--after", cursor, "--json", *common], capsys)
    page = json.loads(out)["admin"]
    assert code == 0 and [n["namespace"] for n in page["namespaces"]] == ["small"]  # cpu-job came first
    assert page["next_after"] is None and page["namespace_count"] == 2


def test_quotas_are_set_and_listed(
    server: tuple[LiveServer, dict[str, str]], capsys: pytest.CaptureFixture[str]
) -> None:
    srv, tokens = server
    common = ["--server", srv.url, "--token", tokens["admin"]]
    code, out, _ = run_cli(
        ["quota", "--namespace", "small", "--max-entries", "10", "--max-bytes", "1M", *common], capsys
    )
    assert code == 0 and "namespace  small" in out and out.rstrip().endswith("10.0 KiB    1.0 MiB")
    code, out, _ = run_cli(
        ["quota", "--for-token", "cli-write", "--max-entries", "5", "--json", *common], capsys
    )
    assert code == 0 and json.loads(out)["quotas"][0]["max_entries"] == 5
    code, out, _ = run_cli(["quota", "--json", *common], capsys)
    listed = {(q["kind"], q["subject"]): (q["entries"], q["max_entries"]) for q in json.loads(out)["quotas"]}
    assert listed[("namespace", "small")] == (10, 10)  # it holds 10 entries: full
    code, _, err = run_cli(["quota", "--for-token", "nobody", "--max-entries", "1", *common], capsys)
    assert code != 0 and "nobody" in err
    for subject in (["--namespace", "small"], ["--for-token", "cli-write"]):
        assert run_cli(["quota", *subject, "--clear", *common], capsys)[0] == 0
    code, out, _ = run_cli(["quota", *common], capsys)
    assert code == 0 and "no quotas" in out


def test_stats_with_a_read_token_says_why_totals_are_missing(
    server: tuple[LiveServer, dict[str, str]], capsys: pytest.CaptureFixture[str]
) -> None:
    srv, tokens = server
    code, out, _ = run_cli(["stats", "--all", "--server", srv.url, "--token", tokens["read"]], capsys)
    assert code == 1
    assert "server totals unavailable" in out and "403" in out and "admin role" in out


def test_a_missing_or_refused_token_says_where_a_token_comes_from(
    server: tuple[LiveServer, dict[str, str]], capsys: pytest.CaptureFixture[str]
) -> None:
    srv, _ = server
    code, _, err = run_cli(["runs", "--server", srv.url], capsys)
    assert code == 2 and "HTTP 401" in err
    assert "no token was given; pass --token, or set XLA_CACHE_TOKEN or token in" in err
    code, _, err = run_cli(["runs", "--server", srv.url, "--token", "xlc_wrong"], capsys)
    assert code == 2 and "the token came from --token" in err


def test_a_file_token_for_another_server_is_not_sent_and_the_refusal_says_so(
    server: tuple[LiveServer, dict[str, str]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The file holds a token for the team's server; this server (auth on), named by --server, is another:
    it gets no token and answers 401 (not 403, as to that write token), and the hint says whose token the
    file holds. A table for this server gives it its own (admin) token."""
    srv, tokens = server
    config = tmp_path / "config.toml"
    config.write_text(f'server = "http://cache-vm:8080"\ntoken = "{tokens["write"]}"\n')
    config.chmod(0o600)
    monkeypatch.setenv("XLA_CACHE_CONFIG", str(config))
    code, _, err = run_cli(["runs", "--server", srv.url], capsys)
    assert code == 2 and "HTTP 401" in err
    assert "holds a token for http://cache-vm:8080 only" in err and f'[servers."{srv.url}"]' in err
    config.write_text(
        f'server = "http://cache-vm:8080"\ntoken = "{tokens["write"]}"\n'
        f'[servers."{srv.url}/"]\ntoken = "{tokens["admin"]}"\n'
    )
    code, _, err = run_cli(["runs", "--server", srv.url, "--json"], capsys)
    assert code == 0, err


def test_evict_dry_run_then_for_real(
    server: tuple[LiveServer, dict[str, str]], capsys: pytest.CaptureFixture[str]
) -> None:
    srv, tokens = server
    common = ["--server", srv.url, "--token", tokens["admin"], "--namespace", "small"]
    code, out, _ = run_cli(["evict", "--max-total-bytes", "4KiB", "--dry-run", *common], capsys)
    assert code == 0
    assert "dry run: would evict 6 entries, freeing 6.0 KiB (nothing was removed)" in out
    assert out.index("small/s0 ") < out.index("small/s5 ")  # least recently used first
    assert "small/s6" not in out

    code, out, _ = run_cli(["evict", "--older-than", "1h", "--json", *common], capsys)
    assert code == 0 and json.loads(out)["evicted"] == 0  # nothing is that old

    code, out, _ = run_cli(["evict", "--max-total-bytes", "4K", *common], capsys)
    assert code == 0 and out.strip() == "evicted 6 entries, freed 6.0 KiB"
    code, out, _ = run_cli(
        ["stats", "--namespace", "small", "--json", "--server", srv.url, "--token", tokens["admin"]], capsys
    )
    assert json.loads(out)["namespace"]["entries"] == 4


def test_evict_refuses_bad_input_and_weak_tokens(
    server: tuple[LiveServer, dict[str, str]], capsys: pytest.CaptureFixture[str]
) -> None:
    srv, tokens = server
    code, _, err = run_cli(
        ["evict", "--max-total-bytes", "lots", "--server", srv.url, "--token", tokens["admin"]], capsys
    )
    assert code == 2 and "not a size" in err
    code, _, err = run_cli(
        ["evict", "--max-total-bytes", "1G", "--server", srv.url, "--token", tokens["read"]], capsys
    )
    assert code == 2 and "403" in err


def test_tokens_show_what_each_stored_and_purge_token_removes_it(
    server: tuple[LiveServer, dict[str, str]],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    srv, tokens = server
    writer = {"Authorization": f"Bearer {tokens['write']}"}
    with httpx.Client(base_url=srv.url, headers=writer, timeout=30) as http:
        for i in range(3):
            data = b"leaked %d" % i
            url = f"/v1/namespaces/leak/entries/x{i}"
            assert http.put(url, content=data, headers={SHA256_HEADER: sha(data)}).status_code == 201
    admin = ["--server", srv.url, "--token", tokens["admin"]]
    code, out, _ = run_cli(["tokens", *admin], capsys)
    assert code == 0
    line = next(row for row in out.splitlines() if "cli-write" in row)
    assert line.split()[2:] == ["write", "any", "active", "3", "24", "B"], line

    code, out, _ = run_cli(["purge-token", "cli-write", "--dry-run", *admin], capsys)
    assert code == 0 and "would remove 3 entries" in out and "leak/x0" in out
    monkeypatch.setattr("xla_cache.cli.common.REMOVAL_ROUND", 2)  # calls of 2 entries until none remain
    code, out, err = run_cli(["purge-token", "cli-write", "--json", *admin], capsys)
    answer = json.loads(out)
    assert code == 0 and answer["removed"]["evicted"] == 3 and answer["removed"]["remaining"] == 0
    assert len(answer["revoked"]) == 1  # by the first call; the second finds it revoked
    assert err.splitlines() == ["removed 2 entries, 1 remaining", "removed 3 entries, 0 remaining"]
    with httpx.Client(base_url=srv.url, timeout=30) as http:
        assert http.get("/v1/namespaces/leak/entries/x0", headers=writer).status_code == 401
        assert (
            http.get(
                "/v1/namespaces/leak/entries/x0", headers={"Authorization": f"Bearer {tokens['admin']}"}
            ).status_code
            == 404
        )
    code, out, _ = run_cli(["tokens", *admin], capsys)
    assert "revoked" in next(row for row in out.splitlines() if "cli-write" in row)
    code, out, _ = run_cli(["token-metrics", "cli-read", "off", *admin], capsys)
    assert code == 0 and "its run reports are stored and add nothing to the run metrics" in out
    code, out, _ = run_cli(["tokens", *admin], capsys)
    assert "active, runs uncounted" in next(row for row in out.splitlines() if "cli-read" in row)
    code, out, _ = run_cli(["token-metrics", "cli-read", "on", "--json", *admin], capsys)
    assert code == 0 and json.loads(out)["tokens"][0]["metrics_off"] is False
    code, _, err = run_cli(["token-metrics", "cli-write", "off", *admin], capsys)
    assert code == 2 and "404" in err  # revoked above: no active token has the name
    code, _, err = run_cli(["purge-token", "nobody", *admin], capsys)
    assert code == 2 and "404" in err


def test_purge_token_rounds_leave_a_new_token_of_the_same_name_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The operator revokes a leaked ``ci`` token and makes a new ``ci`` while the purge runs: the later
    rounds purge the ids the first one matched, so the new token keeps working and keeps what it stored."""
    data_dir = tmp_path / "data"
    made = {
        name: server_cli(data_dir, "token", "create", "--name", name, "--role", role).stdout.strip()
        for name, role in (("ops", "admin"), ("ci", "write"))
    }
    with run_server(data_dir, {"XLA_CACHE_AUTH": "on"}) as srv:

        def store(token: str, key: str) -> None:
            data = key.encode()
            headers = {SHA256_HEADER: sha(data), "Authorization": f"Bearer {token}"}
            assert (
                httpx.put(
                    f"{srv.url}/v1/namespaces/ci-ns/entries/{key}", content=data, headers=headers, timeout=30
                ).status_code
                == 201
            )

        for i in range(3):
            store(made["ci"], f"leaked{i}")
        replaced: dict[str, str] = {}
        purge = AdminApi.admin_purge_token

        def rotating(api: AdminApi, token: str, body: dict[str, Any], deadline: Deadline) -> dict[str, Any]:
            answer = purge(api, token, body, deadline)
            if not replaced:  # between the first round and the next: the new ci, and its first entry
                created = server_cli(data_dir, "token", "create", "--name", "ci", "--role", "write")
                replaced["ci"] = created.stdout.strip()
                store(replaced["ci"], "fresh")
            return answer

        monkeypatch.setattr(AdminApi, "admin_purge_token", rotating)
        monkeypatch.setattr("xla_cache.cli.common.REMOVAL_ROUND", 2)
        code, out, err = run_cli(["purge-token", "ci", "--server", srv.url, "--token", made["ops"]], capsys)
        assert code == 0, err
        assert "removed 3 entries" in out and "remain" not in out
        assert err.splitlines() == ["removed 2 entries, 1 remaining", "removed 3 entries, 0 remaining"]
        fresh = httpx.get(
            f"{srv.url}/v1/namespaces/ci-ns/entries/fresh",
            headers={"Authorization": f"Bearer {replaced['ci']}"},
            timeout=30,
        )
        assert fresh.status_code == 200 and fresh.content == b"fresh"  # neither revoked nor purged
        assert (
            httpx.get(
                f"{srv.url}/v1/namespaces/ci-ns/entries/leaked2",
                headers={"Authorization": f"Bearer {replaced['ci']}"},
                timeout=30,
            ).status_code
            == 404
        )


def test_delete_namespace_removes_it_in_rounds_and_says_what_it_held(
    server: tuple[LiveServer, dict[str, str]],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    srv, tokens = server
    admin = ["--server", srv.url, "--token", tokens["admin"]]
    with httpx.Client(base_url=srv.url, headers={"Authorization": f"Bearer {tokens['admin']}"}) as http:
        for i in range(5):
            data = b"doomed %d" % i
            url = f"/v1/namespaces/doomed/entries/d{i}"
            assert http.put(url, content=data, headers={SHA256_HEADER: sha(data)}).status_code == 201
        code, out, _ = run_cli(["delete-namespace", "doomed", "--dry-run", *admin], capsys)
        assert (code, out.strip()) == (
            0,
            "dry run: would delete namespace doomed with 5 entries, 40 B (nothing was removed)",
        )
        assert http.get("/v1/namespaces/doomed/entries/d0").status_code == 200
        monkeypatch.setattr("xla_cache.cli.common.REMOVAL_ROUND", 2)
        code, out, err = run_cli(["delete-namespace", "doomed", *admin], capsys)
        assert (code, out.strip()) == (0, "deleted namespace doomed: 5 entries, freed 40 B")
        assert err.splitlines() == [
            "removed 2 entries, 3 remaining",
            "removed 4 entries, 1 remaining",
            "removed 5 entries, 0 remaining",
        ]
        assert http.get("/v1/namespaces/doomed").status_code == 404
    code, _, err = run_cli(["delete-namespace", "doomed", *admin], capsys)
    assert code == 2 and "404" in err
    code, _, err = run_cli(
        ["delete-namespace", "doomed", "--server", srv.url, "--token", tokens["read"]], capsys
    )
    assert code == 2 and "403" in err
    with pytest.raises(SystemExit) as refused:
        run_cli(["delete-namespace", "bad/name", *admin], capsys)
    assert refused.value.code == 2 and "contains a slash" in capsys.readouterr().err


def test_sizes_and_durations() -> None:
    assert parse_size("1234") == 1234
    assert parse_size("500M") == 500 * 1024**2
    assert parse_size("10GiB") == 10 * 1024**3
    assert parse_size("1.5 t") == int(1.5 * 1024**4)
    assert parse_duration("90") == 90 and parse_duration("30m") == 1800
    assert (
        parse_duration("12h") == 43200 and parse_duration("7d") == 604800 and parse_duration("2w") == 1209600
    )
    for bad in ("", "ten", "5x", "-1"):
        with pytest.raises(ValueError):
            parse_size(bad)
        with pytest.raises(ValueError):
            parse_duration(bad)


def test_help_mentions_both(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli_main(["--help"])
    out = capsys.readouterr().out
    assert "stats" in out and "evict" in out
