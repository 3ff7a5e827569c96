"""What entry signatures cost: a push signed against one unsigned, and a warm of 2,000 entries that verifies
every signature against one that does not, timed in turns in one run (``python -m bench.signing``).

Each push goes into a namespace of its own (the same files, hard-linked), each warm into an empty
directory; the signed namespace is warmed with and without ``XLA_CACHE_TRUSTED_KEYS``, so the only
difference is the verification. Also prints what one Ed25519 verify costs here, alone and beside a busy
thread (whether ``cryptography`` releases the GIL while it verifies). The server and the data are the
benchmark's own (:mod:`bench.launch`, :mod:`bench.data`).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from bench import clientops
from bench.data import FIXTURE_DIR, CacheDir, load_bases, make_cache_dir, synthesize
from bench.launch import run_server
from cache_protocol.signing import Signer, Verifier

SIGNING_KEY = "XLA_CACHE_SIGNING_KEY"
TRUSTED_KEYS = "XLA_CACHE_TRUSTED_KEYS"


def _with_env(name: str, value: str | None, action: Callable[[], None]) -> None:
    saved = os.environ.pop(name, None)
    if value is not None:
        os.environ[name] = value
    try:
        action()
    finally:
        os.environ.pop(name, None)
        if saved is not None:
            os.environ[name] = saved


def batch_cost(signer: Signer, count: int = 2000) -> tuple[float, float]:
    """Milliseconds to sign ``count`` entries as one batch (a bulk upload), and to verify them all."""
    items = [(str(10**38 + i), f"{i:064x}") for i in range(count)]
    started = time.perf_counter()
    signatures = signer.sign_batch("ns", items)
    signing = time.perf_counter() - started
    verifier = Verifier({signer.key_id: signer.public})
    started = time.perf_counter()
    for (key, digest), signature in zip(items, signatures, strict=True):
        assert verifier.why_not("ns", key, digest, signature) is None
    return signing * 1e3, (time.perf_counter() - started) * 1e3


def verify_cost(signer: Signer, count: int = 2000) -> tuple[float, float]:
    """Microseconds per verify of a single-entry signature alone, and the share of a pure-Python thread's
    speed left while another thread verifies (about 1.0 when the GIL is released during verification,
    about 0.5 when it is not)."""
    verifier = Verifier({signer.key_id: signer.public})
    items = [(str(i), f"{i:064x}") for i in range(count)]
    signed = [(key, digest, signer.sign("ns", key, digest)) for key, digest in items]
    started = time.perf_counter()
    for key, digest, signature in signed:
        assert verifier.why_not("ns", key, digest, signature) is None
    per_verify = (time.perf_counter() - started) / count * 1e6

    def spin(seconds: float) -> int:
        done, end = 0, time.perf_counter() + seconds
        while time.perf_counter() < end:
            done += 1
        return done

    alone = spin(0.5)
    stop = threading.Event()

    def verify_forever() -> None:
        while not stop.is_set():
            for key, digest, signature in signed[:200]:
                verifier.why_not("ns", key, digest, signature)

    thread = threading.Thread(target=verify_forever)
    thread.start()
    beside = spin(0.5)
    stop.set()
    thread.join()
    return per_verify, beside / alone


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--entries", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=7, help="warms of each kind (pushes: half as many)")
    args = parser.parse_args()
    signer = Signer.generate()
    per_verify, left = verify_cost(signer)
    print(f"Ed25519 verify: {per_verify:.0f} us each; a busy Python thread keeps {left:.0%} of its speed")
    signing, verifying = batch_cost(signer, args.entries)
    print(
        f"{args.entries} entries as one batch: signed in {signing:.1f} ms, all verified in {verifying:.1f} ms"
    )

    work = Path(tempfile.mkdtemp(prefix="bench-signing-"))
    try:
        key_file = work / "signing.key"
        key_file.write_text(signer.private_text() + "\n")
        data = make_cache_dir(
            work / "source", synthesize(load_bases(FIXTURE_DIR), args.entries, 5_000, 60_000)
        )
        print(f"{len(data.keys)} entries, {data.total_bytes / 1e6:.1f} MB")
        with run_server(work / "server") as server:
            pushes: dict[str, list[float]] = {"unsigned": [], "signed": []}
            cpu: dict[str, list[float]] = {"unsigned": [], "signed": [], "plain": [], "verifying": []}
            variant = iter(range(1, 1000))
            signed_ns: CacheDir | None = None
            for _ in range(max(2, args.rounds // 2)):
                for kind in ("unsigned", "signed"):
                    target = data.variant(next(variant), work / "variants")
                    outcome: list[clientops.PushOutcome] = []

                    def push(
                        target: CacheDir = target,
                        outcome: list[clientops.PushOutcome] = outcome,
                        kind: str = kind,
                    ) -> None:
                        started, used = time.perf_counter(), time.process_time()
                        outcome.append(clientops.push(server.url, target, timeout=600))
                        pushes[kind].append(time.perf_counter() - started)
                        cpu[kind].append(time.process_time() - used)

                    _with_env(SIGNING_KEY, str(key_file) if kind == "signed" else None, push)
                    assert outcome[0].uploaded == len(data.keys), outcome[0].errors[:3]
                    if kind == "signed":
                        signed_ns = target
            assert signed_ns is not None
            warms: dict[str, list[float]] = {"plain": [], "verifying": []}
            destination = work / "warm-into"
            for _ in range(args.rounds):
                for kind in ("plain", "verifying"):
                    shutil.rmtree(destination, ignore_errors=True)
                    result: list[clientops.WarmOutcome] = []

                    def warm(result: list[clientops.WarmOutcome] = result, kind: str = kind) -> None:
                        started, used = time.perf_counter(), time.process_time()
                        result.append(clientops.warm(server.url, signed_ns, destination, timeout=600))
                        warms[kind].append(time.perf_counter() - started)
                        cpu[kind].append(time.process_time() - used)

                    _with_env(TRUSTED_KEYS, signer.public_text() if kind == "verifying" else None, warm)
                    problems = result[0].errors[:3]
                    assert result[0].downloaded == len(data.keys) and not problems, problems
    finally:
        shutil.rmtree(work, ignore_errors=True)

    def line(label: str, seconds: list[float], kind: str) -> float:
        median = statistics.median(seconds)
        spread = f"min {min(seconds):.3f}, max {max(seconds):.3f}, n={len(seconds)}"
        print(
            f"{label:<22} median {median:.3f} s ({spread}); client CPU {statistics.median(cpu[kind]):.3f} s"
        )
        return median

    unsigned = line("push, unsigned", pushes["unsigned"], "unsigned")
    signed = line("push, signed", pushes["signed"], "signed")
    plain = line("warm, no trusted keys", warms["plain"], "plain")
    verifying = line("warm, verifying", warms["verifying"], "verifying")
    print(f"push signed / unsigned:  {signed / unsigned:.3f} (wall time)")
    print(f"warm verifying / plain:  {verifying / plain:.3f} (wall time)")


if __name__ == "__main__":
    main()
