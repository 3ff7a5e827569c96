"""The start-up hook and auto-activation, in process: when the variable switches it on, what the finder
does on a framework's import, and the one warm per process (its turns, its refusals, its failures)."""

from __future__ import annotations

import sys
import threading
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest

import xla_cache_hook
from xla_cache.auto import Activation
from xla_cache.frameworks import Framework, call_first
from xla_cache.warm_report import WarmReport


@pytest.mark.parametrize(
    ("value", "expected"),
    [(None, False), ("", False), ("0", False), ("off", False), ("1", True), (" TRUE ", True), ("2", None)],
)
def test_the_variable_switches_it_on_only_with_1_or_true(value: str | None, expected: bool | None) -> None:
    assert xla_cache_hook.auto_setting(value) is expected


@pytest.fixture
def clean_meta_path() -> Iterator[None]:
    before = list(sys.meta_path)
    yield
    sys.meta_path[:] = before


@pytest.mark.usefixtures("clean_meta_path")
def test_startup_installs_nothing_when_off_and_one_finder_when_on(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("XLA_CACHE_AUTO", raising=False)
    xla_cache_hook.startup()
    assert xla_cache_hook.installed() is None
    monkeypatch.setenv("XLA_CACHE_AUTO", "maybe")
    xla_cache_hook.startup()
    assert xla_cache_hook.installed() is None
    assert "XLA_CACHE_AUTO='maybe' is neither 1 nor 0" in capsys.readouterr().err
    monkeypatch.setenv("XLA_CACHE_AUTO", "1")
    xla_cache_hook.startup()
    xla_cache_hook.startup()  # listed by two site directories: still one finder
    assert sum(isinstance(f, xla_cache_hook.FrameworkFinder) for f in sys.meta_path) == 1


@pytest.mark.usefixtures("clean_meta_path")
def test_the_finder_calls_back_once_the_watched_module_has_executed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = tmp_path / "fake_framework_for_auto"
    package.mkdir()
    (package / "__init__.py").write_text("READY = True\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    seen: list[tuple[str, bool]] = []

    def callback(name: str) -> None:
        seen.append((name, getattr(sys.modules[name], "READY", False)))

    sys.meta_path.insert(0, xla_cache_hook.FrameworkFinder(["fake_framework_for_auto"], callback))
    try:
        import fake_framework_for_auto

        assert fake_framework_for_auto.READY
        assert seen == [("fake_framework_for_auto", True)]
        del sys.modules["fake_framework_for_auto"]
        import fake_framework_for_auto  # again: watched once

        assert len(seen) == 1
    finally:
        sys.modules.pop("fake_framework_for_auto", None)


def test_call_first_runs_the_callback_before_or_after_and_wraps_once() -> None:
    module = types.ModuleType("owner")
    order: list[str] = []
    module.step = lambda: order.append("step")  # type: ignore[attr-defined]
    module.device = lambda: order.append("device") or "xla:0"  # type: ignore[attr-defined]
    call_first(module, "step", lambda: order.append("before"))
    call_first(module, "step", lambda: order.append("twice"))  # already wrapped: ignored
    call_first(module, "device", lambda: order.append("after"), after=True)
    module.step()
    assert module.device() == "xla:0"
    assert order == ["before", "step", "device", "after"]


class _Stub:
    """The parts of an adapter :class:`Activation` reads."""

    name = "stub"

    def __init__(self, own: str | None = None) -> None:
        self.own = own

    def own_cache(self) -> str | None:
        return self.own


def _report() -> WarmReport:
    return cast(WarmReport, object())


def test_one_warm_per_process_whatever_calls_back(caplog: pytest.LogCaptureFixture) -> None:
    calls: list[str] = []
    activation: Activation

    def warm_with(framework: Framework) -> WarmReport:
        calls.append(framework.name)
        activation.trigger(framework)()  # the warm's own device query calls back: it passes through
        return _report()

    activation = Activation(warm_with)
    fire = activation.trigger(cast(Framework, _Stub()))
    fire()
    fire()
    assert calls == ["stub"] and activation.done and activation.report is not None
    assert caplog.records == []


def test_rank_threads_wait_for_the_warm_of_their_process() -> None:
    started, release = threading.Event(), threading.Event()
    order: list[str] = []

    def warm_with(framework: Framework) -> WarmReport:
        started.set()
        release.wait(10)
        order.append("warmed")
        return _report()

    activation = Activation(warm_with)
    fire = activation.trigger(cast(Framework, _Stub()))
    first = threading.Thread(target=fire)
    first.start()
    assert started.wait(10)

    def second_rank() -> None:
        fire()
        order.append("second rank goes on")

    second = threading.Thread(target=second_rank)
    second.start()
    second.join(0.2)
    assert second.is_alive()  # it waits: its first compile must not come before the cache is set
    release.set()
    first.join(10)
    second.join(10)
    assert order == ["warmed", "second rank goes on"]


def test_a_failing_warm_is_one_warning_and_the_job_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    def warm_with(framework: Framework) -> WarmReport:
        raise ValueError("config.toml: line 1: not TOML")

    activation = Activation(warm_with)
    activation.trigger(cast(Framework, _Stub()))()
    activation.trigger(cast(Framework, _Stub()))()
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert warnings == [
        "xla-cache: XLA_CACHE_AUTO could not warm stub's cache (ValueError: config.toml: line 1: not "
        "TOML); the job goes on without it"
    ]


def test_a_job_that_sets_its_own_cache_keeps_it(caplog: pytest.LogCaptureFixture) -> None:
    calls: list[Any] = []
    activation = Activation(lambda framework: calls.append(framework) or _report())
    activation.trigger(cast(Framework, _Stub("jax_compilation_cache_dir=/mine")))()
    assert calls == [] and activation.refused == "the job sets jax_compilation_cache_dir=/mine itself"
    (warning,) = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert "leaves stub's persistent cache alone: the job sets jax_compilation_cache_dir=/mine" in warning
