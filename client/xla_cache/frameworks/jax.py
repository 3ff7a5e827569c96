"""JAX (and torchax, which compiles through JAX): its persistent compilation cache, fingerprint and entries.

What :meth:`Jax.initialize` changes in JAX's configuration, and why:

* ``jax_compilation_cache_dir``: the warmed directory.
* ``jax_persistent_cache_enable_xla_caches = "none"``: by default JAX puts
  ``<cache_dir>/xla_gpu_per_fusion_autotune_cache_dir`` into the compile options, even on CPU, so the cache
  key contains the directory's absolute path and an entry compiled in one directory misses in any other.
  Without XLA's own side caches the key is the same wherever the directory is.
* ``jax_persistent_cache_min_compile_time_secs = 0`` and ``jax_persistent_cache_min_entry_size_bytes = -1``
  (unless ``all_compilations=False``): JAX caches only compilations over a second by default, so a job
  whose graphs compile fast would share nothing (on CPU, nothing at all).
* ``jax_enable_compilation_cache = True``; the cache is then bound to the directory at once (JAX binds it
  lazily at the next compilation otherwise, and a cache bound to one directory silently stays there).

JAX has no public way to tell whether its cache is already bound, so :meth:`Jax.check_not_too_late` reads
the state of ``jax._src.compilation_cache`` (jax 0.10): bound to another directory, or switched off for the
process by a first compilation that ran without it, is too late.

Entries are files named ``<module>-<64 hex>-cache``: a 4-byte big-endian compile time in whole seconds,
then the serialized executable, compressed (zlib, or zstandard where JAX has it). With
``jax_compilation_cache_max_size`` set, JAX also keeps ``<key>-atime`` files and a ``.lockfile``: those are
not entries, but JAX's eviction needs an ``-atime`` beside every entry, so warm writes one for each entry
that lacks it. JAX writes an entry in place and never replaces one, so a truncated entry would be
recompiled on every run: warm removes a local entry that does not decompress, and never places or uploads
one.

In a multi-process job (``jax.distributed``) only process 0 writes the cache, so only process 0 uploads
and removes unloadable entries; processes on one host share the namespace's directory (the directory
lock lets one warm it at a time).

Fingerprint fields: ``schema``, ``framework`` (``"jax"``), ``jax_version``, ``jaxlib_version``,
``platform`` (``cpu``, ``tpu``, ``gpu``), ``platform_version``, ``device_kind``, ``device_count`` (all
processes), ``local_device_count``, ``process_count``, ``topology`` (where devices have coordinates: the
extent of each axis and the number of slices, else None), ``compression`` (zlib or zstandard: JAX puts
it into every key, and an entry compressed the other way cannot be used), ``pjrt_plugins``,
``accelerator_type``, ``xla_flags_digest`` and ``libtpu_init_args_digest`` (and the flags themselves,
``xla_flags`` and ``libtpu_init_args``, which the namespace id leaves out). The namespace's readable
prefix is ``<platform>-jax<jax_version>``.
"""

from __future__ import annotations

import importlib
import itertools
import os
import re
import sys
import time
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from cache_protocol import is_key
from xla_cache.errors import CacheAlreadyInitialized, FrameworkUnavailable
from xla_cache.frameworks import Framework, call_first
from xla_cache.frameworks.fingerprint import (
    FINGERPRINT_SCHEMA,
    distribution_version,
    runtime_environment,
    safe_label,
)
from xla_cache.localcache.cachedir import LocalFile

__all__ = [
    "ENTRY_SUFFIX",
    "FRAMEWORK",
    "Jax",
    "build_fingerprint",
    "entry_compile_time_ms",
    "read_entry",
    "runtime_facts",
    "write_missing_atimes",
]

ENTRY_SUFFIX = "-cache"
PLUGIN_DISTRIBUTIONS = ("libtpu", "libtpu-nightly", "jax-cuda12-pjrt", "jax-cuda13-pjrt")
ATIME_SUFFIX = "-atime"
_ENTRY = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*-[0-9a-f]{64}-cache")
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_TIME_BYTES = 4


def _decompressor(head: bytes) -> Any:
    """A streaming decompressor for an entry that starts with ``head`` (zlib, or zstandard)."""
    if head[:4] != _ZSTD_MAGIC:
        return zlib.decompressobj()
    try:
        import zstandard
    except ImportError:
        raise ValueError("it is zstandard-compressed and zstandard is not installed") from None
    return zstandard.ZstdDecompressor().decompressobj()


