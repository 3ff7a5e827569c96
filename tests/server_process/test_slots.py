"""ServerSlots (``cache_server.background.slots``) across real processes: the slots are shared by every
process that names the same directory, never more than ``count`` are held at once, a process killed with
SIGKILL lets its slot go, and each thread holds a slot of its own."""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time
from multiprocessing.connection import Connection
from multiprocessing.sharedctypes import Synchronized
from multiprocessing.synchronize import Lock
from pathlib import Path

import pytest

from cache_server.background.slots import ServerSlots, SlotsBusy

pytestmark = pytest.mark.e2e

SPAWN = multiprocessing.get_context("spawn")  # as the server starts its children


def _hold_until(directory: Path, count: int, talk: Connection) -> None:
    """Take a slot, say so, and keep it until told to let go (or until killed). A pipe, not an Event: a
    process killed while waiting on a multiprocessing Event leaves its condition waiting for it."""
    with ServerSlots("reports", count, directory).hold(timeout=30):
        talk.send("holding")
        talk.poll(60)


def _take_turns(
    directory: Path, count: int, turns: int, inside: Synchronized[int], peak: Synchronized[int], lock: Lock
) -> None:
    """``turns`` times: take a slot, count this process in while holding it, let it go."""
    slots = ServerSlots("reports", count, directory)
    for _ in range(turns):
        with slots.hold(timeout=60):
            with lock:
                inside.value += 1
                peak.value = max(peak.value, inside.value)
            time.sleep(0.01)
            with lock:
                inside.value -= 1


def test_slots_are_shared_by_processes_and_a_killed_holder_lets_go(tmp_path: Path) -> None:
    holders = []
    for _ in range(2):
        ours, theirs = SPAWN.Pipe()
        process = SPAWN.Process(target=_hold_until, args=(tmp_path, 2, theirs))
        process.start()
        holders.append((process, ours))
    try:
        for _, talk in holders:
            assert talk.poll(60) and talk.recv() == "holding"
        slots = ServerSlots("reports", 2, tmp_path)
        started = time.monotonic()
        with pytest.raises(SlotsBusy), slots.hold(timeout=0.3):
            pass
        assert time.monotonic() - started >= 0.3  # it waited for one to come free
        with pytest.raises(SlotsBusy), ServerSlots("reports", 1, tmp_path).hold(timeout=0):
            pass  # another count over the same files: the same slots
        with ServerSlots("others", 1, tmp_path).hold(timeout=0):
            pass  # another name: other slots
        killed, _ = holders[0]
        assert killed.pid is not None
        os.kill(killed.pid, signal.SIGKILL)  # no finally, no close: the kernel lets the lock go
        killed.join(30)
        with slots.hold(timeout=10), pytest.raises(SlotsBusy), slots.hold(timeout=0):
            pass  # the other holder still has its own
    finally:
        for process, talk in holders:
            if process.is_alive():
                talk.send("let go")
            process.join(30)
            if process.is_alive():
                process.kill()
                process.join()


def test_never_more_than_count_are_held_at_once_by_many_processes(tmp_path: Path) -> None:
    lock = SPAWN.Lock()
    inside = SPAWN.Value("i", 0, lock=False)
    peak = SPAWN.Value("i", 0, lock=False)
    workers = [
        SPAWN.Process(target=_take_turns, args=(tmp_path, 2, 15, inside, peak, lock)) for _ in range(4)
    ]
    for process in workers:
        process.start()
    for process in workers:
        process.join(120)
        assert process.exitcode == 0
    assert 1 <= peak.value <= 2 and inside.value == 0


def test_each_thread_holds_a_slot_of_its_own(tmp_path: Path) -> None:
    slots = ServerSlots("reports", 1, tmp_path / "made" / "here")
    taken, release = threading.Event(), threading.Event()

    def hold() -> None:
        with slots.hold(timeout=5):
            taken.set()
            release.wait(30)

    thread = threading.Thread(target=hold)
    thread.start()
    try:
        assert taken.wait(10)
        with pytest.raises(SlotsBusy), slots.hold(timeout=0.05):
            pass
    finally:
        release.set()
        thread.join()
    with slots.hold(timeout=1):  # let go when the block ended
        pass
    with pytest.raises(RuntimeError), slots.hold(timeout=0):  # let go however the block ends
        raise RuntimeError("the work failed")
    with slots.hold(timeout=0):
        pass


@pytest.mark.parametrize(("name", "count"), [("", 1), ("../x", 1), ("a.b", 1), ("reports", 0)])
def test_a_bad_name_or_count_is_refused(tmp_path: Path, name: str, count: int) -> None:
    with pytest.raises(ValueError):
        ServerSlots(name, count, tmp_path)
