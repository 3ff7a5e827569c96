"""What a JAX (or torchax) run counts: JAX's monitoring events, and the cache-key component hashes JAX logs.

Counts come from ``jax.monitoring`` listeners: ``/jax/compilation_cache/cache_hits`` (loads),
``compile_requests_use_cache`` minus hits (compiles; ``cache_misses`` counts only the entries JAX wrote,
which leaves out compiles under JAX's thresholds and those of processes other than 0) and the
``/jax/core/compile/backend_compile_duration`` of each compile that was not a hit (its seconds).

Why a key is new needs the parts of JAX's key: ``jax._src.cache_key`` hashes named components (the
computation, jaxlib version, XLA flags, compile options, ...) and, at DEBUG level, logs each one's hash
(``get_cache_key hash of serialized <name>: <hex>``) and the running hash after it (``get_cache_key hash
after serializing <name>: <hex>``); the running hash after the last component is the hex part of the key
(the entry's file name is ``<module>-<hex>-cache``). :class:`KeyComponentLog` reads those lines as a filter
on that logger (public logging API only, no private JAX call), keeps each key's components, and drops the
DEBUG lines it made JAX write unless the job asked for them itself. It does not assume which component comes
last or how many there are (a later JAX may add some): each running hash is kept with the components seen
so far, and a new computation begins when a component name comes again.

The listeners and the filter are installed once per process (JAX 0.10 has no way to see whether a listener
is already there); each :class:`JaxCollector` subtracts the numbers it found when it started.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sys
import threading
from collections import Counter, OrderedDict
from collections.abc import Sequence
from typing import Any

from xla_cache.localcache.cachedir import LocalFile
from xla_cache.runs.collectors import CompileCounts, MissFacts, RunCollector

__all__ = ["CACHE_KEY_LOGGER", "JaxCollector", "JaxEvents", "KeyComponentLog", "key_hash", "module_of"]

CACHE_KEY_LOGGER = "jax._src.cache_key"
# A component's name as the server takes it (letters, digits, "_", ".", "-", spaces; 64 at most): a line
# naming another is left out rather than making the server refuse the report.
_NAME = r"(?P<name>[A-Za-z0-9_. -]{1,64})"
_COMPONENT = re.compile(rf"get_cache_key hash of serialized {_NAME}: (?P<hex>[0-9a-f]{{16,128}})\s*$")
_RUNNING = re.compile(rf"get_cache_key hash after serializing {_NAME}: (?P<hex>[0-9a-f]{{16,128}})\s*$")
MAX_COMPONENTS = 32
_ENTRY = re.compile(r"(?P<module>.+)-(?P<hex>[0-9a-f]{64})(?:-cache)?")
_CACHE_EVENTS = "/jax/compilation_cache/"
BACKEND_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"
KEEP_KEYS = 10_000  # keys whose components wait for their entry file (hits' keys never get one)


def key_hash(name: str) -> str | None:
    """The hex part of a JAX entry's file name (``<module>-<64 hex>-cache``), or None."""
    found = _ENTRY.fullmatch(name)
    return found.group("hex") if found else None


def module_of(name: str) -> str | None:
    """The module (graph) name of a JAX entry's file name, or None."""
    found = _ENTRY.fullmatch(name)
    return found.group("module") if found else None


