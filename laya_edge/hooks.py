"""The hook system shared by every laya_edge runtime.

Hooks observe and shape predictions without forking the runtime: they see one
`PredictContext` per call and may rewrite its inputs, answer from a cache, or record
what happened. This module is the full public surface (`from laya_edge.hooks import ...`);
`laya_edge` re-exports the names most users need.

It imports the standard library only, so `import laya_edge` stays cheap and hooks can be
configured before any model machinery is loaded. Warning and error texts keep upstream's
`laya:` prefix so log filters written for upstream laya keep matching.
"""
from __future__ import annotations

import contextvars
import threading
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import (TYPE_CHECKING, Any, Callable, ContextManager, Dict, Iterator, List, Optional,
                    Protocol, Sequence, Union)

from .hook_async import is_awaitable, run_coroutine_sync
from .hook_dispatch import dispatch, validate_timeout

if TYPE_CHECKING:  # annotations only: asyncio loads when a hook returns an awaitable
    import asyncio

__all__ = [
    "PredictContext", "Hook", "BaseHook", "AsyncHook", "PredictHook", "HookArg",
    "PredictHookArg", "HOOK_EVENTS", "normalise_hooks", "dispatch", "aggregate_usage",
    "run_coroutine_sync", "validate_timeout", "compose_hooks", "default_hooks",
    "set_default_hooks", "add_default_hook", "clear_default_hooks", "HookRegistry",
]

HOOK_EVENTS = ("on_predict_start", "on_predict_end", "on_route", "on_load", "on_evict",
               "on_error")


def _new_run_id() -> str:
    return uuid.uuid4().hex


@dataclass(eq=False)
class PredictContext:
    """Everything one call's hooks can see and change.

    Identity semantics (`eq=False`): contexts never compare equal and hash by identity, so a
    hook can key per-call state on the context without comparing runtimes.
    """

    states: List[Any]
    questions: Dict[str, Any]
    run_id: str = field(default_factory=_new_run_id)
    results: Optional[List[Dict[str, Any]]] = None
    decision: Optional[Dict[str, Any]] = None
    model: Optional[str] = None
    agent: Any = None
    router: Any = None
    max_len: Optional[int] = None
    head_max_len: Optional[int] = None
    usage: Optional[Dict[str, int]] = None
    started_at: float = field(default_factory=time.perf_counter)
    elapsed_ms: Optional[float] = None
    error: Optional[BaseException] = None

    def skip(self, results: List[Dict[str, Any]]) -> None:
        """Answer the call from a start hook; tokenisation and the forward pass are skipped.

        The count is checked here so a wrong one fails inside the hook, under the caller's
        `hooks_raise` policy, instead of surfacing later as a short or mis-indexed result.
        """
        states = self.states
        if (isinstance(states, (list, tuple)) and isinstance(results, (list, tuple))
                and len(results) not in (1, len(states))):
            raise ValueError(
                f"ctx.skip() takes one result for the whole call or one per state in "
                f"ctx.states ({len(states)}); got {len(results)}")
        self.results = results


class Hook(Protocol):
    """Structural type of a hook: implement any subset of the six events."""

    def on_predict_start(self, ctx: PredictContext) -> None: ...
    def on_predict_end(self, ctx: PredictContext) -> None: ...
    def on_route(self, ctx: PredictContext) -> None: ...
    def on_load(self, ctx: PredictContext) -> None: ...
    def on_evict(self, ctx: PredictContext) -> None: ...
    def on_error(self, ctx: PredictContext) -> None: ...


class BaseHook:
    """A hook whose six events do nothing; subclass it when you prefer `super()` to a protocol."""

    def on_predict_start(self, ctx: PredictContext) -> None:
        return None

    def on_predict_end(self, ctx: PredictContext) -> None:
        return None

    def on_route(self, ctx: PredictContext) -> None:
        return None

    def on_load(self, ctx: PredictContext) -> None:
        return None

    def on_evict(self, ctx: PredictContext) -> None:
        return None

    def on_error(self, ctx: PredictContext) -> None:
        return None


PredictHook = Callable[[PredictContext], None]
HookArg = Union[Hook, Sequence[Hook], None]
PredictHookArg = Union[PredictHook, Sequence[PredictHook], None]


class _CallableAdapter:
    """Gives a plain callable the one event it was passed for.

    The subclass name is part of the contract: it is what warnings and timeouts name.
    """

    __slots__ = ("fn",)
    event = ""

    def __init__(self, fn: PredictHook):
        if not callable(fn):
            raise TypeError(f"{self.event} must be callable, got {type(fn).__name__}")
        self.fn = fn


class _StartAdapter(_CallableAdapter):
    __slots__ = ()
    event = "on_predict_start"

    def on_predict_start(self, ctx: PredictContext) -> Any:
        return self.fn(ctx)


class _EndAdapter(_CallableAdapter):
    __slots__ = ()
    event = "on_predict_end"

    def on_predict_end(self, ctx: PredictContext) -> Any:
        return self.fn(ctx)


