"""dispatch, the call helper, timeouts, async hooks and aggregate_usage
(hooks spec sections 7, 15, 16, 17)."""
import asyncio
import contextvars
import threading
import time
import warnings

import pytest

from laya_edge import hook_async
from laya_edge import hooks as H

REQUEST_ID = contextvars.ContextVar("request_id", default=None)


def ctx():
    return H.PredictContext(states=["s"], questions={})


class Boom:
    def __init__(self, exc=None):
        self.exc = exc or RuntimeError("hook boom")

    def on_predict_start(self, ctx):
        raise self.exc


class Log:
    def __init__(self, log, name):
        self.log, self.name = log, name

    def on_predict_start(self, ctx):
        self.log.append(self.name)


# -- 7.1 policy ---------------------------------------------------------------------------------

def test_dispatch_order_and_missing_events(impl):
    log = []

    class EndOnly:
        def on_predict_end(self, ctx):
            log.append("end-only")

    hooks = [Log(log, "a"), EndOnly(), Log(log, "b")]
    impl.dispatch(hooks, "on_predict_start", impl.PredictContext(states=[], questions={}))
    assert log == ["a", "b"]


def test_raise_policy_stops_at_first_failure(impl):
    log = []
    with pytest.raises(RuntimeError, match="hook boom"):
        impl.dispatch([Log(log, "a"), Boom(), Log(log, "b")], "on_predict_start",
                      impl.PredictContext(states=[], questions={}))
    assert log == ["a"]


def test_warn_policy_warns_once_per_failure_and_continues(impl):
    log = []

    class Metrics:
        def on_predict_end(self, ctx):
            raise ConnectionError("connection reset")

    hooks = [Boom(), Log(log, "a"), Boom(ValueError("again"))]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        impl.dispatch(hooks, "on_predict_start", impl.PredictContext(states=[], questions={}),
                      raise_errors=False)
        impl.dispatch([Metrics()], "on_predict_end", impl.PredictContext(states=[], questions={}),
                      raise_errors=False)
        impl.dispatch(impl.normalise_hooks(on_predict_start=Boom().on_predict_start),
                      "on_predict_start", impl.PredictContext(states=[], questions={}),
                      raise_errors=False)
    assert log == ["a"]
    assert [str(w.message) for w in caught] == [
        "laya: hook Boom.on_predict_start failed: hook boom",
        "laya: hook Boom.on_predict_start failed: again",
        "laya: hook Metrics.on_predict_end failed: connection reset",
        "laya: hook _StartAdapter.on_predict_start failed: hook boom",
    ]
    assert all(w.category is RuntimeWarning for w in caught)


def test_warning_points_at_dispatch_caller(impl):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        impl.dispatch([Boom()], "on_predict_start", impl.PredictContext(states=[], questions={}),
                      raise_errors=False)
    assert caught[0].filename == __file__  # stacklevel=2: the line that called dispatch


@pytest.mark.parametrize("exc_type", [KeyboardInterrupt, SystemExit, GeneratorExit])
def test_base_exceptions_always_propagate(impl, exc_type):
    log = []
    with pytest.raises(exc_type):
        impl.dispatch([Boom(exc_type()), Log(log, "after")], "on_predict_start",
                      impl.PredictContext(states=[], questions={}), raise_errors=False)
    assert log == []


def test_lock_held_around_each_hook_call_only(impl):
    lock = threading.RLock()
    held = []

    class Probe:
        def on_predict_start(self, ctx):
            held.append(lock._is_owned())

    impl.dispatch([Probe(), Probe()], "on_predict_start",
                  impl.PredictContext(states=[], questions={}), lock=lock)
    assert held == [True, True]
    assert not lock._is_owned()


