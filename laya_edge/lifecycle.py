"""The predict lifecycle every runtime shares: start hooks, inference, error hooks, end hooks.

One implementation, so ONNXAgent and Router cannot drift apart on ordering, skip handling,
timing, usage or exception chaining.
"""
from __future__ import annotations

import time
from typing import Any, Callable, Dict, List, Optional, Sequence

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
                gate: Optional[Gate] = None,
                answered: Optional[Callable[[PredictContext], None]] = None) -> Results:
    """Run one call's lifecycle around `infer` and return what the end hooks left in ctx.results.

    `infer(ctx)` runs only when no start hook answered with `ctx.skip()`, after the whole start
    chain, so it reads the states, questions and budgets as the hooks left them. `answered(ctx)`
    runs once the results exist, inferred or skipped (a Router stamps its routing there). `gate`
    is applied to the results in place, after usage and before the end hooks.

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
            if answered is not None:
                answered(ctx)
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


def end_group(call: HookCall, contexts: Sequence[PredictContext],
              error: Optional[BaseException] = None) -> None:
    """End the requests of one Router batch group: every context gets exactly one end event.

    Contexts end in reverse start order, so a hook that set something in `on_predict_start`
    and restores it in `on_predict_end` unwinds to the value it found. On failure every context
    carries the group's exception and gets `on_error` first (before its `elapsed_ms` is set, as
    the error hooks never see timing); hook failures are chained onto it. On success the first
    end-hook failure is raised once every context has ended.
    """
    now = time.perf_counter()
    if error is not None:
        for ctx in contexts:
            ctx.error = error
    first_failure: Optional[BaseException] = None
    for ctx in reversed(contexts):
        events = ("on_error", "on_predict_end") if ctx.error is not None else ("on_predict_end",)
        for event in events:
            if event == "on_predict_end":
                ctx.elapsed_ms = (now - ctx.started_at) * 1000.0
            try:
                call.fire(event, ctx)
            except BaseException as hook_exc:
                if ctx.error is not None:
                    ctx.error.__context__ = hook_exc
                elif first_failure is None:
                    first_failure = hook_exc
    if first_failure is not None:
        raise first_failure
