"""The client's configuration as a user meets it: the default server is where ``serve`` listens, a config
file holds server, token and cache directory, a flag beats the environment beats the file beats the
default, and ``xla-cache config`` says where each value came from."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from cache_server.cli import build_parser as server_parser
from xla_cache.cli import main
from xla_cache.config import DEFAULT_SERVER, ClientConfig
from xla_cache.errors import ClientError


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
    assert (from_env.server, from_env.token) == ("http://from-env:2", "file-token")
    assert from_env.sources == {**from_file.sources, "server": "XLA_CACHE_SERVER"}

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
