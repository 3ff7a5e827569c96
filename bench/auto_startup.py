"""What the XLA_CACHE_AUTO start-up hook costs a Python process that does nothing: ``python -c pass``,
30 runs each way, alternated, in two virtual environments that differ only by the hook's two files
(``xla_cache_auto.pth`` and ``xla_cache_hook.py``, as the wheel installs them); medians (BENCHMARKS.md,
"Auto-activation").

    python bench/auto_startup.py [--runs 30]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the project root, for tests.support

from tests.support.auto_jobs import hook_interpreter


def _seconds(python: Path, env: dict[str, str]) -> float:
    started = time.perf_counter()
    subprocess.run([str(python), "-c", "pass"], env=env, check=True)
    return time.perf_counter() - started


def _hook_import_us(python: Path, env: dict[str, str]) -> int:
    """The hook module's own import, as ``-X importtime`` counts it (microseconds, cumulative)."""
    done = subprocess.run(
        [str(python), "-X", "importtime", "-c", "pass"], env=env, capture_output=True, text=True
    )
    line = next(line for line in done.stderr.splitlines() if line.rstrip().endswith("xla_cache_hook"))
    return int(line.split("|")[1])


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XLA_CACHE", "PYTHON"))}
    with tempfile.TemporaryDirectory() as scratch:
        hooked = hook_interpreter(Path(scratch) / "hooked")
        bare = hook_interpreter(Path(scratch) / "bare")
        for name in ("xla_cache_auto.pth", "xla_cache_hook.py"):
            next(bare.parents[1].glob(f"lib/python*/site-packages/{name}")).unlink()
        cases = {"without the hook": (bare, env), "hook, variable unset": (hooked, env)}
        cases["hook, XLA_CACHE_AUTO=1"] = (hooked, {**env, "XLA_CACHE_AUTO": "1"})
        times: dict[str, list[float]] = {name: [] for name in cases}
        for python, case_env in cases.values():  # warm the .pyc files
            _seconds(python, case_env)
        for _ in range(args.runs):
            for name, (python, case_env) in cases.items():
                times[name].append(_seconds(python, case_env))
        imports = [_hook_import_us(hooked, env) for _ in range(args.runs)]
    base = statistics.median(times["without the hook"])
    for name, samples in times.items():
        median = statistics.median(samples)
        print(f"{name:<24} median {median * 1000:7.2f} ms  ({median * 1000 - base * 1000:+.2f} ms)")
    print(f"the hook's import, -X importtime (variable unset): median {statistics.median(imports)} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
