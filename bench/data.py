"""Test data that looks like a real cache: torch_xla executables of a few graphs at many shapes.

Executables of one graph at many shapes are nearly alike, so random bytes would be the wrong data (they
neither compress nor resemble what the server stores). The bases are real torch_xla 2.7 CPU entries: the
four fixture files of ``tests/admin/fixtures/torch_xla_2.7_cpu`` (5.5-7 kB), or a directory written by
:mod:`bench.gen_real` (10-74 kB, 400 entries in about two minutes) when it exists. Each synthetic entry is
one or more bases laid end to end, cut to a size drawn between ``min_size`` and ``max_size``, with a few
hundred bytes overwritten at random places (so every entry is distinct, as a new shape is).
"""

from __future__ import annotations

import os
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cache_protocol import FINGERPRINT_FILE
from tests.support.client_kit import FACTS
from xla_cache.frameworks.namespace import namespace_id
from xla_cache.frameworks.torch_xla import build_fingerprint
from xla_cache.localcache.cachedir import write_fingerprint

__all__ = [
    "FIXTURE_DIR",
    "REAL_DIR",
    "CacheDir",
    "fingerprint",
    "load_bases",
    "make_cache_dir",
    "mutate",
    "synthesize",
]

ROOT = Path(__file__).resolve().parents[1]
FIXTURE_DIR = ROOT / "tests" / "admin" / "fixtures" / "torch_xla_2.7_cpu"
REAL_DIR = Path(os.environ.get("XLA_CACHE_BENCH_REAL_DIR", "/tmp/xla-cache-bench-real"))


def load_bases(directory: Path) -> list[bytes]:
    """Every entry file's bytes in ``directory`` (sorted by name; hidden and temporary files left out)."""
    if not directory.is_dir():
        return []
    return [
        p.read_bytes()
        for p in sorted(directory.iterdir())
        if p.is_file() and not p.name.startswith(".") and p.name[0].isdigit()
    ]


def mutate(data: bytes, rng: random.Random, spans: tuple[int, int] = (6, 12)) -> bytes:
    """``data`` with ``spans`` runs of 16-48 random bytes overwritten (a few hundred bytes in all)."""
    out = bytearray(data)
    for _ in range(rng.randint(*spans)):
        length = min(rng.randint(16, 48), len(out))
        start = rng.randrange(0, len(out) - length + 1)
        out[start : start + length] = rng.randbytes(length)
    return bytes(out)


def synthesize(
    bases: Sequence[bytes], count: int, min_size: int, max_size: int, *, seed: int = 11
) -> list[bytes]:
    """``count`` distinct entries between ``min_size`` and ``max_size`` bytes made of mutated ``bases``."""
    if not bases:
        raise ValueError("no base entries")
    rng = random.Random(seed)
    entries: list[bytes] = []
    for _ in range(count):
        size = rng.randint(min_size, max_size)
        # Bases of about the right size first (a 50 kB entry is one larger graph, not ten small ones).
        fitting = [b for b in bases if len(b) >= size]
        parts: list[bytes] = [rng.choice(fitting)] if fitting else []
        while sum(map(len, parts)) < size:
            parts.append(rng.choice(bases))
        entries.append(mutate(b"".join(parts)[:size], rng))
    return entries


def fingerprint(variant: int = 0) -> dict[str, Any]:
    """A torch_xla 2.7 CPU fingerprint; ``variant`` > 0 gives another namespace of the same runtime."""
    env = {"XLA_FLAGS": f"--xla_bench_variant={variant}"} if variant else {}
    return build_fingerprint(FACTS, env)  # the tests' torch_xla 2.7 CPU runtime (tests/support/client_kit)


@dataclass
class CacheDir:
    """A base cache directory holding one namespace's directory: ``<base>/<namespace>/<key>``."""

    base: Path
    fingerprint: dict[str, Any]
    namespace: str
    keys: list[str] = field(default_factory=list)
    total_bytes: int = 0

    @property
    def directory(self) -> Path:
        return self.base / self.namespace

    def variant(self, number: int, base: Path, *, count: int | None = None) -> CacheDir:
        """The same files (hard links; the first ``count`` only if given) under another namespace of the
        same runtime, in ``base``."""
        fp = fingerprint(number)
        keys = self.keys[:count] if count is not None else list(self.keys)
        other = CacheDir(base, fp, namespace_id(fp), keys)
        other.directory.mkdir(parents=True, exist_ok=True)
        _write_fingerprint(other.directory, fp)
        for key in keys:
            os.link(self.directory / key, other.directory / key)
            other.total_bytes += (other.directory / key).stat().st_size
        return other


def _write_fingerprint(directory: Path, fp: dict[str, Any]) -> None:
    write_fingerprint(directory, fp)
    assert (directory / FINGERPRINT_FILE).is_file()


def make_cache_dir(base: Path, entries: Sequence[bytes], *, seed: int = 5) -> CacheDir:
    """Write ``entries`` under torch_xla-like keys (39-digit numbers) into a fresh namespace directory."""
    rng = random.Random(seed)
    fp = fingerprint()
    cache = CacheDir(base, fp, namespace_id(fp))
    cache.directory.mkdir(parents=True, exist_ok=True)
    _write_fingerprint(cache.directory, fp)
    for data in entries:
        key = str(rng.randrange(10**38, 10**39))
        (cache.directory / key).write_bytes(data)
        cache.keys.append(key)
        cache.total_bytes += len(data)
    return cache
