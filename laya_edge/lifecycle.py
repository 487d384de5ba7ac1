"""The predict lifecycle every runtime shares: start hooks, inference, error hooks, end hooks.

One implementation, so ONNXAgent and Router cannot drift apart on ordering, skip handling,
timing, usage or exception chaining.
"""
from __future__ import annotations

import time
from typing import Any, Callable, Dict, List, Optional

from .hooks import HookCall, PredictContext, aggregate_usage

Results = Optional[List[Dict[str, Any]]]
Gate = Callable[[List[Dict[str, Any]]], None]


def _settle(ctx: PredictContext, gate: Optional[Gate]) -> None:
    """Usage first, then the gate, so end hooks see the payload the caller gets."""
    ctx.usage = aggregate_usage(ctx.results)
    if gate is not None:
        gate(ctx.results)


def run_predict(call: HookCall, ctx: PredictContext,
                infer: Callable[[PredictContext], Results],
                gate: Optional[Gate] = None) -> Results:
    """Run one call's lifecycle around `infer` and return what the end hooks left in ctx.results.

    `infer(ctx)` runs only when no start hook answered with `ctx.skip()`, after the whole start
    chain, so it reads the states, questions and budgets as the hooks left them. `gate` is
    applied to the results in place, after usage and before the end hooks.

    The error hooks run before the end hooks, and the end hooks always run. Nothing raised
    while a failure propagates can mask it: such an exception becomes the failure's
    `__context__`. A malformed usage block in a cached result is itself a failure of the call
    (error hooks, then end hooks), not an escape from the clean-up step.
    """
    try:
        call.fire("on_predict_start", ctx)
        if ctx.results is None:
            ctx.results = infer(ctx)
        if ctx.results is not None:
            _settle(ctx, gate)
    except BaseException as exc:
        ctx.error = exc
        try:
            call.fire("on_error", ctx)
        except BaseException as hook_exc:
            exc.__context__ = hook_exc
        raise
    finally:
        ctx.elapsed_ms = (time.perf_counter() - ctx.started_at) * 1000.0
        if ctx.error is not None and ctx.results is not None and ctx.usage is None:
            try:
                _settle(ctx, gate)
            except Exception as settle_exc:
                ctx.error.__context__ = settle_exc
        try:
            call.fire("on_predict_end", ctx)
        except BaseException as hook_exc:
            if ctx.error is None:
                raise
            ctx.error.__context__ = hook_exc
    return ctx.results
