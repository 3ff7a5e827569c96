"""The change feed route: a long poll per follower, waiting on the event loop
(:mod:`cache_server.service.feed`)."""

from __future__ import annotations

import time
from typing import Annotated

import anyio
import anyio.to_thread
from fastapi import APIRouter, Query, Request

from cache_server.api.access import Scope, declare
from cache_server.api.deps import ServiceDep, get_feed_watcher
from cache_server.api.schemas import INDEX_INT_MAX, FeedEntryOut, FeedOut
from cache_server.auth.tokens import Role
from cache_server.errors import ClientAborted
from cache_server.names import check_namespace
from cache_server.service.feed import LOOKBACK, FeedWatcher

__all__ = ["MAX_WAIT_SECONDS", "router"]

router = APIRouter(prefix="/v1/namespaces/{namespace}", tags=["entries"])

MAX_WAIT_SECONDS = 60.0


async def _wait_while_connected(
    request: Request, watcher: FeedWatcher, namespace: str, seconds: float
) -> bool:
    """Wait as :meth:`FeedWatcher.wait` does, unless the client hangs up first: False then.

    Without this, a poll whose client went away waited out its ``wait`` (up to a minute) with its request
    state held; 2,000 hang-ups held 2,000 of them (RSS 96 -> 136 MB, and up while they arrived faster than
    they expired). A GET has no body: the message after the first is the disconnect.
    """
    gone = False

    async def listen() -> None:
        nonlocal gone
        while (await request.receive())["type"] != "http.disconnect":
            pass
        gone = True
        group.cancel_scope.cancel()

    async with anyio.create_task_group() as group:
        group.start_soon(listen)
        await watcher.wait(namespace, seconds)
        group.cancel_scope.cancel()
    return not gone


@router.get("/feed", response_model=FeedOut)
@declare(Role.READ, Scope.PATH_NAMESPACE)
async def feed(
    namespace: str,
    request: Request,
    service: ServiceDep,
    after: Annotated[
        int | None,
        Query(ge=0, le=INDEX_INT_MAX, description="The cursor of the last answer; none: start now."),
    ] = None,
    wait: Annotated[
        float, Query(ge=0, le=MAX_WAIT_SECONDS, description="Seconds to wait for a new entry.")
    ] = 20.0,
    limit: Annotated[int, Query(ge=1, le=10_000, description="At most this many entries.")] = 1000,
) -> FeedOut:
    """The entries stored in the namespace after ``after`` (each upload appends one), answered as soon as
    there is one, or empty after ``wait`` seconds; a waiting request holds no worker thread. Without
    ``after``: the cursor to start from, at once. Entries from shortly before the cursor may come again
    (two uploads may commit out of order): drop those already fetched. Fetch each with
    ``GET .../entries/{key}`` and ``X-Live-Delivery: 1`` to have it counted as delivered live."""
    check_namespace(namespace)
    watcher = get_feed_watcher(request)
    if after is None:
        head = await anyio.to_thread.run_sync(service.feed_head, limiter=watcher.threads)
        return FeedOut(namespace=namespace, cursor=head, entries=[])
    deadline = time.monotonic() + wait
    while True:
        start = max(0, after - LOOKBACK)
        rows = await anyio.to_thread.run_sync(service.feed, namespace, start, limit, limiter=watcher.threads)
        newest = max((row.seq for row in rows), default=after)
        left = deadline - time.monotonic()
        if newest > after or left <= 0:
            return FeedOut(
                namespace=namespace,
                cursor=max(after, newest),
                entries=[FeedEntryOut(**vars(row)) for row in rows],
            )
        if not await _wait_while_connected(request, watcher, namespace, left):
            raise ClientAborted("The follower hung up while its long poll waited.")
