"""``xla-cache push --import DIR --namespace NS`` and ``xla-cache warm --namespace NS``: a team's existing
torch_xla or JAX cache directory goes to the server and comes back, with neither framework imported."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from cache_protocol import SHA256_HEADER
from tests.support.server import LiveServer, run_server
from tests.support.wait import wait_until

HIDE_FRAMEWORKS = """
import builtins
_real_import = builtins.__import__
def _no_frameworks(name, *args, **kwargs):
    if name.split(".")[0] in ("torch_xla", "jax", "torch"):
        raise ImportError(f"{name} is hidden in this test")
    return _real_import(name, *args, **kwargs)
builtins.__import__ = _no_frameworks
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    with run_server(tmp_path_factory.mktemp("server")) as live:
        yield live


def xla_cache(*args: str, hide: Path) -> subprocess.CompletedProcess[str]:
    """The CLI in a process where importing torch, torch_xla or jax raises."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("XLA_CACHE_")}
    env["PYTHONPATH"] = os.pathsep.join([str(hide), env.get("PYTHONPATH", "")])
    command = [
        sys.executable,
        "-c",
        "import sys; from xla_cache.cli import main; sys.exit(main(sys.argv[1:]))",
    ]
    return subprocess.run([*command, *args], env=env, capture_output=True, text=True, timeout=120)


@pytest.fixture
def hide(tmp_path: Path) -> Path:
    folder = tmp_path / "hide"
    folder.mkdir()
    (folder / "sitecustomize.py").write_text(HIDE_FRAMEWORKS)
    return folder


def test_a_plain_torch_xla_directory_is_imported_and_warmed_back(
    server: LiveServer, tmp_path: Path, hide: Path
) -> None:
    plain = tmp_path / "torch_xla_cache"  # what torch_xla.runtime.initialize_cache(dir) leaves: files by hash
    plain.mkdir()
    entries = {str(7 * 10**30 + i): os.urandom(3000 + i) for i in range(25)}
    for key, data in entries.items():
        (plain / key).write_bytes(data)
    (plain / ".lock").write_bytes(b"")  # not an entry
    (plain / "subdir").mkdir()  # nor this

    pushed = xla_cache(
        "push",
        "--import",
        str(plain),
        "--namespace",
        "team-a",
        "--server",
        server.url,
        "--json",
        "--no-progress",
        hide=hide,
    )
    assert pushed.returncode == 0, pushed.stderr
    row = json.loads(pushed.stdout)["namespaces"][0]
    assert (row["namespace"], row["framework"], row["uploaded"], row["entries"]) == (
        "team-a",
        "torch_xla",
        25,
        25,
    )
    assert "is hidden" not in pushed.stderr
    again = xla_cache(
        "push",
        "--import",
        str(plain),
        "--namespace",
        "team-a",
        "--server",
        server.url,
        "--json",
        "--no-progress",
        hide=hide,
    )
    assert json.loads(again.stdout)["namespaces"][0]["already_present"] == 25

    cache_dir = tmp_path / "cache"
    warmed = xla_cache(
        "warm",
        "--namespace",
        "team-a",
        "--server",
        server.url,
        "--cache-dir",
        str(cache_dir),
        "--json",
        "--no-progress",
        hide=hide,
    )
    assert warmed.returncode == 0, warmed.stderr
    report = json.loads(warmed.stdout)
    assert (report["namespace"], report["downloaded_entries"], report["errors"]) == ("team-a", 25, [])
    for key, data in entries.items():
        assert (cache_dir / "team-a" / key).read_bytes() == data
    assert not (cache_dir / "team-a" / ".fingerprint.json").exists()  # the namespace has no fingerprint
    assert httpx.get(f"{server.url}/v1/namespaces/team-a").json()["fingerprint"] == {}  # nothing registered


def test_a_jax_directory_is_recognized_by_its_names(server: LiveServer, tmp_path: Path, hide: Path) -> None:
    plain = tmp_path / "jax_cache"
    plain.mkdir()
    for i in range(3):
        name = f"jit_step-{i:064x}-cache"
        (plain / name).write_bytes(b"x" * 100)  # not a loadable JAX entry: skipped, and said so
        (plain / f"{name}-atime").write_bytes(b"\0" * 8)
    pushed = xla_cache(
        "push",
        "--import",
        str(plain),
        "--namespace",
        "jax-team",
        "--server",
        server.url,
        "--json",
        "--no-progress",
        hide=hide,
    )
    row = json.loads(pushed.stdout)["namespaces"][0]
    assert (row["framework"], row["entries"], row["unloadable_skipped"], row["uploaded"]) == ("jax", 0, 3, 0)


def test_warm_of_an_unknown_namespace_says_so(server: LiveServer, tmp_path: Path, hide: Path) -> None:
    done = xla_cache(
        "warm", "--namespace", "nobody-here", "--server", server.url, "--cache-dir", str(tmp_path), hide=hide
    )
    assert done.returncode == 2 and "404" in done.stderr


def test_warm_follow_beside_a_job_fetches_and_uploads_until_stopped(
    server: LiveServer, tmp_path: Path, hide: Path
) -> None:
    namespace = "side-car"
    seed = b"stored before"
    put = {SHA256_HEADER: hashlib.sha256(seed).hexdigest()}
    assert httpx.put(
        f"{server.url}/v1/namespaces/{namespace}/entries/1", content=seed, headers=put
    ).is_success
    env = {k: v for k, v in os.environ.items() if not k.startswith("XLA_CACHE_")}
    env["PYTHONPATH"] = os.pathsep.join([str(hide), env.get("PYTHONPATH", "")])
    command = [
        sys.executable,
        "-c",
        "import sys; from xla_cache.cli import main; sys.exit(main(sys.argv[1:]))",
    ]
    args = [
        "warm",
        "--namespace",
        namespace,
        "--follow",
        "--server",
        server.url,
        "--cache-dir",
        str(tmp_path),
        "--no-progress",
        "--json",
    ]
    directory = tmp_path / namespace
    with subprocess.Popen(
        [*command, *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as side:
        try:
            wait_until(lambda: (directory / "1").exists(), timeout=30)
            other = os.urandom(2000)  # another job uploads: it arrives here
            headers = {SHA256_HEADER: hashlib.sha256(other).hexdigest()}
            assert httpx.put(
                f"{server.url}/v1/namespaces/{namespace}/entries/2", content=other, headers=headers
            ).is_success
            wait_until(lambda: (directory / "2").exists(), timeout=15)
            assert (directory / "2").read_bytes() == other
            (directory / "3").write_bytes(b"the job compiled this")  # this job compiles: it goes up
            wait_until(
                lambda: httpx.get(f"{server.url}/v1/namespaces/{namespace}/entries/3").status_code == 200,
                timeout=15,
            )
        finally:
            side.send_signal(signal.SIGTERM)
        out, err = side.communicate(timeout=20)
    assert side.returncode == 0, err
    summary = json.loads(out[out.rindex("{\n") :] if "{\n" in out else out.strip().splitlines()[-1])
    assert summary["delivered"] == 1 and summary["uploaded"] == 1


COMMAND_IN_PROCESS = """
import json, sys, time
from xla_cache.cli import main
started = time.monotonic()
code = main(sys.argv[1:])
loaded = sorted({m.split(".")[0] for m in sys.modules} & {"torch", "torch_xla", "jax", "jaxlib", "torchax"})
print(json.dumps({"code": code, "loaded": loaded, "seconds": time.monotonic() - started}), file=sys.stderr)
"""

WARM_GIVEN_FINGERPRINT = """
import sys
import xla_cache
fingerprint = {"schema": 1, "framework": "torch_xla", "torch_xla_version": "2.7.0", "device_type": "CPU"}
report = xla_cache.warm(sys.argv[1], sys.argv[2], initialize=False, upload=False, fingerprint=fingerprint)
print(report.namespace)
"""


def test_stats_graphs_and_runs_take_the_last_warms_namespace_and_start_no_framework(
    server: LiveServer, tmp_path: Path, hide: Path
) -> None:
    """Commands that only ask the server answer without importing torch, torch_xla or jax; where they
    want this host's namespace they take the one the last warm recorded, and say so."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("XLA_CACHE_")}
    cache_dir = tmp_path / "cache"
    env["XLA_CACHE_DIR"] = str(cache_dir)

    def command(*args: str) -> tuple[subprocess.CompletedProcess[str], dict[str, object]]:
        done = subprocess.run(
            [sys.executable, "-c", COMMAND_IN_PROCESS, *args, "--server", server.url],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        return done, json.loads(done.stderr.strip().splitlines()[-1])

    graphs, result = command("graphs")
    assert result["code"] == 2 and result["loaded"] == []
    assert f"no warm has recorded this host's namespace in {cache_dir}" in graphs.stderr
    assert "--runtime" in graphs.stderr

    warmed = subprocess.run(
        [sys.executable, "-c", WARM_GIVEN_FINGERPRINT, server.url, str(cache_dir)],
        env={**env, "PYTHONPATH": os.pathsep.join([str(hide), env.get("PYTHONPATH", "")])},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    namespace = warmed.stdout.strip()
    seconds = []
    for args in (["stats"], ["graphs"], ["runs"]):
        done, result = command(*args)
        assert result["code"] == 0, done.stderr
        assert result["loaded"] == [], args
        seconds.append(float(str(result["seconds"])))
        if args != ["runs"]:
            assert f"namespace {namespace} (the last warm here: torch_xla" in " ".join(done.stdout.split())
    print(f"[measured] stats, graphs, runs in process: {', '.join(f'{s:.3f}' for s in seconds)} s")
