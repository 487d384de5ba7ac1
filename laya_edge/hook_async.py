"""Running a hook's coroutine from the synchronous core: `asyncio.run` when no loop runs on
this thread, else a background loop (blocking a thread on its own loop would deadlock).

Standard library only, and asyncio is imported when a hook first returns an awaitable, so
`import laya_edge` stays cheap.
"""
from __future__ import annotations

import threading
from collections.abc import Awaitable as AwaitableABC
from types import CoroutineType, GeneratorType
from typing import TYPE_CHECKING, Any, Awaitable, Optional

if TYPE_CHECKING:  # annotations only
    import asyncio


_BACKGROUND_LOOP: Optional[asyncio.AbstractEventLoop] = None
_BACKGROUND_LOOP_LOCK = threading.Lock()


def _background_loop() -> asyncio.AbstractEventLoop:
    """The process-wide loop for coroutines whose caller already runs a loop of its own."""
    import asyncio

    global _BACKGROUND_LOOP
    with _BACKGROUND_LOOP_LOCK:
        if _BACKGROUND_LOOP is None or not _BACKGROUND_LOOP.is_running():
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="laya-async-hooks",
                             daemon=True).start()
            _BACKGROUND_LOOP = loop
        return _BACKGROUND_LOOP


def _running_loop() -> Optional[asyncio.AbstractEventLoop]:
    import asyncio

    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def is_awaitable(value: Any) -> bool:
    """`inspect.isawaitable`, without importing inspect and asyncio (tens of ms) until a hook
    really returns an awaitable: `import laya_edge` stays cheap."""
    return isinstance(value, AwaitableABC) or (isinstance(value, GeneratorType) and bool(
        value.gi_code.co_flags & 0x100))  # CO_ITERABLE_COROUTINE


def _refuse(coro: Awaitable[Any], message: str) -> None:
    if isinstance(coro, CoroutineType):
        coro.close()
    raise ValueError(message)


async def _awaited(awaitable: Awaitable[Any]) -> Any:
    return await awaitable


def run_coroutine_sync(coro: Awaitable[Any],
                       loop: Optional[asyncio.AbstractEventLoop] = None) -> Any:
    """Run an awaitable to completion from synchronous code and return its value.

    Without a running loop on this thread it uses `asyncio.run`; inside one it hands the
    coroutine to a background loop, because blocking this thread on its own loop deadlocks.
    A given `loop` must be running, and not on this thread, for the same reason. Awaitables
    that are not coroutines (objects with `__await__`) are wrapped in one, since the asyncio
    entry points take coroutines only.
    """
    import asyncio

    if not asyncio.iscoroutine(coro):
        coro = _awaited(coro)
    if loop is not None:
        if not loop.is_running():
            _refuse(coro, "run_coroutine_sync: the loop passed is not running")
        if loop is _running_loop():
            _refuse(coro, "run_coroutine_sync: the loop passed is running in the calling "
                          "thread; blocking on it would deadlock")
        return asyncio.run_coroutine_threadsafe(coro, loop).result()
    if _running_loop() is None:
        return asyncio.run(coro)
    return asyncio.run_coroutine_threadsafe(coro, _background_loop()).result()
