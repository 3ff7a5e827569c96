"""How well cache entries compress, and what compression would save a warm at three link speeds.

Two codecs: zlib level 1 on each file (what a per-entry ``Content-Encoding`` would give), and zstd level 3
over the whole tar stream (what a compressed bundle would give: entries of one graph at many shapes are
nearly alike, and a stream-wide window sees that). zstd comes from the ``zstandard`` package when it is
installed, else from the ``zstd`` program (``-T1``, timed around the process: a few ms of start-up
included).
"""

from __future__ import annotations

import importlib.util
import io
import random
import shutil
import socket
import subprocess
import tarfile
import threading
import zlib
from collections.abc import Callable, Sequence

from bench.core import MB, CaseResult, Context, case
from bench.data import FIXTURE_DIR, REAL_DIR, load_bases, mutate

LINKS = (("1 Gbit/s", 1e9 / 8), ("100 Mbit/s", 100e6 / 8))
Codec = tuple[str, Callable[[bytes], bytes], Callable[[bytes], bytes]]  # (how, compress, decompress)


def tar_stream(files: Sequence[bytes]) -> bytes:
    """The files as one PAX tar stream (as a bundle is), named by their index."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w|", format=tarfile.PAX_FORMAT) as tar:
        for index, data in enumerate(files):
            info = tarfile.TarInfo(f"{index:06d}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def zstd_codec() -> Codec | None:
    """(how, compress, decompress) at level 3, or None when neither the package nor the program exists."""
    if importlib.util.find_spec("zstandard") is not None:
        import zstandard

        compressor = zstandard.ZstdCompressor(level=3)
        decompressor = zstandard.ZstdDecompressor()
        return "zstandard package", compressor.compress, decompressor.decompress
    program = shutil.which("zstd")
    if program is None:
        return None

    def run(args: list[str], data: bytes) -> bytes:
        done = subprocess.run([program, *args], input=data, capture_output=True, check=True)
        return done.stdout

    return (
        f"{program} -3 -T1 (the zstandard package is not installed)",
        lambda data: run(["-3", "-T1", "-q", "-c"], data),
        lambda data: run(["-d", "-q", "-c"], data),
    )


def loopback_bytes_per_second(total: int) -> float:
    """Send ``total`` bytes over a TCP connection on 127.0.0.1 (one thread reads); bytes per second."""
    import time

    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    received = [0]

    def drain() -> None:
        conn, _ = listener.accept()
        with conn:
            while chunk := conn.recv(1 << 20):
                received[0] += len(chunk)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    block = b"\0" * (1 << 20)
    with socket.create_connection(("127.0.0.1", port)) as sender:
        started = time.perf_counter()
        sent = 0
        while sent < total:
            sender.sendall(block)
            sent += len(block)
        sender.shutdown(socket.SHUT_WR)
        reader.join()
        seconds = time.perf_counter() - started
    listener.close()
    return received[0] / seconds


def _datasets(ctx: Context) -> list[tuple[str, list[bytes]]]:
    rng = random.Random(3)
    fixtures = load_bases(FIXTURE_DIR)
    real = load_bases(REAL_DIR)
    sets: list[tuple[str, list[bytes]]] = []
    if not ctx.quick and len(real) >= 50:
        sets.append((f"real torch_xla entries ({REAL_DIR})", real))
    else:
        per = ctx.pick(50, 500)
        mutated = [mutate(fixtures[i % len(fixtures)], rng) for i in range(per * len(fixtures))]
        sets.append(("the 4 fixture entries, mutated", mutated))
    data = ctx.dataset()
    sets.append(("push/warm data set", [(data.directory / key).read_bytes() for key in data.keys]))
    return sets


def _measure(
    ctx: Context,
    result: CaseResult,
    name: str,
    files: list[bytes],
    codec: Codec | None,
    links: Sequence[tuple[str, float]],
) -> None:
    short = name.split(" (")[0]
    raw = sum(map(len, files))
    stream = tar_stream(files)
    work = {"MB": raw / MB}
    packed: list[bytes] = []

    def zlib_compress() -> None:
        packed[:] = [zlib.compress(f, 1) for f in files]

    def zlib_decompress() -> None:
        for p in packed:
            zlib.decompress(p)

    zc = result.add(ctx.repeat(f"{short}: zlib-1 per file, compress", zlib_compress, work=work))
    zd = result.add(ctx.repeat(f"{short}: zlib-1 per file, decompress", zlib_decompress, work=work))
    zlib_bytes = sum(map(len, packed))
    figures: dict[str, float | str] = {
        "files": len(files),
        "raw_MB": raw / MB,
        "tar_MB": len(stream) / MB,
        "zlib1_MB": zlib_bytes / MB,
        "zlib1_ratio": raw / zlib_bytes,
    }
    costs: dict[str, dict[str, float]] = {}
    for link, speed in links:
        costs[link] = {
            "none": len(stream) / speed,
            "zlib-1 stored compressed": zlib_bytes / speed + zd.median,
            "zlib-1 on the fly": zlib_bytes / speed + zc.median + zd.median,
        }
    if codec is not None:
        _, compress, decompress = codec
        box: list[bytes] = [b""]

        def zstd_compress() -> None:
            box[0] = compress(stream)

        def zstd_decompress() -> None:
            decompress(box[0])

        sc = result.add(ctx.repeat(f"{short}: zstd-3 tar stream, compress", zstd_compress, work=work))
        sd = result.add(ctx.repeat(f"{short}: zstd-3 tar stream, decompress", zstd_decompress, work=work))
        figures["zstd3_MB"] = len(box[0]) / MB
        figures["zstd3_ratio"] = len(stream) / len(box[0])
        for link, speed in links:
            costs[link]["zstd-3 stored compressed"] = len(box[0]) / speed + sd.median
            costs[link]["zstd-3 on the fly"] = len(box[0]) / speed + sc.median + sd.median
    result.figures[short] = figures
    result.figures[f"{short}: warm seconds by link"] = costs


@case("compression", "zlib-1 per file and zstd-3 over the tar stream; a warm's cost at three link speeds")
def compression(ctx: Context, result: CaseResult) -> None:
    codec = zstd_codec()
    if codec is None:
        result.notes.append("zstd not measured: neither the zstandard package nor the zstd program")
    else:
        result.notes.append(f"zstd: {codec[0]}")
    speed_series = result.add(
        ctx.repeat(
            "loopback TCP",
            lambda: loopback_bytes_per_second(ctx.pick(64, 256) * (1 << 20)),
            work={"MB": ctx.pick(64, 256) * (1 << 20) / MB},
        )
    )
    loopback = speed_series.rates()["MB/s"] * MB
    result.figures["loopback_MB_per_s"] = loopback / MB
    links = (("loopback (measured)", loopback), *LINKS)
    for name, files in _datasets(ctx):
        _measure(ctx, result, name, files, codec, links)
    result.notes.append(
        "warm seconds = bytes / link speed + (de)compression CPU seconds, added (not overlapped); "
        "'stored compressed': the server keeps the compressed form, the client only decompresses"
    )