class _Bounded(OrderedDict[str, Any]):
    """A dict that forgets its oldest items past ``limit``."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit = limit

    def keep(self, key: str, value: Any) -> None:
        self[key] = value
        self.move_to_end(key)
        while len(self) > self.limit:
            self.popitem(last=False)


class KeyComponentLog(logging.Filter):
    """A filter on JAX's cache-key logger: records each key's component hashes (see the module's text).

    ``passes_below``: the level the logger had before this filter set it to DEBUG; records under it are
    dropped after being read, as the logger would have dropped them.
    """

    def __init__(self, passes_below: int = logging.WARNING, *, limit: int = KEEP_KEYS) -> None:
        super().__init__()
        self.passes_below = passes_below
        self._lock = threading.Lock()
        self._current: dict[int, dict[str, str]] = {}  # by thread: the components of the key being made
        self._running: dict[int, str] = {}  # by thread: the key's running hash so far
        self._keys: _Bounded = _Bounded(limit)  # running hash -> components up to it

    def filter(self, record: logging.LogRecord) -> bool:
        with contextlib.suppress(Exception):  # never disturb JAX's logging
            self.read(record.getMessage(), record.thread or 0)
        return record.levelno >= self.passes_below

    def read(self, message: str, thread: int) -> None:
        """Take one log message of JAX's cache-key logger, logged by ``thread``."""
        if (found := _COMPONENT.match(message)) is not None:
            with self._lock:
                current = self._current.setdefault(thread, {})
                if found.group("name") in current:  # the first component again: another key begins
                    current = self._current[thread] = {}
                    self._running.pop(thread, None)
                if len(current) < MAX_COMPONENTS:
                    current[found.group("name")] = found.group("hex")
        elif (found := _RUNNING.match(message)) is not None:
            with self._lock:
                current = self._current.get(thread, {})
                previous = self._running.get(thread)
                if previous is not None:
                    self._keys.pop(previous, None)  # only the last running hash can be the key
                self._running[thread] = found.group("hex")
                self._keys.keep(found.group("hex"), dict(current))

    def last_running(self, thread: int) -> str | None:
        """The running hash of the key ``thread`` made last."""
        with self._lock:
            return self._running.get(thread)

    def components(self, hex_hash: str) -> dict[str, str] | None:
        """The components of the key whose hash is ``hex_hash`` (forgotten once asked), or None."""
        with self._lock:
            found = self._keys.pop(hex_hash, None)
        return dict(found) if found else None


class JaxEvents:
    """JAX's monitoring events of this process and the cache-key filter: installed once (:meth:`get`)."""

    _installed: JaxEvents | None = None
    _install_lock = threading.Lock()

    def __init__(self, key_log: KeyComponentLog) -> None:
        self.key_log = key_log
        self._lock = threading.Lock()
        self.counts: Counter[str] = Counter()
        self.compile_seconds = 0.0
        self._hit = threading.local()  # this thread's last lookup was a hit: its duration is no compile
        self._durations: _Bounded = _Bounded(KEEP_KEYS)  # running hash -> the compile's seconds

    @classmethod
    def get(cls) -> JaxEvents:
        """This process's events, listening from the first call on."""
        with cls._install_lock:
            if cls._installed is None:
                import jax

                logger = logging.getLogger(CACHE_KEY_LOGGER)
                key_log = KeyComponentLog(passes_below=logger.getEffectiveLevel())
                events = cls(key_log)
                logger.addFilter(key_log)
                logger.setLevel(logging.DEBUG)  # JAX logs the hashes only when DEBUG is on for it
                jax.monitoring.register_event_listener(events.on_event)
                jax.monitoring.register_event_duration_secs_listener(events.on_duration)
                cls._installed = events
            return cls._installed

    def on_event(self, event: str, **_: Any) -> None:
        if event.startswith(_CACHE_EVENTS):
            name = event.removeprefix(_CACHE_EVENTS)
            with self._lock:
                self.counts[name] += 1
            if name == "cache_hits":
                self._hit.value = True

    def on_duration(self, event: str, duration_secs: float, **_: Any) -> None:
        if event != BACKEND_COMPILE_EVENT:
            return
        if getattr(self._hit, "value", False):
            self._hit.value = False
            return
        key = self.key_log.last_running(threading.get_ident())
        with self._lock:
            self.compile_seconds += float(duration_secs)
            if key is not None:
                self._durations.keep(key, float(duration_secs))

    def snapshot(self) -> CompileCounts:
        with self._lock:
            hits = self.counts["cache_hits"]
            return CompileCounts(
                hits=hits,
                misses=max(0, self.counts["compile_requests_use_cache"] - hits),
                compile_seconds=self.compile_seconds,
            )

    def duration(self, hex_hash: str) -> float | None:
        with self._lock:
            found = self._durations.pop(hex_hash, None)
        return float(found) if found is not None else None


class JaxCollector(RunCollector):
    """The run's numbers from :class:`JaxEvents`, less those before the collector started."""

    def __init__(self, events: JaxEvents) -> None:
        self._events = events
        self._start = events.snapshot()

    @classmethod
    def start(cls) -> JaxCollector:
        return cls(JaxEvents.get())

    def framework(self) -> str:
        # torchax compiles through JAX: the job is a torchax job when it imported torchax.
        return "torchax" if "torchax" in sys.modules else "jax"

    def counts(self) -> CompileCounts:
        return self._events.snapshot().since(self._start)

    def process_index(self) -> int | None:
        if "jax" not in sys.modules:
            return None
        import jax

        return int(jax.process_index()) if int(jax.process_count()) > 1 else None

    def runtime(self) -> dict[str, Any] | None:
        if "jax" not in sys.modules:
            return None
        import jax

        from xla_cache.frameworks.key_components import key_components

        return key_components(jax.devices(), os.environ)

    def facts(self, files: Sequence[LocalFile]) -> dict[str, MissFacts]:
        found: dict[str, MissFacts] = {}
        for item in files:
            hex_hash = key_hash(item.key)
            if hex_hash is None:
                continue
            found[item.key] = MissFacts(
                module=module_of(item.key),
                components=self._events.key_log.components(hex_hash),
                compile_seconds=self._events.duration(hex_hash),
            )
        return found
