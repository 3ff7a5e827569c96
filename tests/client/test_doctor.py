"""The doctor's verdicts (the real two-process run is in tests/e2e)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from xla_cache.cli import doctor
from xla_cache.cli import main as cli_main
from xla_cache.cli.doctor import judge, run_doctor

GOOD_FIRST = {
    "torch_xla_version": "2.7.0",
    "graphs": 3,
    "entries": ["1", "2", "3"],
    "counters": {"PersistentCacheMiss": 3, "UncachedCompile": 3},
    "outputs": [[1.0], [2.0], [3.0]],
}


def second(**counters: int) -> dict[str, Any]:
    return {**GOOD_FIRST, "counters": counters}


def test_loads_its_own_entries() -> None:
    loads, verdict = judge(GOOD_FIRST, second(PersistentCacheHit=3, UncachedCompile=0))
    assert loads is True and "loads its own entries" in verdict


def test_deserialize_failures_name_the_known_bug() -> None:
    first = {**GOOD_FIRST, "torch_xla_version": "2.8.0"}
    loads, verdict = judge(
        first,
        {**second(PersistentCacheDeserializeFailure=3, UncachedCompile=3), "torch_xla_version": "2.8.0"},
    )
    assert loads is False and "#9094" in verdict and "failed to load 3 of 3" in verdict


def test_no_entries_written() -> None:
    loads, verdict = judge({**GOOD_FIRST, "entries": []}, second(PersistentCacheHit=0))
    assert loads is False and "wrote no" in verdict


def test_recompiles_without_failures() -> None:
    loads, verdict = judge(GOOD_FIRST, second(PersistentCacheHit=1, UncachedCompile=2))
    assert loads is False and "only 1 of 3" in verdict


def test_different_outputs() -> None:
    loads, verdict = judge(GOOD_FIRST, {**second(PersistentCacheHit=3), "outputs": [[9.0]]})
    assert loads is False and "different results" in verdict


def test_could_not_run() -> None:
    loads, verdict = judge({"error": "the self-test process exited with 1: ImportError"}, {})
    assert loads is None and "ImportError" in verdict


def test_run_doctor_runs_two_processes_on_one_directory() -> None:
    seen: list[Path] = []

    def runner(directory: Path, timeout: float) -> dict[str, Any]:
        seen.append(directory)
        return GOOD_FIRST if len(seen) == 1 else second(PersistentCacheHit=3)

    report = run_doctor(runner=runner)
    assert len(seen) == 2 and seen[0] == seen[1]
    assert report.loads_own_entries is True


@pytest.mark.parametrize(("loads", "code"), [(True, 0), (False, 1), (None, 2)])
def test_cli_doctor_exit_code_and_json(
    loads: bool | None, code: int, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(
        doctor, "run_doctor", lambda **_: doctor.DoctorReport(loads_own_entries=loads, verdict="v")
    )
    assert cli_main(["doctor", "--json"]) == code
    assert json.loads(capsys.readouterr().out)["loads_own_entries"] is loads