def check_entry(chunks: Iterable[bytes], *, keep: int = 0) -> bytes:
    """Decompress an entry as a stream, keeping only its first ``keep`` bytes; ValueError unless it is whole
    (decompresses to its end) and holds an executable after the compile time. Memory stays flat."""
    source = iter(chunks)
    first = next(source, b"")
    decompressor = _decompressor(first)
    kept = bytearray()
    size = 0
    try:
        for chunk in itertools.chain([first], source):
            out = decompressor.decompress(chunk)
            size += len(out)
            if len(kept) < keep:
                kept += out[: keep - len(kept)]
    except Exception as exc:  # zlib.error, zstandard.ZstdError
        raise ValueError(f"it does not decompress ({exc})") from None
    if not getattr(decompressor, "eof", True):
        raise ValueError("it is truncated")
    if size <= _TIME_BYTES:
        raise ValueError("it holds no executable")
    return bytes(kept)


def read_entry(data: bytes) -> bytes:
    """The first bytes of an entry's payload (its compile time); ValueError if it is not an entry."""
    return check_entry([data], keep=_TIME_BYTES)


def entry_compile_time_ms(data: bytes) -> int:
    """The compile time JAX recorded in an entry, in milliseconds (JAX keeps whole seconds: under a second
    is 0); ValueError if it is not an entry."""
    return int.from_bytes(read_entry(data)[:_TIME_BYTES], "big") * 1000


def _file_chunks(path: Path, size: int = 1024 * 1024) -> Iterator[bytes]:
    with path.open("rb") as handle:
        while chunk := handle.read(size):
            yield chunk


def compression() -> str:
    """What JAX compresses entries with here (it is part of every key): zstandard where importable."""
    for module in ("compression.zstd", "zstandard"):  # compression.zstd: Python 3.14
        try:
            importlib.import_module(module)
        except ImportError:
            continue
        return "zstandard"
    return "zlib"


