"""Firing one hook event: each hook's method in list order, its errors raised or turned into
warnings, an optional lock around each call and an optional timeout bounding the caller's wait
(the hook then runs on a daemon thread in a copy of the caller's contextvars).

Standard library only; `laya_edge.hooks` is the public surface and re-exports `dispatch` and
`validate_timeout`.
"""
from __future__ import annotations

import contextvars
import math
import threading
import warnings
from typing import Any, List, Optional, Sequence

from .hook_async import is_awaitable, run_coroutine_sync


def validate_timeout(value: Optional[float]) -> Optional[float]:
    """Return `value` as a positive finite float, or None for no limit.

    Zero and negatives are refused where they are set: a zero-length join races the hook.
    Non-finite values break `Thread.join`; a bool would silently mean one second.
    """
    if value is None:
        return None
    if isinstance(value, bool):
        raise ValueError("hooks_timeout must be a positive finite number or None, not a bool; "
                         f"got {value!r}")
    seconds = float(value)
    if not math.isfinite(seconds) or seconds <= 0:
        raise ValueError(f"hooks_timeout must be a positive finite number or None; got {value!r}")
    return seconds


def _hook_name(method: Any) -> str:
    return (getattr(method, "__qualname__", None) or getattr(method, "__name__", None)
            or repr(method))


def _invoke(method: Any, ctx: Any) -> None:
    outcome = method(ctx)
    if is_awaitable(outcome):
        run_coroutine_sync(outcome)


def _call_hook(method: Any, ctx: Any, timeout: Optional[float]) -> None:
    """Call one hook method, bounding the caller's wait when a timeout is set.

    A timed call runs on a daemon thread in a copy of the caller's contextvars, so request
    ids and tracing spans stay visible. Python cannot stop that thread: on timeout the hook
    keeps running and only the caller moves on.
    """
    timeout = validate_timeout(timeout)
    if timeout is None:
        _invoke(method, ctx)
        return
    raised: List[BaseException] = []
    context = contextvars.copy_context()

    def work() -> None:
        try:
            context.run(_invoke, method, ctx)
        except BaseException as exc:  # handed back to the caller's thread below
            raised.append(exc)

    worker = threading.Thread(target=work, name="laya-hook-timeout", daemon=True)
    worker.start()
    worker.join(timeout)
    if worker.is_alive():
        raise TimeoutError(f"laya: hook {_hook_name(method)} exceeded {timeout:g}s")
    if raised:
        raise raised[0]


def dispatch(hooks: Sequence[Any], event: str, ctx: Any, *, raise_errors: bool = True,
             lock: Any = None, timeout: Optional[float] = None) -> None:
    """Fire `event` on every hook that implements it, in list order.

    `lock` is held around each hook call (not the whole event), `timeout` bounds each call.
    Only `Exception`s follow `raise_errors`; KeyboardInterrupt and friends always propagate.
    """
    for hook in hooks:
        method = getattr(hook, event, None)
        if method is None:
            continue
        try:
            if lock is None:
                _call_hook(method, ctx, timeout)
            else:
                with lock:
                    _call_hook(method, ctx, timeout)
        except Exception as exc:
            if raise_errors:
                raise
            warnings.warn(f"laya: hook {type(hook).__name__}.{event} failed: {exc}",
                          RuntimeWarning, stacklevel=2)
