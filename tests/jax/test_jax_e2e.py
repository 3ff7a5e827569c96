"""JAX jobs on the same cache: job 1 compiles and uploads, job 2 warms another directory and compiles nothing.

Real processes: an ``xla-cache-server`` on its embedded defaults and JAX 0.10 jobs on the CPU, counted with
JAX's own monitoring events (``/jax/compilation_cache/...``).
"""

from __future__ import annotations

from pathlib import Path

import httpx

from tests.jax.conftest import run_jax_job
from tests.support.server import LiveServer

SHAPES = 32


def test_a_job_warmed_in_another_directory_hits_every_shape(live_server: LiveServer, tmp_path: Path) -> None:
    first, _ = run_jax_job(
        ["--server", live_server.url, "--cache-dir", str(tmp_path / "A"), "--shapes", str(SHAPES)]
    )
    namespace = first["warm"]["namespace"]
    assert namespace.startswith("cpu-jax0.10.")
    assert first["warm"]["framework"] == "jax" and first["warm"]["initialized"]
    assert first["misses"] == SHAPES and first["hits"] == 0
    entries = [name for name in first["entries"] if name.endswith("-cache")]
    assert len(entries) == SHAPES
    assert first["uploaded"]["uploaded"] == SHAPES and first["uploaded"]["errors"] == []

    second, log = run_jax_job(
        ["--server", live_server.url, "--cache-dir", str(tmp_path / "B"), "--shapes", str(SHAPES)]
    )
    assert second["warm"]["namespace"] == namespace
    assert (
        second["warm"]["cache_dir"] != first["warm"]["cache_dir"]
    )  # another path: the keys do not contain it
    assert second["warm"]["downloaded_entries"] == SHAPES
    assert second["hits"] == SHAPES and second["misses"] == 0  # JAX's own events: nothing compiled
    assert second["digest"] == first["digest"]
    assert second["uploaded"]["uploaded"] == 0  # what it downloaded is not sent back
    assert "WARNING xla_cache" not in log

    with httpx.Client(base_url=live_server.url) as http:
        stored = http.get(f"/v1/namespaces/{namespace}").json()
        assert stored["entries"] == SHAPES and stored["fingerprint"]["framework"] == "jax"
        stats = http.get("/admin/stats", params={"namespace": namespace}).json()
    (row,) = stats["namespaces"]
    assert row["framework"] == "jax" and row["hits"] == SHAPES


def test_a_truncated_local_entry_is_replaced_not_kept(live_server: LiveServer, tmp_path: Path) -> None:
    """JAX never replaces an entry it cannot load: the client removes it, so JAX compiles it once more."""
    base = tmp_path / "C"
    first, _ = run_jax_job(["--cache-dir", str(base), "--shapes", "3"])  # local only, no server
    directory = Path(first["warm"]["cache_dir"])
    victim = sorted(directory.glob("*-cache"))[0]
    victim.write_bytes(victim.read_bytes()[:40])
    second, log = run_jax_job(["--cache-dir", str(base), "--shapes", "3"])
    assert second["warm"]["removed_entries"] == 1 and "removing" in log
    assert second["hits"] == 2 and second["misses"] == 1 and second["digest"] == first["digest"]
    third, _ = run_jax_job(["--cache-dir", str(base), "--shapes", "3"])
    assert third["hits"] == 3 and third["misses"] == 0  # JAX wrote it again, whole


def test_without_the_client_jax_keys_contain_the_directory(tmp_path: Path) -> None:
    """Why warm() changes JAX's configuration: entries copied as they are into another directory all miss."""
    first, _ = run_jax_job(["--no-warm", "--cache-dir", str(tmp_path / "D"), "--shapes", "3"])
    (tmp_path / "E").mkdir()
    for name in first["entries"]:
        (tmp_path / "E" / name).write_bytes((tmp_path / "D" / name).read_bytes())
    second, _ = run_jax_job(["--no-warm", "--cache-dir", str(tmp_path / "E"), "--shapes", "3"])
    assert second["hits"] == 0 and second["misses"] == 3
