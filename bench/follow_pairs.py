"""``python -m bench.follow_pairs``: what following costs a warmed job's loop, in pairs.

The seed case's ``cost of following`` compares medians of three turns of loop CPU, and the loop's own
spread on a 2-core machine (up to 20% between two runs of one job) is larger than the 2% it tries to
resolve. This runs one server filled by a first job of ``--shapes`` shapes, then the warmed job and the
same job following (``fuse_job.py --follow``), one after the other, ``--turns`` times, each into an empty
directory, and prints per pair the loop's seconds and CPU, the job's own thread and each client thread
(``loop_cpu_by_thread``): what the follower and the uploader run shows in the client's threads.

    python -m bench.follow_pairs --shapes 1000 --turns 3
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from bench.cases.seed import SEQ_LEN, _job
from bench.launch import run_server


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--shapes", type=int, default=1000)
    parser.add_argument("--turns", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="follow-pairs-") as scratch:
        root = Path(scratch)
        shapes = ["--shapes", str(args.shapes), "--seq-len", str(SEQ_LEN)]
        with run_server(root / "server") as server:
            job = ["--server", server.url, "--timeout", "120", *shapes]
            seconds, _ = _job([*job, "--cache-dir", str(root / "first")], 900)
            print(f"first job ({args.shapes} shapes compiled and uploaded): {seconds:.1f} s")
            for turn in range(args.turns):
                for label, extra in (("warmed", []), ("following", ["--follow"])):
                    _, report = _job([*job, *extra, "--cache-dir", str(root / f"{label}-{turn}")], 900)
                    threads = ", ".join(
                        f"{name} {cpu:.3f}"
                        for name, cpu in sorted(report.get("loop_cpu_by_thread", {}).items())
                    )
                    print(
                        f"turn {turn} {label:9}  loop {report['loop_seconds']:.3f} s  "
                        f"CPU {report['loop_cpu_seconds']:.3f} s  "
                        f"job thread {report['loop_thread_seconds']:.3f} s  threads: {threads}"
                    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
