"""The client's configuration as a user meets it: the default server is where ``serve`` listens, a config
file holds server, token and cache directory, a flag beats the environment beats the file beats the
default, and ``xla-cache config`` says where each value came from."""

from __future__ import annotations

import json
import logging
import os
import subprocess
from pathlib import Path

import pytest

from cache_server.cli import build_parser as server_parser
from tests.support.cli import run_xla_cache
from tests.support.http_stub import Recorded, Reply, StubHttpServer, json_reply
from xla_cache.cli import main
from xla_cache.config import DEFAULT_SERVER, ClientConfig
from xla_cache.errors import ClientError
from xla_cache.http.api import CacheApi


def write_config(path: Path, text: str, mode: int = 0o600) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)
    return path


def test_the_default_server_is_where_serve_listens(tmp_path: Path) -> None:
    serve = server_parser().parse_args(["serve"])
    assert f"http://{serve.host}:{serve.port}" == DEFAULT_SERVER
    config = ClientConfig.resolve(env={"XDG_CONFIG_HOME": str(tmp_path)})
    assert (config.server, config.sources["server"]) == (DEFAULT_SERVER, "default")
    assert config.config_file == tmp_path / "xla-cache" / "config.toml"


def test_flag_beats_environment_beats_file_beats_default(tmp_path: Path) -> None:
    path = write_config(
        tmp_path / "xla-cache" / "config.toml",
        'server = "http://from-file:1"\ntoken = "file-token"\ncache_dir = "~/file-cache"\n',
    )
    env = {"XDG_CONFIG_HOME": str(tmp_path)}
    from_file = ClientConfig.resolve(env=env)
    assert (from_file.server, from_file.token) == ("http://from-file:1", "file-token")
    assert from_file.cache_dir == Path("~/file-cache").expanduser()
    assert from_file.sources["server"] == f"config file {path}"

    env["XLA_CACHE_SERVER"] = "http://from-env:2"
    from_env = ClientConfig.resolve(env=env)
    # The file's token belongs to the file's server: another one gets none (the tests below).
    assert (from_env.server, from_env.token) == ("http://from-env:2", None)
    assert from_env.sources == {**from_file.sources, "server": "XLA_CACHE_SERVER", "token": "default"}

    flagged = ClientConfig.resolve("http://flag:3", env=env, flags={"server": "--server"})
    assert (flagged.server, flagged.sources["server"]) == ("http://flag:3", "--server")


def test_xla_cache_config_names_another_file_and_empty_names_none(tmp_path: Path) -> None:
    path = write_config(tmp_path / "elsewhere.toml", 'server = "none"\n')
    config = ClientConfig.resolve(env={"XLA_CACHE_CONFIG": str(path)})
    assert config.server is None  # none: the local cache only
    assert ClientConfig.resolve(env={"XLA_CACHE_CONFIG": ""}).config_file is None
    with pytest.raises(ClientError, match="no such file"):
        ClientConfig.resolve(env={"XLA_CACHE_CONFIG": str(tmp_path / "missing.toml")})


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('sever = "http://x"\n', "unknown key 'sever'"),
        ("server = 8080\n", "server must be a string"),
        ("server = http://x\n", "not TOML"),
    ],
)
def test_a_bad_config_file_is_a_clear_error_naming_it(tmp_path: Path, text: str, message: str) -> None:
    path = write_config(tmp_path / "c.toml", text)
    with pytest.raises(ClientError, match=message) as caught:
        ClientConfig.resolve(env={"XLA_CACHE_CONFIG": str(path)})
    assert str(path) in str(caught.value)