def test_lock_serialises_hooks_across_threads():
    lock = threading.RLock()
    active, peak = [0], [0]
    guard = threading.Lock()

    class Slow:
        def on_predict_start(self, ctx):
            with guard:
                active[0] += 1
                peak[0] = max(peak[0], active[0])
            time.sleep(0.01)
            with guard:
                active[0] -= 1

    threads = [threading.Thread(target=H.dispatch, args=([Slow()] * 3, "on_predict_start",
                                                         ctx()), kwargs={"lock": lock})
               for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert peak[0] == 1


# -- 7.2 / 16: timeouts -------------------------------------------------------------------------

class Sleeper:
    def __init__(self, seconds, release=None):
        self.seconds, self.release = seconds, release
        self.finished = threading.Event()

    def on_predict_start(self, ctx):
        if self.release is not None:
            self.release.wait(5)
        else:
            time.sleep(self.seconds)
        self.finished.set()


def test_timeout_raises_with_qualified_name_and_keeps_running(impl):
    release = threading.Event()
    hook = Sleeper(0, release)
    started = time.perf_counter()
    with pytest.raises(TimeoutError) as info:
        impl.dispatch([hook], "on_predict_start", impl.PredictContext(states=[], questions={}),
                      timeout=0.05)
    assert time.perf_counter() - started < 2
    assert str(info.value) == "laya: hook Sleeper.on_predict_start exceeded 0.05s"
    workers = [t for t in threading.enumerate() if t.name == "laya-hook-timeout"]
    assert workers and all(t.daemon for t in workers)
    assert not hook.finished.is_set()  # still running in the background
    release.set()
    assert hook.finished.wait(5)


def test_timeout_names_adapter_for_plain_callables(impl):
    release = threading.Event()
    hooks = impl.normalise_hooks(on_predict_start=lambda c: release.wait(5))
    with pytest.raises(TimeoutError) as info:
        impl.dispatch(hooks, "on_predict_start", impl.PredictContext(states=[], questions={}),
                      timeout=0.05)
    release.set()
    assert str(info.value) == "laya: hook _StartAdapter.on_predict_start exceeded 0.05s"


def test_timeout_under_warn_policy(impl):
    release = threading.Event()
    log = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        impl.dispatch([Sleeper(0, release), Log(log, "next")], "on_predict_start",
                      impl.PredictContext(states=[], questions={}), timeout=0.05,
                      raise_errors=False)
    release.set()
    assert log == ["next"]
    assert [str(w.message) for w in caught] == [
        "laya: hook Sleeper.on_predict_start failed: laya: hook Sleeper.on_predict_start "
        "exceeded 0.05s"]


def test_fast_hook_under_timeout_and_errors_re_raised_on_caller(impl):
    log = []
    impl.dispatch([Log(log, "quick")], "on_predict_start",
                  impl.PredictContext(states=[], questions={}), timeout=5)
    assert log == ["quick"]
    with pytest.raises(RuntimeError, match="hook boom"):
        impl.dispatch([Boom()], "on_predict_start", impl.PredictContext(states=[], questions={}),
                      timeout=5)
    with pytest.raises(KeyboardInterrupt):
        impl.dispatch([Boom(KeyboardInterrupt())], "on_predict_start",
                      impl.PredictContext(states=[], questions={}), timeout=5,
                      raise_errors=False)


def test_timed_hook_sees_callers_contextvars(impl):
    seen = []

    class Reader:
        def on_predict_start(self, ctx):
            seen.append((REQUEST_ID.get(), threading.current_thread().name))
            REQUEST_ID.set("changed-in-hook")  # a copy: the caller keeps its own value

    token = REQUEST_ID.set("req-42")
    try:
        impl.dispatch([Reader()], "on_predict_start",
                      impl.PredictContext(states=[], questions={}), timeout=5)
        assert REQUEST_ID.get() == "req-42"
    finally:
        REQUEST_ID.reset(token)
    assert seen == [("req-42", "laya-hook-timeout")]


def test_untimed_hook_runs_inline(impl):
    seen = []

    class Reader:
        def on_predict_start(self, ctx):
            seen.append(threading.current_thread() is threading.main_thread())

    impl.dispatch([Reader()], "on_predict_start", impl.PredictContext(states=[], questions={}))
    assert seen == [True]


def test_timeout_releases_the_concurrency_lock(impl):
    lock = threading.RLock()
    release = threading.Event()
    with pytest.raises(TimeoutError):
        impl.dispatch([Sleeper(0, release)], "on_predict_start",
                      impl.PredictContext(states=[], questions={}), lock=lock, timeout=0.05)
    acquired = []
    other = threading.Thread(target=lambda: acquired.append(lock.acquire(timeout=1)))
    other.start()
    other.join()
    release.set()
    assert acquired == [True]  # another thread gets the lock while the slow hook still runs


def test_call_helper_revalidates_timeout(impl):
    with pytest.raises(ValueError, match="positive finite"):
        impl.dispatch([Log([], "x")], "on_predict_start",
                      impl.PredictContext(states=[], questions={}), timeout=0)


# -- 7.3 run_coroutine_sync ----------------------------------------------------------------------

async def _value(v):
    await asyncio.sleep(0)
    return v


def test_run_coroutine_sync_without_loop(impl):
    assert impl.run_coroutine_sync(_value(7)) == 7


def test_run_coroutine_sync_inside_running_loop_uses_background_loop(impl):
    async def caller():
        here = asyncio.get_running_loop()
        seen = {}

        async def probe():
            seen["loop"] = asyncio.get_running_loop()
            seen["thread"] = threading.current_thread().name
            return 5

        assert impl.run_coroutine_sync(probe()) == 5
        return here, seen

    here, seen = asyncio.run(caller())
    assert seen["loop"] is not here and seen["thread"] == "laya-async-hooks"


def test_run_coroutine_sync_on_given_loop():
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        async def where():
            return asyncio.get_running_loop()

        assert H.run_coroutine_sync(where(), loop=loop) is loop
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        loop.close()


def test_run_coroutine_sync_refuses_stopped_loop(impl):
    loop = asyncio.new_event_loop()
    coro = _value(1)
    with pytest.raises(ValueError) as info:
        impl.run_coroutine_sync(coro, loop=loop)
    loop.close()
    assert str(info.value) == "run_coroutine_sync: the loop passed is not running"
    assert coro.cr_frame is None  # closed, so no "never awaited" warning


def test_run_coroutine_sync_refuses_callers_own_loop(impl):
    async def caller():
        coro = _value(1)
        with pytest.raises(ValueError) as info:
            impl.run_coroutine_sync(coro, loop=asyncio.get_running_loop())
        assert coro.cr_frame is None
        return str(info.value)

    assert asyncio.run(caller()) == ("run_coroutine_sync: the loop passed is running in the "
                                     "calling thread; blocking on it would deadlock")


def test_background_loop_is_recreated_after_it_stops():
    first = hook_async._background_loop()
    first.call_soon_threadsafe(first.stop)
    for _ in range(100):
        if not first.is_running():
            break
        time.sleep(0.01)
    second = hook_async._background_loop()
    assert second is not first and second.is_running()
    assert H.run_coroutine_sync(_value(3), loop=second) == 3


# -- 7.2 awaitables and 7.4 AsyncHook -----------------------------------------------------------

def test_dispatch_awaits_plain_async_callables(impl):
    log = []

    async def start(ctx):
        await asyncio.sleep(0)
        log.append("async start")

    impl.dispatch(impl.normalise_hooks(on_predict_start=start), "on_predict_start",
                  impl.PredictContext(states=[], questions={}))
    assert log == ["async start"]


def test_async_hook_runs_coroutines_sync_and_in_a_loop(impl):
    log = []

    class Remote:
        async def on_predict_end(self, ctx):
            await asyncio.sleep(0)
            log.append(ctx.run_id)

        def on_route(self, ctx):  # sync events pass through
            log.append("route")

    wrapped = impl.AsyncHook(Remote())
    c = impl.PredictContext(states=[], questions={})
    for event in impl.HOOK_EVENTS:
        getattr(wrapped, event)(c)  # missing events are no-ops
    assert log == [c.run_id, "route"]

    async def from_async_code():
        impl.dispatch([wrapped], "on_predict_end", c)

    asyncio.run(from_async_code())
    assert log[-1] == c.run_id and len(log) == 3


def test_async_hook_slots_repr_and_given_loop(impl):
    hook = H.BaseHook()
    wrapped = impl.AsyncHook(hook)
    assert wrapped.hook is hook and wrapped.loop is None
    assert repr(wrapped) == f"AsyncHook({hook!r})"
    with pytest.raises(AttributeError):
        wrapped.extra = 1
    stopped = asyncio.new_event_loop()

    class Remote:
        async def on_predict_start(self, ctx):
            return None

    with pytest.raises(ValueError, match="not running"):
        impl.AsyncHook(Remote(), loop=stopped).on_predict_start(
            impl.PredictContext(states=[], questions={}))
    stopped.close()


def test_async_hook_timeout_returns_while_coroutine_continues(impl):
    done = threading.Event()

    class SlowRemote:
        async def on_predict_start(self, ctx):
            await asyncio.sleep(0.3)
            done.set()

    with pytest.raises(TimeoutError):
        impl.dispatch([impl.AsyncHook(SlowRemote())], "on_predict_start",
                      impl.PredictContext(states=[], questions={}), timeout=0.05)
    assert not done.is_set()
    assert done.wait(5)


# -- 7.5 aggregate_usage --------------------------------------------------------------------------

def test_aggregate_usage(impl):
    results = [{"usage": {"input_tokens": 5, "output_tokens": 2}},
               {"usage": {"input_tokens": "3", "extra": 9}}, {"usage": None}, {},
               {"usage": {"input_tokens": 0, "output_tokens": None}}, {"usage": {"input_tokens": 2.9}}]
    assert impl.aggregate_usage(results) == {"input_tokens": 10, "output_tokens": 2}
    assert impl.aggregate_usage([]) == {"input_tokens": 0, "output_tokens": 0}
    with pytest.raises(ValueError):
        impl.aggregate_usage([{"usage": {"input_tokens": "many"}}])
    with pytest.raises(TypeError):
        impl.aggregate_usage([{"usage": {"input_tokens": [1]}}])
    with pytest.raises(AttributeError):
        impl.aggregate_usage([None])


class Ready:
    """An awaitable that is not a coroutine."""

    def __init__(self, value):
        self.value = value

    def __await__(self):
        yield from asyncio.sleep(0).__await__()
        return self.value


def test_non_coroutine_awaitables_are_run():
    log = []
    assert H.run_coroutine_sync(Ready(9)) == 9

    def start(ctx):
        log.append("called")
        return Ready(None)

    H.dispatch(H.normalise_hooks(on_predict_start=start), "on_predict_start", ctx())

    async def inside_a_loop():
        return H.run_coroutine_sync(Ready(4))

    assert asyncio.run(inside_a_loop()) == 4
    assert log == ["called"]