def _as_sequence(value: Any) -> tuple:
    """`None` is nothing, a list or tuple is its items, anything else is one item."""
    if value is None:
        return ()
    if isinstance(value, (list, tuple)):
        return tuple(value)
    return (value,)


def _check_hook_object(hook: Any) -> None:
    if isinstance(hook, type):
        raise TypeError(f"hooks entries must be instances, not classes; got {hook.__name__}. "
                        "Instantiate it first.")
    if not any(hasattr(hook, event) for event in HOOK_EVENTS):
        raise TypeError(f"hooks entries must implement at least one of {', '.join(HOOK_EVENTS)}; "
                        f"got {type(hook).__name__}. Pass a plain callable as "
                        "on_predict_start=/on_predict_end= instead.")
    for event in HOOK_EVENTS:
        method = getattr(hook, event, None)
        if method is not None and not callable(method):
            raise TypeError(f"hooks entry {type(hook).__name__}.{event} must be callable, "
                            f"got {type(method).__name__}")


def normalise_hooks(hooks: HookArg = None, on_predict_start: PredictHookArg = None,
                    on_predict_end: PredictHookArg = None) -> List[Any]:
    """Validate and flatten hook arguments into one ordered list.

    Hook objects come first, then one adapter per start callable, then one per end callable.
    Mistakes are TypeErrors here, before any hook runs, because a misconfigured hook should
    fail the deployment, not the first request that reaches it.
    """
    flat: List[Any] = []
    for hook in _as_sequence(hooks):
        _check_hook_object(hook)
        flat.append(hook)
    flat.extend(_StartAdapter(fn) for fn in _as_sequence(on_predict_start))
    flat.extend(_EndAdapter(fn) for fn in _as_sequence(on_predict_end))
    return flat


# Process-wide defaults: read at call time so hooks set after a runtime was built still apply.
_DEFAULT_HOOKS: List[Any] = []
_DEFAULT_HOOKS_LOCK = threading.Lock()
# True while a Router calls into an agent, so defaults fire once per request, at Router level.
_SKIP_DEFAULTS: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "laya_edge_skip_default_hooks", default=False)


def default_hooks() -> List[Any]:
    """A copy of the process-wide default hooks, in order."""
    with _DEFAULT_HOOKS_LOCK:
        return list(_DEFAULT_HOOKS)


def set_default_hooks(hooks: HookArg = None, on_predict_start: PredictHookArg = None,
                      on_predict_end: PredictHookArg = None) -> None:
    """Replace the process-wide defaults (same arguments and rules as `hooks=`)."""
    normalised = normalise_hooks(hooks, on_predict_start, on_predict_end)
    with _DEFAULT_HOOKS_LOCK:
        _DEFAULT_HOOKS[:] = normalised


def add_default_hook(hook: HookArg) -> None:
    """Append one hook object, or a sequence of them, to the process-wide defaults."""
    normalised = normalise_hooks(hook)
    with _DEFAULT_HOOKS_LOCK:
        _DEFAULT_HOOKS.extend(normalised)


def clear_default_hooks() -> None:
    """Switch the process-wide defaults off."""
    with _DEFAULT_HOOKS_LOCK:
        _DEFAULT_HOOKS.clear()


def compose_hooks(installed: Sequence[Any], hooks: HookArg = None,
                  on_predict_start: PredictHookArg = None,
                  on_predict_end: PredictHookArg = None) -> List[Any]:
    """The hooks of one call: defaults, then `installed`, then the per-call arguments."""
    defaults = [] if _SKIP_DEFAULTS.get() else default_hooks()
    return defaults + list(installed) + normalise_hooks(hooks, on_predict_start, on_predict_end)


@contextmanager
def defaults_suppressed() -> Iterator[None]:
    """Scope in which `compose_hooks` leaves the defaults out (a Router calling its agent)."""
    token = _SKIP_DEFAULTS.set(True)
    try:
        yield
    finally:
        _SKIP_DEFAULTS.reset(token)


class AsyncHook:
    """Runs a hook's `async def` events to completion inside the synchronous core.

    Pass `loop=` to funnel every coroutine onto one loop you run elsewhere (a client bound to
    that loop, for example).
    """

    __slots__ = ("hook", "loop")

    def __init__(self, hook: Any, loop: Optional[asyncio.AbstractEventLoop] = None):
        if isinstance(hook, type):
            raise TypeError(f"AsyncHook wraps an instance, not a class; got {hook.__name__}")
        if not any(hasattr(hook, event) for event in HOOK_EVENTS):
            raise TypeError(f"AsyncHook wraps an object implementing at least one of "
                            f"{', '.join(HOOK_EVENTS)}; got {type(hook).__name__}")
        self.hook = hook
        self.loop = loop

    def _forward(self, event: str, ctx: PredictContext) -> None:
        method = getattr(self.hook, event, None)
        if method is None:
            return
        outcome = method(ctx)
        if is_awaitable(outcome):
            run_coroutine_sync(outcome, loop=self.loop)

    def on_predict_start(self, ctx: PredictContext) -> None:
        self._forward("on_predict_start", ctx)

    def on_predict_end(self, ctx: PredictContext) -> None:
        self._forward("on_predict_end", ctx)

    def on_route(self, ctx: PredictContext) -> None:
        self._forward("on_route", ctx)

    def on_load(self, ctx: PredictContext) -> None:
        self._forward("on_load", ctx)

    def on_evict(self, ctx: PredictContext) -> None:
        self._forward("on_evict", ctx)

    def on_error(self, ctx: PredictContext) -> None:
        self._forward("on_error", ctx)

    def __repr__(self) -> str:
        return f"AsyncHook({self.hook!r})"