def test_a_token_in_a_file_others_may_read_is_warned_about(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = write_config(tmp_path / "c.toml", 'token = "secret"\n', mode=0o644)
    with caplog.at_level(logging.WARNING, logger="xla_cache"):
        ClientConfig.resolve(env={"XLA_CACHE_CONFIG": str(path)})
    assert f"chmod 600 {path}" in caplog.text
    caplog.clear()
    path.chmod(0o600)
    with caplog.at_level(logging.WARNING, logger="xla_cache"):
        ClientConfig.resolve(env={"XLA_CACHE_CONFIG": str(path)})
    assert caplog.text == ""


def test_config_command_shows_each_source_and_never_the_token(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    token = "xlc_" + "s3cr3t" * 6
    path = write_config(tmp_path / "c.toml", f'token = "{token}"\ncache_dir = "{tmp_path / "cache"}"\n')
    monkeypatch.setenv("XLA_CACHE_CONFIG", str(path))
    monkeypatch.delenv("XLA_CACHE_SERVER")
    assert main(["config", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    settings = data["settings"]
    assert settings["server"] == {"value": DEFAULT_SERVER, "source": "default"}
    assert settings["cache_dir"] == {"value": str(tmp_path / "cache"), "source": f"config file {path}"}
    assert settings["token"]["source"] == f"config file {path}"
    assert data["config_file"] == str(path) and data["config_file_exists"]

    assert main(["config", "--server", "http://flag:9"]) == 0
    text = capsys.readouterr().out
    assert token not in text and token[:8] in text
    assert "http://flag:9  (--server)" in text


def test_a_server_url_with_an_api_path_names_the_base_url(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["runs", "--server", "http://127.0.0.1:8080/v1"]) == 2
    err = capsys.readouterr().err
    assert "use http://127.0.0.1:8080" in err and "(--server)" in err


def test_a_bad_positional_namespace_is_named_as_positional(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["graphs", "bad/ns"])
    err = capsys.readouterr().err
    assert "argument namespace: 'bad/ns' is not a valid namespace name" in err
    with pytest.raises(SystemExit):
        main(["stats", "--namespace", "bad/ns"])
    assert "argument --namespace: 'bad/ns'" in capsys.readouterr().err


def test_help_names_every_framework(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    assert all(name in out for name in ("PyTorch/XLA", "JAX", "torchax"))


# -- a token goes only to its server (issue 42, item 5) -------------------------------------------------


def token_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING and "token" in r.message]


def test_a_file_token_goes_only_to_the_server_beside_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = write_config(tmp_path / "c.toml", 'server = "http://cache-vm:8080"\ntoken = "xlc_team"\n')
    env = {"XLA_CACHE_CONFIG": str(path)}
    with caplog.at_level(logging.WARNING, logger="xla_cache"):
        assert ClientConfig.resolve(env=env).token == "xlc_team"
        # The same server written another way is the same server.
        for same in ("cache-vm:8080", "HTTP://Cache-VM:8080/", "http://cache-vm:8080//"):
            assert ClientConfig.resolve(same, env=env).token == "xlc_team", same
        assert token_warnings(caplog) == []

        by_env = ClientConfig.resolve(env={**env, "XLA_CACHE_SERVER": "http://test-vm:8080"})
        assert (by_env.server, by_env.token, by_env.sources["token"]) == (
            "http://test-vm:8080",
            None,
            "default",
        )
        by_flag = ClientConfig.resolve("http://evil:1", env=env, flags={"server": "--server"})
        assert by_flag.token is None
    warned = token_warnings(caplog)
    assert len(warned) == 2  # one per other server
    assert "http://cache-vm:8080" in warned[0] and "http://test-vm:8080" in warned[0]
    assert "http://evil:1" in warned[1] and "--server" in warned[1]
    assert "xlc_team" not in caplog.text


def test_a_token_from_the_environment_or_a_flag_goes_where_it_is_told(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = write_config(tmp_path / "c.toml", 'server = "http://cache-vm:8080"\ntoken = "xlc_team"\n')
    env = {"XLA_CACHE_CONFIG": str(path), "XLA_CACHE_SERVER": "http://test-vm:8080"}
    with caplog.at_level(logging.WARNING, logger="xla_cache"):
        assert ClientConfig.resolve(env={**env, "XLA_CACHE_TOKEN": "xlc_env"}).token == "xlc_env"
        assert ClientConfig.resolve(token="xlc_flag", env=env).token == "xlc_flag"
    assert token_warnings(caplog) == []


def test_a_bare_token_belongs_to_the_default_server(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = write_config(tmp_path / "c.toml", 'token = "xlc_local"\n')
    env = {"XLA_CACHE_CONFIG": str(path)}
    with caplog.at_level(logging.WARNING, logger="xla_cache"):
        assert ClientConfig.resolve(env=env).token == "xlc_local"
        assert ClientConfig.resolve(env={**env, "XLA_CACHE_SERVER": "none"}).server is None
        assert token_warnings(caplog) == []  # no server: no token to withhold
        assert ClientConfig.resolve(env={**env, "XLA_CACHE_SERVER": "http://elsewhere:80"}).token is None
    [warned] = token_warnings(caplog)
    assert DEFAULT_SERVER in warned and "http://elsewhere:80" in warned


def test_per_server_tables_choose_the_token_by_server(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = write_config(
        tmp_path / "c.toml",
        'server = "http://cache-vm:8080"\n'
        '[servers."http://cache-vm:8080"]\ntoken = "xlc_team"\n'
        '[servers."test-vm:8080"]\ntoken = "xlc_other"\n',
    )
    env = {"XLA_CACHE_CONFIG": str(path)}
    with caplog.at_level(logging.WARNING, logger="xla_cache"):
        assert ClientConfig.resolve(env=env).token == "xlc_team"
        chosen = ClientConfig.resolve("http://test-vm:8080/", env=env)
        assert (chosen.token, chosen.token_server) == ("xlc_other", "http://test-vm:8080")
        assert chosen.sources["token"] == f"config file {path}"
        assert token_warnings(caplog) == []
        assert ClientConfig.resolve("http://third:8080", env=env).token is None
    [warned] = token_warnings(caplog)
    assert all(url in warned for url in ("http://third:8080", "http://cache-vm:8080", "http://test-vm:8080"))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            'server = "http://a:1"\ntoken = "t1"\n[servers."a:1/"]\ntoken = "t2"\n',
            "two tokens for http://a:1",
        ),
        ('[servers."http://a:1"]\ntoken = "t"\n[servers."HTTP://A:1"]\ntoken = "u"\n', "two tokens"),
        ('[servers."http://a:1"]\ntokn = "t"\n', "unknown key 'tokn'"),
        ('[servers."http://a:1"]\ntoken = 5\n', "token must be a string"),
        ('[servers."http://a:1"]\n', "no token"),
        ('servers = "http://a:1"\n', "servers must be a table"),
        ('[servers."http://a:1/v1"]\ntoken = "t"\n', "use http://a:1"),
        ('[servers.none]\ntoken = "t"\n', "names no server"),
        ('server = "none"\ntoken = "t"\n', "belongs to no server"),
    ],
)
def test_a_bad_server_table_is_a_clear_error(tmp_path: Path, text: str, message: str) -> None:
    path = write_config(tmp_path / "c.toml", text)
    with pytest.raises(ClientError, match=message) as caught:
        ClientConfig.resolve(env={"XLA_CACHE_CONFIG": str(path)})
    assert str(path) in str(caught.value)


def test_config_command_shows_which_server_each_file_token_belongs_to(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    team, other = "xlc_" + "team" * 8, "xlc_" + "other" * 8
    path = write_config(
        tmp_path / "c.toml",
        f'server = "http://cache-vm:8080"\ntoken = "{team}"\n'
        f'[servers."http://test-vm:8080"]\ntoken = "{other}"\n',
    )
    monkeypatch.setenv("XLA_CACHE_CONFIG", str(path))
    monkeypatch.setenv("XLA_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("XLA_CACHE_SERVER")
    assert main(["config", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["settings"]["token"]["server"] == "http://cache-vm:8080"
    assert [t["server"] for t in data["file_tokens"]] == ["http://cache-vm:8080", "http://test-vm:8080"]
    assert team not in json.dumps(data) and other not in json.dumps(data)

    with caplog.at_level(logging.WARNING, logger="xla_cache"):
        assert main(["config", "--server", "http://third:1"]) == 0
    out = capsys.readouterr().out
    owners = "http://cache-vm:8080, http://test-vm:8080"
    assert f"token         -  (default; the file holds tokens for {owners} only)" in out
    assert f"{team[:8]}… (36 characters) for http://cache-vm:8080" in out
    assert f"{other[:8]}… (44 characters) for http://test-vm:8080" in out
    assert team not in out and other not in out
    [warned] = token_warnings(caplog)
    assert "http://third:1" in warned and "http://cache-vm:8080" in warned


@pytest.mark.e2e
def test_a_server_named_elsewhere_never_receives_the_file_token(tmp_path: Path) -> None:
    """The real CLI, its token in the config file, asks two listening servers: the one the file names gets
    the token, the one ``--server`` or ``XLA_CACHE_SERVER`` names gets none (and one warning says so)."""

    def refuse(request: Recorded) -> Reply:
        return json_reply(401, {"error": "unauthorized", "detail": "a token is needed"})

    with StubHttpServer(refuse) as team, StubHttpServer(refuse) as other:
        path = write_config(tmp_path / "c.toml", f'server = "{team.url}"\ntoken = "xlc_team"\n')
        env = {"XLA_CACHE_CONFIG": str(path)}
        for extra_env, args in (({}, ["--server", other.url]), ({"XLA_CACHE_SERVER": other.url}, [])):
            done = run_xla_cache({**env, **extra_env}, "stats", *args)
            assert done.returncode == 1 and "HTTP 401" in done.stdout, done
            assert "Traceback" not in done.stderr
            [warned] = [line for line in done.stderr.splitlines() if line.startswith("WARNING")]
            assert team.url in warned and other.url in warned
        assert len(other.requests) == 2
        assert [r.headers.get("authorization") for r in other.requests] == [None, None]

        assert run_xla_cache(env, "stats").returncode == 1
        assert run_xla_cache(env, "stats", "--server", team.url + "/").returncode == 1
        assert [r.headers.get("authorization") for r in team.requests] == ["Bearer xlc_team"] * 2

        path.write_text(
            f'server = "{team.url}"\ntoken = "xlc_team"\n[servers."{other.url}"]\ntoken = "xlc_o"\n'
        )
        done = run_xla_cache(env, "stats", "--server", other.url)
        assert not [line for line in done.stderr.splitlines() if line.startswith("WARNING")]
        assert other.requests[-1].headers.get("authorization") == "Bearer xlc_o"


# -- bad values are one-line errors (issue 42, item 5) ---------------------------------------------------


@pytest.mark.parametrize("token", ["tökén", "xlc_a\nb", "xlc a", "xlc_\x1b[31m"])
def test_a_token_that_is_not_printable_ascii_is_a_one_line_error(
    token: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("XLA_CACHE_TOKEN", token)
    assert main(["stats", "--server", "http://127.0.0.1:9"]) == 2
    err = capsys.readouterr().err
    assert "XLA_CACHE_TOKEN" in err and "printable ASCII" in err
    assert token not in err and len(err.strip().splitlines()) == 1


def test_the_api_refuses_a_token_it_cannot_send() -> None:
    with pytest.raises(ClientError, match="printable ASCII"):
        CacheApi("http://127.0.0.1:9", "tökén")


@pytest.mark.parametrize("key", ["server", "token", "cache_dir"])
def test_an_empty_value_in_the_file_is_an_error_not_the_default(tmp_path: Path, key: str) -> None:
    path = write_config(tmp_path / "c.toml", f'{key} = " "\n')
    with pytest.raises(ClientError, match=f"{key} is empty") as caught:
        ClientConfig.resolve(env={"XLA_CACHE_CONFIG": str(path)})
    assert str(path) in str(caught.value)


@pytest.mark.e2e
@pytest.mark.parametrize("kind", ["fifo", "device", "directory"])
def test_a_config_that_is_not_a_regular_file_is_an_error_not_a_hang(tmp_path: Path, kind: str) -> None:
    named = {"fifo": tmp_path / "fifo", "device": Path("/dev/zero"), "directory": tmp_path}[kind]
    if kind == "fifo":
        os.mkfifo(named)
    try:
        done = run_xla_cache({"XLA_CACHE_CONFIG": str(named)}, "config")
    except subprocess.TimeoutExpired:
        pytest.fail(f"xla-cache config hung on a {kind}")
    assert done.returncode == 2, done.stderr
    assert "not a regular file" in done.stderr and str(named) in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
