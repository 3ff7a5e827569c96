"""The framework adapters: how each is chosen, which files are entries, how entries are checked."""

from __future__ import annotations

import sys
import types
import zlib
from pathlib import Path

import pytest

from xla_cache.errors import ClientError
from xla_cache.frameworks import all_frameworks, choose, framework_named
from xla_cache.frameworks.jax import Jax, build_fingerprint, entry_compile_time_ms, write_missing_atimes
from xla_cache.frameworks.namespace import namespace_id
from xla_cache.frameworks.torch_xla import TorchXla

KEY = "jit_step-" + "ab" * 32 + "-cache"
FACTS = {
    "jax_version": "0.10.2",
    "jaxlib_version": "0.10.2",
    "platform": "cpu",
    "platform_version": "cpu",
    "device_kind": "cpu",
    "device_count": 1,
    "local_device_count": 1,
    "process_count": 1,
}


def entry(compile_seconds: int, executable: bytes = b"serialized executable") -> bytes:
    return zlib.compress(compile_seconds.to_bytes(4, "big") + executable)


def test_every_adapter_module_is_found_by_name() -> None:
    assert set(all_frameworks()) == {"torch_xla", "jax"}
    assert isinstance(framework_named("jax"), Jax) and isinstance(framework_named("torch_xla"), TorchXla)
    with pytest.raises(ClientError, match="unknown framework 'tensorflow'"):
        framework_named("tensorflow")


def test_auto_prefers_what_the_job_imported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "torch_xla", raising=False)
    monkeypatch.setitem(sys.modules, "jax", types.ModuleType("jax"))
    assert choose("auto").name == "jax"
    monkeypatch.setitem(sys.modules, "torch_xla", types.ModuleType("torch_xla"))
    assert choose("auto").name == "torch_xla"  # a torch_xla job may import jax too
    assert choose("jax").name == "jax"


def test_jax_entries_are_the_cache_files_only() -> None:
    jax = Jax()
    assert jax.is_entry(KEY)
    for other in (
        KEY.replace("-cache", "-atime"),
        ".lockfile",
        f".{KEY}.1a2b.part",
        "jit_f-123-cache",
        "1234",
    ):
        assert not jax.is_entry(other), other
    assert not jax.is_entry("jit_función-" + "ab" * 32 + "-cache")  # JAX keeps Unicode; keys are ASCII


def test_jax_entries_are_checked_before_they_are_placed_or_sent(tmp_path: Path) -> None:
    jax = Jax()
    good, truncated, garbage, empty = (tmp_path / name for name in ("good", "truncated", "garbage", "empty"))
    good.write_bytes(entry(3))
    truncated.write_bytes(entry(3)[:10])
    garbage.write_bytes(b"not compressed at all")
    empty.write_bytes(zlib.compress(b"\0\0\0\1"))  # a compile time and no executable
    assert jax.entry_problem(good) is None
    for bad in (truncated, garbage, empty):
        assert jax.entry_problem(bad), bad.name
    assert entry_compile_time_ms(entry(3)) == 3000  # JAX records whole seconds


def test_jax_namespace_says_it_is_jax_and_changes_with_the_runtime() -> None:
    base = build_fingerprint(FACTS, env={})
    assert base["framework"] == "jax"
    assert namespace_id(base).startswith("cpu-jax0.10.2-")
    for field, value in (("jaxlib_version", "0.10.3"), ("device_count", 8), ("platform_version", "x")):
        assert namespace_id(build_fingerprint({**FACTS, field: value}, env={})) != namespace_id(base)
    flagged = build_fingerprint(FACTS, env={"XLA_FLAGS": "--xla_cpu_enable_fast_math=true"})
    assert namespace_id(flagged) != namespace_id(base)


def test_size_bounded_jax_caches_get_an_atime_for_every_entry(tmp_path: Path) -> None:
    (tmp_path / KEY).write_bytes(entry(1))
    (tmp_path / ".fingerprint.json").write_text("{}")
    assert write_missing_atimes(tmp_path) == 1
    atime = tmp_path / KEY.replace("-cache", "-atime")
    assert len(atime.read_bytes()) == 8
    assert write_missing_atimes(tmp_path) == 0


def test_only_process_0_of_a_multi_process_jax_job_uploads(monkeypatch: pytest.MonkeyPatch) -> None:
    """JAX writes its cache from process 0 only; the other hosts warm their own directories and upload
    nothing (they would only send the same files again)."""
    fake = types.ModuleType("jax")
    index = {"value": 1}
    fake.process_index = lambda: index["value"]  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "jax", fake)
    assert not Jax().uploads_here()
    index["value"] = 0
    assert Jax().uploads_here()