def aggregate_usage(results: Sequence[Dict[str, Any]]) -> Dict[str, int]:
    """One token total for the call, summed over the per-state usage blocks.

    Malformed blocks raise rather than count as zero: a Router fails the request group
    whose cached payload carries one.
    """
    totals = {"input_tokens": 0, "output_tokens": 0}
    for result in results:
        usage = result.get("usage") or {}
        for key in totals:
            totals[key] += int(usage.get(key, 0) or 0)
    return totals


@dataclass(frozen=True)
class HookCall:
    """The hooks of one public call with the policy they run under, resolved up front."""

    hooks: Sequence[Any]
    raise_errors: bool
    timeout: Optional[float]
    lock: Any

    def fire(self, event: str, ctx: PredictContext) -> None:
        dispatch(self.hooks, event, ctx, raise_errors=self.raise_errors, lock=self.lock,
                 timeout=self.timeout)


class HookRegistry:
    """Mixin giving a runtime its hook configuration and a thread-safe, mutable hook list.

    Mutation is copy-on-write under `_hooks_mutex`: each change assigns a new list, and a call
    works on the list it read, so adding or removing hooks never disturbs a call in flight.
    The class attributes make an instance built without `__init__` behave as hook-free.
    """

    hooks: Sequence[Any] = ()
    hooks_raise = True
    hooks_concurrent = True
    hooks_timeout: Optional[float] = None
    _hooks_lock: Any = None
    _hooks_mutex: Any = None

    def _configure_hooks(self, hooks: HookArg = None, on_predict_start: PredictHookArg = None,
                         on_predict_end: PredictHookArg = None, hooks_raise: bool = True,
                         hooks_concurrent: bool = True,
                         hooks_timeout: Optional[float] = None) -> None:
        """Validate and store the constructor's hook arguments."""
        self.hooks = normalise_hooks(hooks, on_predict_start, on_predict_end)
        self.hooks_raise = bool(hooks_raise)
        self.hooks_concurrent = bool(hooks_concurrent)
        self.hooks_timeout = validate_timeout(hooks_timeout)
        self._hooks_lock = None if self.hooks_concurrent else threading.RLock()
        self._hooks_mutex = threading.Lock()

    def _hook_call(self, hooks: HookArg = None, on_predict_start: PredictHookArg = None,
                   on_predict_end: PredictHookArg = None, hooks_raise: Optional[bool] = None,
                   hooks_timeout: Optional[float] = None) -> HookCall:
        """Resolve one call's hooks and policy; configuration errors raise here, before any hook."""
        active = compose_hooks(self.hooks, hooks, on_predict_start, on_predict_end)
        raise_errors = self.hooks_raise if hooks_raise is None else bool(hooks_raise)
        timeout = self.hooks_timeout if hooks_timeout is None else validate_timeout(hooks_timeout)
        return HookCall(active, raise_errors, timeout, self._hooks_lock)

    def _registry_mutex(self) -> Any:
        if self._hooks_mutex is None:
            self._hooks_mutex = threading.Lock()
        return self._hooks_mutex

    def add_hook(self, hook: HookArg) -> "HookRegistry":
        """Install one hook object or a sequence of them; returns self for chaining."""
        added = normalise_hooks(hook)
        with self._registry_mutex():
            self.hooks = list(self.hooks) + added
        return self

    def remove_hook(self, hook: Any) -> bool:
        """Remove every installed entry that is `hook`; True if there was one."""
        with self._registry_mutex():
            kept = [installed for installed in self.hooks if installed is not hook]
            removed = len(kept) != len(self.hooks)
            self.hooks = kept
        return removed

    def hooks_installed(self, *hooks: HookArg) -> ContextManager["HookRegistry"]:
        """Install hooks for the `with` block; the arguments are validated when called.

        On exit exactly the entries this block added are removed (the latest match of each,
        by identity), so a hook installed earlier, a hook added inside the block and an
        overlapping block's hooks all survive.
        """
        return self._installed(normalise_hooks([hook for arg in hooks
                                                for hook in _as_sequence(arg)]))

    @contextmanager
    def _installed(self, added: List[Any]) -> Iterator["HookRegistry"]:
        with self._registry_mutex():
            self.hooks = list(self.hooks) + added
        try:
            yield self
        finally:
            with self._registry_mutex():
                current = list(self.hooks)
                for hook in added:
                    for index in range(len(current) - 1, -1, -1):
                        if current[index] is hook:
                            del current[index]
                            break
                self.hooks = current