def build_fingerprint(facts: Mapping[str, Any], env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The fingerprint of a JAX runtime described by ``facts`` (see :func:`runtime_facts`) and ``env``."""
    env = os.environ if env is None else env
    return {
        "schema": FINGERPRINT_SCHEMA,
        "framework": "jax",
        "jax_version": str(facts["jax_version"]),
        "jaxlib_version": str(facts["jaxlib_version"]),
        "platform": str(facts["platform"]),
        "platform_version": facts.get("platform_version"),
        "device_kind": facts.get("device_kind"),
        "device_count": int(facts["device_count"]),
        "local_device_count": int(facts["local_device_count"]),
        "process_count": int(facts["process_count"]),
        "topology": facts.get("topology"),
        "compression": facts.get("compression"),
        **runtime_environment(facts, env),
    }


def runtime_facts() -> dict[str, Any]:
    """Read the live JAX runtime's facts. This starts the backend but compiles nothing."""
    import jax
    import jaxlib

    devices = jax.devices()
    first = devices[0]
    coords = [tuple(c) for device in devices if (c := getattr(device, "coords", None)) is not None]
    topology = None
    if coords:  # a summary, not every device: its size must not grow with the pod
        extent = [
            max(c[axis] for c in coords) - min(c[axis] for c in coords) + 1 for axis in range(len(coords[0]))
        ]
        slices = {getattr(device, "slice_index", 0) for device in devices}
        topology = {"extent": extent, "slices": len(slices)}
    return {
        "jax_version": jax.__version__,
        "jaxlib_version": getattr(jaxlib, "__version__", None) or distribution_version("jaxlib"),
        "platform": jax.default_backend(),
        "platform_version": getattr(getattr(first, "client", None), "platform_version", None),
        "device_kind": first.device_kind,
        "device_count": jax.device_count(),
        "local_device_count": jax.local_device_count(),
        "process_count": jax.process_count(),
        "topology": topology,
        "compression": compression(),
        "pjrt_plugins": {
            name: version for name in PLUGIN_DISTRIBUTIONS if (version := distribution_version(name))
        },
    }


def _compilation_cache() -> Any:
    from jax._src import compilation_cache

    return compilation_cache


def _bound_directory(cache: Any) -> str | None:
    """The directory JAX's persistent cache is bound to in this process, if it is bound."""
    bound = getattr(getattr(cache, "_cache", None), "_path", None)
    return str(bound) if bound is not None else None


def write_missing_atimes(directory: Path) -> int:
    """Give every entry without one the ``-atime`` file JAX's size-bounded cache keeps; returns how many."""
    written = 0
    for path in directory.iterdir():
        if not path.name.endswith(ENTRY_SUFFIX):
            continue
        atime = path.with_name(path.name.removesuffix(ENTRY_SUFFIX) + ATIME_SUFFIX)
        if atime.exists():
            continue
        temp = atime.with_name(f".{atime.name}.{os.getpid()}.part")
        temp.write_bytes(time.time_ns().to_bytes(8, "little"))  # what JAX writes: ns, little-endian
        os.replace(temp, atime)
        written += 1
    return written


class Jax(Framework):
    """JAX 0.10 (and torchax, which compiles through it)."""

    name = "jax"
    module = "jax"
    auto_rank = 20

    def require(self) -> Any:
        try:
            import jax
        except Exception as exc:  # ImportError, or a broken install raising anything
            raise FrameworkUnavailable(f"jax cannot be imported ({type(exc).__name__}: {exc}).") from exc
        return jax

    def fingerprint(self, env: Mapping[str, str] | None = None) -> dict[str, Any]:
        self.require()
        return build_fingerprint(runtime_facts(), env)

    def namespace_prefix(self, fingerprint: Mapping[str, Any]) -> str:
        platform = safe_label(fingerprint.get("platform", "unknown"), 16).lower()
        return f"{platform}-jax{safe_label(fingerprint.get('jax_version', 'unknown'), 48)}"

    def check_not_too_late(self, directory: Path) -> None:
        self.require()
        self._check_binding(directory)

    def _check_binding(self, directory: Path | None) -> None:
        cache = _compilation_cache()
        bound = _bound_directory(cache)
        if bound is not None and (
            directory is None or os.path.realpath(bound) != os.path.realpath(directory)
        ):
            raise CacheAlreadyInitialized(
                f"JAX's persistent compilation cache is already bound to {bound} in this process and cannot "
                "be pointed elsewhere: call xla_cache.warm() before the first jit-compiled call."
            )
        if getattr(cache, "_cache_checked", False) and not getattr(cache, "_cache_used", False):
            raise CacheAlreadyInitialized(
                "JAX already compiled with its persistent compilation cache off, so this process will not "
                "use one: call xla_cache.warm() before the first jit-compiled call."
            )

    def initialize(self, directory: Path, *, all_compilations: bool = True) -> None:
        jax = self.require()
        cache = _compilation_cache()
        if _bound_directory(cache) is not None:
            self._check_binding(directory)
            return  # already this directory (another warm of it in this process)
        self._check_binding(directory)
        jax.config.update("jax_enable_compilation_cache", True)
        jax.config.update("jax_persistent_cache_enable_xla_caches", "none")
        if all_compilations:
            jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
            jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
        if jax.config.jax_compilation_cache_max_size != -1:
            write_missing_atimes(directory)
        jax.config.update("jax_compilation_cache_dir", str(directory))
        cache._initialize_cache()
        if _bound_directory(cache) is None:
            raise CacheAlreadyInitialized(f"JAX's persistent compilation cache did not open {directory}")

    def setup_lines(self, directory: Path) -> list[str]:
        return [
            'jax.config.update("jax_persistent_cache_enable_xla_caches", "none")  # keys without the path',
            'jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)',
            'jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)',
            f'jax.config.update("jax_compilation_cache_dir", {str(directory)!r})',
        ]

    def is_entry(self, name: str) -> bool:
        return is_key(name) and _ENTRY.fullmatch(name) is not None

    def entry_problem(self, path: Path) -> str | None:
        try:
            check_entry(_file_chunks(path))
        except ValueError as exc:
            return str(exc)
        except OSError as exc:
            return f"it cannot be read ({exc})"
        return None

    def compile_times(self, files: Sequence[LocalFile]) -> dict[str, int]:
        times: dict[str, int] = {}
        for item in files:
            try:  # the time is the payload's first bytes: decompress no further than that
                with item.path.open("rb") as handle:
                    decompressor = _decompressor(head := handle.read(64 * 1024))
                    payload = decompressor.decompress(head)
                milliseconds = int.from_bytes(payload[:_TIME_BYTES], "big") * 1000
            except Exception:  # unreadable, or not compressed as JAX does (zlib.error, zstandard.ZstdError)
                continue
            if milliseconds:  # 0: under a second, which JAX does not tell more precisely
                times[item.key] = milliseconds
        return times

    def watch_first_compile(self, callback: Callable[[], None]) -> bool:
        """JAX asks ``compilation_cache.is_cache_used`` at each compilation, and binds its cache at the
        first: by then ``jax.distributed`` is initialized and the job's own settings are made."""
        self.require()
        call_first(_compilation_cache(), "is_cache_used", callback)
        return True

    def own_cache(self) -> str | None:
        jax = sys.modules.get("jax")
        if jax is None:
            return None
        if not jax.config.jax_enable_compilation_cache:
            return "jax_enable_compilation_cache=False"
        directory = jax.config.jax_compilation_cache_dir
        return f"jax_compilation_cache_dir={directory}" if directory else None

    def uploads_here(self) -> bool:
        # JAX writes the cache from process 0 only (jax._src.compiler._cache_write).
        jax = sys.modules.get("jax")
        return jax is None or int(jax.process_index()) == 0


FRAMEWORK = Jax()
