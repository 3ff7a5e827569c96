"""Upload bodies: the slots uploads run in, and their bodies read off the network in pieces, paced and
bounded, and handed to a worker thread one piece at a time."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import anyio
import anyio.from_thread
from fastapi import Request

from cache_server.errors import BodyTimeout, ClientAborted, UploadsBusy, UploadTooLarge
from cache_server.streams import PIECE, Coalescer

__all__ = ["BulkLimits", "UploadBody", "UploadSlots", "blocking_body"]

DURATION_SLACK = 0.05  # seconds: a wait cut at a body's longest duration counts as reaching it


class UploadSlots:
    """The worker threads of entry uploads, apart from the default thread limiter the sync routes use.

    An upload holds a thread for as long as its body takes to arrive, so uploads that stall must not take
    the threads that ``/healthz``, downloads and ``/metrics`` need: at most ``size`` uploads run at once
    (``XLA_CACHE_MAX_CONCURRENT_UPLOADS``), each on a thread of this limiter, and one more waits at most
    ``wait_seconds`` (``XLA_CACHE_UPLOAD_WAIT_SECONDS``) for a slot before it is refused with 503.
    Built by the app's lifespan, on the event loop that serves the app (:func:`cache_server.app.create_app`).
    """

    def __init__(self, size: int, wait_seconds: float) -> None:
        self.size = size
        self.wait_seconds = wait_seconds
        self._slots = anyio.Semaphore(size)
        self.threads = anyio.CapacityLimiter(size)  # never waits: a slot is taken first

    @property
    def in_use(self) -> int:
        return self.size - self._slots.value

    @asynccontextmanager
    async def slot(self, request: Request | None = None) -> AsyncIterator[None]:
        """Hold one upload slot; :class:`UploadsBusy` when none frees up within ``wait_seconds``
        (:class:`ClientAborted` when the ``request``'s client hung up meanwhile: not a server error)."""
        try:
            self._slots.acquire_nowait()
        except anyio.WouldBlock:
            with anyio.move_on_after(self.wait_seconds) as waited:
                await self._slots.acquire()
            if waited.cancelled_caught:
                if request is not None and await _hung_up(request):
                    raise ClientAborted("The client went away while its upload waited for a slot.") from None
                raise UploadsBusy(
                    f"All {self.size} upload slots stayed busy for {self.wait_seconds:g} s "
                    "(XLA_CACHE_MAX_CONCURRENT_UPLOADS); retry later."
                ) from None
        try:
            yield
        finally:
            self._slots.release()


async def _hung_up(request: Request, seconds: float = 0.1) -> bool:
    """Whether the client has gone: read (and drop) what arrived of the body for up to ``seconds``. The
    server only sees a hang-up once it has read what came before it (``is_disconnected`` is not enough)."""
    with anyio.move_on_after(seconds):
        while True:
            message = await request.receive()
            if message["type"] == "http.disconnect":
                return True
            if not message.get("more_body", False):
                return False
    return False


@dataclass(frozen=True)
class BulkLimits:
    """What bounds a bulk upload besides the pause and rate of every upload (see :class:`UploadBody`)."""

    bytes: int
    seconds: float
    header_bytes: int


class UploadBody:
    """The request body in pieces of at least ``piece`` bytes, but the last (each crosses to the worker thread
    in one hop): a MiB, or :data:`~cache_server.streams.ZSTD_PIECE` of a compressed body, so that the server
    stores a compressed push as it arrives rather than after its last MiB.

    A pause of more than ``idle_timeout`` seconds between two pieces off the network ends the upload with
    :class:`BodyTimeout`, and so does a body that trickles: after its first ``idle_timeout`` seconds an
    upload must have averaged ``min_rate`` bytes a second since it began (a client sending a byte every
    few seconds would otherwise hold an upload slot for hours). ``received`` counts the bytes that arrived.
    ``limits`` (a bulk upload's) also end it after ``seconds`` (:class:`BodyTimeout`) or ``bytes``
    (:class:`UploadTooLarge`).
    """

    def __init__(
        self,
        request: Request,
        idle_timeout: float,
        min_rate: int,
        piece: int = PIECE,
        limits: BulkLimits | None = None,
    ) -> None:
        self._request = request
        self._piece = piece
        self._idle_timeout = idle_timeout
        self._min_rate = min_rate
        self._limits = limits
        self.received = 0
        self.ended_by = ""  # why a BodyTimeout was raised, for the log line

    def _wait_limit(self, started: float) -> tuple[float, bool]:
        """How long the next piece may take, and whether that limit is the rate's (not the pause's or the
        longest duration's)."""
        self._check_duration(started)
        now = time.monotonic()
        limit, by_rate = self._idle_timeout, False
        if self._min_rate:
            budget = started + self._idle_timeout + self.received / self._min_rate - now
            if budget < limit:
                limit, by_rate = budget, True
        if self._limits is not None and started + self._limits.seconds - now < limit:
            limit, by_rate = started + self._limits.seconds - now, False
        return limit, by_rate

    def _check_duration(self, started: float) -> None:
        """:class:`BodyTimeout` once a body with ``limits`` has taken their ``seconds``."""
        # a wait cut at the duration's deadline may wake a hair before it: DURATION_SLACK counts as reached
        if self._limits is not None and time.monotonic() - started >= self._limits.seconds - DURATION_SLACK:
            self.ended_by = "took too long"
            raise BodyTimeout(
                f"The upload took longer than {self._limits.seconds:g} s (XLA_CACHE_MAX_BULK_SECONDS), "
                f"{self.received} bytes; nothing more was stored: split it into several requests."
            )

    async def pieces(self) -> AsyncIterator[bytes]:
        joiner = Coalescer(self._piece)
        stream = self._request.stream().__aiter__()
        started = last = time.monotonic()
        while True:
            limit, by_rate = self._wait_limit(started)
            with anyio.move_on_after(max(limit, 0.0)) as waited:
                chunk = await anext(stream, None)
            if waited.cancelled_caught:
                self._check_duration(started)
                now = time.monotonic()
                if by_rate and now - last < 0.99 * self._idle_timeout:
                    self.ended_by = "arrived too slowly"
                    raise BodyTimeout(
                        f"The upload arrived too slowly: {self.received} bytes in "
                        f"{now - started:.0f} s, under {self._min_rate} bytes/s "
                        "(XLA_CACHE_MIN_UPLOAD_BYTES_PER_SECOND); nothing was stored."
                    )
                self.ended_by = "stopped arriving"
                raise BodyTimeout(
                    f"The upload stopped arriving: nothing for {self._idle_timeout:g} s after "
                    f"{self.received} bytes (XLA_CACHE_BODY_TIMEOUT_SECONDS); nothing was stored."
                )
            if chunk is None:
                break
            last = time.monotonic()
            self.received += len(chunk)
            if self._limits is not None and self.received > self._limits.bytes:
                raise UploadTooLarge(
                    f"The upload is longer than {self._limits.bytes} bytes (XLA_CACHE_MAX_BULK_BYTES); "
                    "nothing more was stored: split it into several requests."
                )
            if (joined := joiner.push(chunk)) is not None:
                yield joined
        if (joined := joiner.rest()) is not None:
            yield joined


def blocking_body(stream: AsyncIterator[bytes]) -> Iterator[bytes]:
    """Pull an async body from a worker thread, one piece at a time (never the whole body)."""

    async def next_piece() -> bytes | None:
        try:
            return await stream.__anext__()
        except StopAsyncIteration:
            return None

    while (piece := anyio.from_thread.run(next_piece)) is not None:
        yield piece
