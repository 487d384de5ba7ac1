"""Backpressure for the HTTP service: at most `max_concurrent` requests answered at once, up to
`max_queue` more waiting their turn for at most `queue_timeout_s`, and a 503 with `Retry-After`
only when the queue is full or the wait expires.

Waiting requests are served in arrival order. Everything runs on the server's event loop (the
handlers await `admitted`), so the counts need no lock.
"""
from __future__ import annotations

import asyncio
import time
from collections import deque
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator, Deque


class Busy(Exception):
    """The request was not admitted: the queue is full, or its wait expired (a 503 with
    `Retry-After: 1`: the queue moves within seconds, so a client should come back soon)."""


class Admission:
    """The queue in front of the Router. `metrics` (the service's `ServiceMetrics`, or None) is
    told when a request starts waiting and when it stops (`queue_entered`, `queue_left`)."""

    def __init__(self, max_concurrent: int, max_queue: int, queue_timeout_s: float,
                 metrics: Any = None):
        self.max_concurrent, self.max_queue = max_concurrent, max_queue
        self.queue_timeout_s = queue_timeout_s
        self._metrics = metrics
        self._running = 0
        self._waiting: Deque[asyncio.Future] = deque()

    def depth(self) -> int:
        return len(self._waiting)

    @asynccontextmanager
    async def admitted(self) -> AsyncIterator[None]:
        """Inside: one of the `max_concurrent` slots is this request's."""
        if self._running < self.max_concurrent and not self._waiting:
            self._running += 1
        else:
            await self._wait_for_a_slot()
        try:
            yield
        finally:
            self._release()

    async def _wait_for_a_slot(self) -> None:
        if len(self._waiting) >= self.max_queue:
            raise Busy(f"server busy: {self.max_concurrent} requests answering and "
                       f"{self.max_queue} waiting; try again later")
        turn = asyncio.get_running_loop().create_future()
        self._waiting.append(turn)
        began = time.perf_counter()
        if self._metrics is not None:
            self._metrics.queue_entered()
        try:
            await asyncio.wait_for(asyncio.shield(turn), self.queue_timeout_s)
        except asyncio.TimeoutError:
            if turn.done():  # the slot arrived as the wait expired: take it
                return
            self._waiting.remove(turn)
            raise Busy(f"server busy: no slot freed within {self.queue_timeout_s:g} s; try "
                       "again later") from None
        except asyncio.CancelledError:  # the client went away while waiting
            if turn.done():
                self._release()
            else:
                self._waiting.remove(turn)
            raise
        finally:
            if self._metrics is not None:
                self._metrics.queue_left(time.perf_counter() - began)

    def _release(self) -> None:
        """Hand the slot to the first waiter, or free it."""
        while self._waiting:
            turn = self._waiting.popleft()
            if not turn.done():
                turn.set_result(None)
                return
        self._running -= 1
