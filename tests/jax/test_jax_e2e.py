"""JAX jobs on the same cache: job 1 compiles and uploads, job 2 warms another directory and compiles nothing.

Real processes: an ``xla-cache-server`` on its embedded defaults and JAX 0.10 jobs on the CPU, counted with
JAX's own monitoring events (``/jax/compilation_cache/...``).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import httpx

from cache_protocol.signing import Signer
from tests.support.jax_jobs import TORCHAX_JOB, run_jax_job
from tests.support.server import LiveServer
from tests.support.wait import QUIET_POLL, wait_until

SHAPES = 32


def test_a_job_warmed_in_another_directory_hits_every_shape(live_server: LiveServer, tmp_path: Path) -> None:
    # The first job signs what it uploads; the second verifies every entry against that key and loads all.
    signer = Signer.generate()
    first, _ = run_jax_job(
        ["--server", live_server.url, "--cache-dir", str(tmp_path / "A"), "--shapes", str(SHAPES)],
        env={"XLA_CACHE_SIGNING_KEY": signer.private_text()},
    )
    namespace = first["warm"]["namespace"]
    assert namespace.startswith("cpu-jax0.10.")
    assert first["warm"]["framework"] == "jax" and first["warm"]["initialized"]
    assert first["misses"] == SHAPES and first["hits"] == 0
    entries = [name for name in first["entries"] if name.endswith("-cache")]
    assert len(entries) == SHAPES
    assert first["uploaded"]["uploaded"] == SHAPES and first["uploaded"]["errors"] == []

    second, log = run_jax_job(
        ["--server", live_server.url, "--cache-dir", str(tmp_path / "B"), "--shapes", str(SHAPES)],
        env={"XLA_CACHE_TRUSTED_KEYS": signer.public_text()},
    )
    assert second["warm"]["namespace"] == namespace
    assert second["warm"]["unverified_entries"] == 0
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

    def graphs() -> list[dict[str, object]]:  # entries are parsed in the background after upload
        with httpx.Client(base_url=live_server.url) as http:
            found = http.get("/admin/stats", params={"namespace": namespace}).json()["top_graphs"]
        return [g for g in found if g["entries"] == SHAPES]

    (graph,) = wait_until(graphs, interval=QUIET_POLL, message="the JAX entries were not parsed")
    assert graph["module"] == "jit_step" and graph["variants"] == SHAPES
    examples = graph["examples"]
    assert isinstance(examples, list) and examples
    assert all(re.fullmatch(r"\(f32\[(\d+),4\]\) -> f32\[\1\]", str(shape)) for shape in examples)


def test_a_truncated_local_entry_is_replaced_not_kept(live_server: LiveServer, tmp_path: Path) -> None:
    """JAX never replaces an entry it cannot load: the client removes it, so JAX compiles it once more."""
    base = tmp_path / "C"
    first, _ = run_jax_job(["--cache-dir", str(base), "--shapes", "3"])  # local only, no server
    directory = Path(first["warm"]["cache_dir"])
    victim = sorted(directory.glob("*-cache"))[0]
    victim.write_bytes(victim.read_bytes()[:40])
    an_hour_ago = time.time() - 3600
    os.utime(victim, (an_hour_ago, an_hour_ago))  # a crash leftover, not a file being written now
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


def test_a_torch_model_through_torchax_shares_the_jax_cache(live_server: LiveServer, tmp_path: Path) -> None:
    """PyTorch on JAX: warm() with framework auto picks JAX for a torchax job, and job 2 compiles nothing."""
    first, _ = run_jax_job(["--server", live_server.url, "--cache-dir", str(tmp_path / "A")], TORCHAX_JOB)
    assert first["warm"]["framework"] == "jax" and first["torch"].startswith("2.7")
    compiled = first["uploaded"]["uploaded"]  # the model's jit and torchax's eager-op jits
    assert compiled >= len({1, 2, 3, 5, 8}) and first["misses"] == compiled
    second, _ = run_jax_job(["--server", live_server.url, "--cache-dir", str(tmp_path / "B")], TORCHAX_JOB)
    # The namespace is the JAX runtime's: it also holds what other JAX jobs on this server compiled.
    assert second["warm"]["downloaded_entries"] >= compiled
    assert second["hits"] == compiled and second["misses"] == 0
    assert second["digest"] == first["digest"]


def test_warm_again_after_stop_and_too_late_elsewhere(tmp_path: Path) -> None:
    """A second warm of the same directory works (after xla_cache.stop()); another directory once JAX's cache
    is bound is a clear error, not a silent use of the old one."""
    script = (
        "import sys, xla_cache\n"
        "from xla_cache.errors import CacheAlreadyInitialized\n"
        "first = xla_cache.warm(None, sys.argv[1], framework='jax')\n"
        "xla_cache.stop()\n"
        "again = xla_cache.warm(None, sys.argv[1], framework='jax')\n"
        "assert again.initialized and again.cache_dir == first.cache_dir\n"
        "xla_cache.stop()\n"
        "try:\n"
        "    xla_cache.warm(None, sys.argv[2], framework='jax')\n"
        "except CacheAlreadyInitialized as exc:\n"
        "    print('TOO LATE:', exc)\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XLA_", "JAX_"))}
    env.update(JAX_PLATFORMS="cpu", PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "one"), str(tmp_path / "two")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "TOO LATE: JAX's persistent compilation cache is already bound to" in done.stdout


def test_a_job_with_one_more_xla_flag_is_told_which_namespace_is_nearest_and_why(
    live_server: LiveServer, tmp_path: Path
) -> None:
    """Job A compiles in its namespace; job B, the same job with one more XLA flag, gets a new namespace with
    nothing in it, and its warm report names the flag with both values."""
    flag = "--xla_cpu_enable_fast_math=true"
    first, _ = run_jax_job(["--server", live_server.url, "--cache-dir", str(tmp_path / "A"), "--shapes", "3"])
    # its 3 shapes are stored (uploaded now, or by an earlier test of this module's server)
    assert first["uploaded"]["errors"] == [] and first["hits"] + first["uploaded"]["uploaded"] == 3
    second, log = run_jax_job(
        ["--server", live_server.url, "--cache-dir", str(tmp_path / "B"), "--shapes", "1"],
        env={"XLA_FLAGS": flag},
    )
    warmed = second["warm"]
    assert warmed["namespace"] != first["warm"]["namespace"]
    assert warmed["manifest_entries"] == 0 and warmed["errors"] == []
    assert warmed["fingerprint"]["xla_flags"] == {"--xla_cpu_enable_fast_math": "true"}
    near = warmed["nearest"][0]
    assert near["namespace"] == first["warm"]["namespace"] and near["entries"] >= 3
    assert near["differences"] == [
        {"field": "XLA_FLAGS", "ours": flag, "theirs": None, "text": f"{flag} (theirs: unset)"}
    ]
    prefix, digest = first["warm"]["namespace"].rsplit("-", 1)
    line = next(line for line in log.splitlines() if line.startswith("namespace new (0 entries)"))
    assert line.startswith(f"namespace new (0 entries); nearest: {prefix}-{digest[:8]}… (")
    assert line.endswith(f" ago) differs in XLA_FLAGS: {flag} (theirs: unset)")
    print(line)  # docs/user-guide.md quotes it
