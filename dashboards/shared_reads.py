"""Shared reads: concurrent identical requests of the dashboard share one call of its API.

:class:`SharedReads` is what :mod:`hpsearch.dashboards.app` answers every JSON request and
download through, keyed by path and query.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from dataclasses import dataclass

import anyio
from starlette.concurrency import run_in_threadpool

__all__ = ["SharedReads"]


class SharedReads:
    """Concurrent identical requests share one call of the API: the reads of one key run one at
    a time, and a request that arrives while one runs takes the answer of the next one, with
    every request that arrived meanwhile.

    Why: every warm answer still asks the store whether a trial changed (and the summary reads
    the study's attrs): about 1 ms of store queries and a thread hop per request, which at 64
    clients polling one study queues answers for 200 ms and more (benchmarks/dashboard_load.py).
    Shared, one read answers them all. Never an answer older than the request: a read that had
    started before a request arrived may have missed a change the request expects to see (a
    poll right after a write), so the request waits for the next read instead.
    """

    @dataclass
    class _Queue:
        lock: anyio.Lock
        users: int = 0     # requests holding or waiting for the lock
        started: int = 0   # reads begun so far
        done: int = 0      # the number of the last read that finished
        body: bytes = b""
        error: Exception | None = None

    def __init__(self) -> None:
        self._queues: dict[Hashable, SharedReads._Queue] = {}

    async def read(self, key: Hashable, read: Callable[[], bytes]) -> bytes:
        """``read()`` in a worker thread (the API is synchronous and asks the store), or the
        answer of a read of ``key`` that began after this call did."""
        # Per event loop thread: a lock belongs to the loop it was made in (a test client may
        # run several loops at once).
        key = (threading.get_ident(), key)
        queue = self._queues.get(key)
        if queue is None:
            queue = self._queues[key] = self._Queue(anyio.Lock())
        arrived = queue.started
        queue.users += 1
        try:
            async with queue.lock:
                if queue.done <= arrived:  # no read that began after this request has finished: run one
                    queue.started += 1
                    number = queue.started
                    try:
                        queue.body, queue.error = await run_in_threadpool(read), None
                    except Exception as exc:  # the same answer for every request that waited: re-raised below
                        queue.body, queue.error = b"", exc
                    queue.done = number
                if queue.error is not None:
                    raise queue.error
                return queue.body
        finally:
            queue.users -= 1
            if queue.users == 0:
                del self._queues[key]
