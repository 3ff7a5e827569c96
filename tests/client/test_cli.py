"""The CLI's arguments and failures (its transfers against a real server are in test_against_server)."""

from __future__ import annotations

from pathlib import Path

import pytest

from xla_cache.cli import build_parser, main


def test_every_subcommand_has_its_own_function() -> None:
    parser = build_parser()
    for command in ("warm", "push", "stats", "doctor"):
        args = parser.parse_args([command])
        assert args.func.__name__ == f"cmd_{command}"


def test_push_without_a_server_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "ns").mkdir()
    (tmp_path / "ns" / ".fingerprint.json").write_text("{}")
    assert main(["push", "--cache-dir", str(tmp_path)]) == 2
    assert "XLA_CACHE_SERVER" in capsys.readouterr().err


def test_push_with_nothing_to_push(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["push", "--server", "http://127.0.0.1:9", "--cache-dir", str(tmp_path)]) == 2
    assert "no namespace directories" in capsys.readouterr().err


def test_push_to_a_server_that_is_down_fails_with_the_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "ns").mkdir()
    (tmp_path / "ns" / "1").write_bytes(b"x")
    assert (
        main(["push", "--server", "http://127.0.0.1:9", "--cache-dir", str(tmp_path), "--namespace", "ns"])
        == 1
    )
    assert "cannot connect" in capsys.readouterr().out


def test_bad_namespace_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["stats", "--namespace", "../x"])
    assert "not a valid namespace" in capsys.readouterr().err


def test_text_a_client_sent_never_reaches_the_terminal_as_an_escape(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Whatever the server stored (a host sent before the server refused such text, say), the lines a
    command prints show control, bidi and zero-width characters as escapes; --json escapes them too."""
    from argparse import Namespace

    from xla_cache.cli.common import emit

    hostile = "x\x9b2J\x1b[31mPWNED \u202egnp.exe\u200b\u2028"
    emit(Namespace(json=False), {}, [f"host  {hostile}", "plain  gpu-节点-1"])
    out = capsys.readouterr().out
    assert not any(char in out for char in "\x9b\x1b\u202e\u200b\u2028")
    assert "host  x\\u009b2J\\u001b[31mPWNED \\u202egnp.exe\\u200b\\u2028" in out
    assert "plain  gpu-节点-1" in out  # printable text, any script, as it is
    emit(Namespace(json=True), {"host": hostile}, [])
    assert not any(char in capsys.readouterr().out for char in "\x9b\x1b\u202e")
