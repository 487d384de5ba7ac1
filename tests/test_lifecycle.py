"""The shared predict lifecycle (hooks spec sections 8.1, 8.2, 9, 11, 13, 14, 15, 18),
run through a toy runtime, and side by side with upstream laya 0.4.15's ONNXAgent lifecycle."""
import threading
import warnings

import pytest

from laya_edge import hooks as H
from toy_runtime import ToyRuntime, toy_answer


class Recorder(H.BaseHook):
    """Records every event with the context fields the spec's payload table names."""

    def __init__(self, log, name="rec"):
        self.log, self.name = log, name

    def _record(self, event, ctx):
        self.log.append((self.name, event, {
            "states": list(ctx.states) if isinstance(ctx.states, (list, tuple)) else ctx.states,
            "results": ctx.results is not None, "error": repr(ctx.error),
            "elapsed": ctx.elapsed_ms is not None, "usage": ctx.usage, "ctx": id(ctx),
            "model": ctx.model, "max_len": ctx.max_len}))

    def on_predict_start(self, ctx):
        self._record("start", ctx)

    def on_error(self, ctx):
        self._record("error", ctx)

    def on_predict_end(self, ctx):
        self._record("end", ctx)


class Raiser(H.BaseHook):
    def __init__(self, event, exc):
        self.event, self.exc = event, exc

    def on_predict_start(self, ctx):
        if self.event == "start":
            raise self.exc

    def on_error(self, ctx):
        if self.event == "error":
            raise self.exc

    def on_predict_end(self, ctx):
        if self.event == "end":
            raise self.exc


def events(log):
    return [(name, event) for name, event, _ in log]


# -- 8.1 success path -------------------------------------------------------------------------

def test_success_path_fields_and_single_context():
    log = []
    rt = ToyRuntime(model_id="m1", hooks=[Recorder(log)])
    results = rt.predict_batch(["ab", "abcd"], {"q": {}}, max_len=64)
    assert [r["answers"]["len"] for r in results] == [2, 4]
    assert events(log) == [("rec", "start"), ("rec", "end")]
    start, end = log[0][2], log[1][2]
    assert start["ctx"] == end["ctx"]
    assert start == dict(start, results=False, elapsed=False, usage=None, error="None",
                         model="m1", max_len=64)
    assert end["results"] and end["elapsed"] and end["error"] == "None"
    assert end["usage"] == {"input_tokens": 6, "output_tokens": 2}


def test_start_hook_rewrites_inputs_before_inference():
    class Rewrite(H.BaseHook):
        def on_predict_start(self, ctx):
            ctx.states = [s.upper() + "!" for s in ctx.states]
            ctx.questions = {"new": {}}
            ctx.max_len = 16

    seen = {}

    def end(ctx):
        seen.update(questions=ctx.questions, max_len=ctx.max_len)

    rt = ToyRuntime(hooks=[Rewrite()], on_predict_end=end)
    assert rt.system_one("abc", {"old": {}})["answers"] == {"len": 4}
    assert rt.inferred == [["ABC!"]]
    assert seen == {"questions": {"new": {}}, "max_len": 16}


def test_end_hook_may_replace_results_and_system_one_takes_the_first():
    def end(ctx):
        ctx.results = [{"replaced": True}]

    rt = ToyRuntime(on_predict_end=end)
    assert rt.predict_batch(["a", "b"], {}) == [{"replaced": True}]
    assert rt.system_one("a", {}) == {"replaced": True}


def test_system_one_hooks_see_one_state_list():
    log = []
    ToyRuntime(hooks=[Recorder(log)]).system_one("only", {})
    assert log[0][2]["states"] == ["only"]


# -- section 10 / 2.1: skip -----------------------------------------------------------------------

def test_skip_short_circuits_inference_but_end_runs():
    log = []
    cached = [{"cached": 1}]

    def start(ctx):
        ctx.skip(cached)

    rt = ToyRuntime(hooks=[Recorder(log, "after")], on_predict_start=start)
    out = rt.predict_batch(["a", "b"], {})
    assert out is cached  # one result for the whole call is returned as it stands
    assert rt.inferred == []
    assert events(log) == [("after", "start"), ("after", "end")]
    assert log[0][2]["results"] is False  # installed hooks run before the per-call skip


def test_skip_is_decided_after_the_whole_start_chain():
    class Skip(H.BaseHook):
        def on_predict_start(self, ctx):
            ctx.skip([{"from": "cache"}])

    class Undo(H.BaseHook):
        def on_predict_start(self, ctx):
            ctx.results = None

    rt = ToyRuntime(hooks=[Skip(), Undo()])
    assert rt.system_one("abc", {})["answers"] == {"len": 3}


def test_skip_wrong_count_follows_raise_policy():
    log = []

    def start(ctx):
        ctx.skip([{}, {}, {}])

    strict = ToyRuntime(hooks=[Recorder(log)], on_predict_start=start)
    with pytest.raises(ValueError, match=r"\(2\); got 3"):
        strict.predict_batch(["a", "b"], {})
    assert events(log) == [("rec", "start"), ("rec", "error"), ("rec", "end")]
    assert strict.inferred == []

    lenient = ToyRuntime(on_predict_start=start, hooks_raise=False)
    with pytest.warns(RuntimeWarning, match=r"_StartAdapter.on_predict_start failed: ctx.skip"):
        out = lenient.predict_batch(["a", "b"], {})
    assert [r["answers"]["len"] for r in out] == [1, 1]


# -- section 11: empty inputs ---------------------------------------------------------------------

def test_empty_call_still_fires_hooks():
    log = []
    rt = ToyRuntime(hooks=[Recorder(log)])
    assert rt.predict_batch([], {}) == []
    assert events(log) == [("rec", "start"), ("rec", "end")]
    assert log[-1][2]["usage"] == {"input_tokens": 0, "output_tokens": 0}


# -- section 13: failure matrix -------------------------------------------------------------------

def test_start_hook_failure_strict():
    log = []
    boom = RuntimeError("start failed")
    rt = ToyRuntime(hooks=[Recorder(log, "a"), Raiser("start", boom), Recorder(log, "b")])
    with pytest.raises(RuntimeError) as info:
        rt.predict_batch(["x"], {})
    assert info.value is boom
    assert events(log) == [("a", "start"), ("a", "error"), ("b", "error"), ("a", "end"),
                           ("b", "end")]
    assert rt.inferred == []
    error_fields = log[1][2]
    assert error_fields["error"] == repr(boom)
    assert error_fields["elapsed"] is False and error_fields["usage"] is None
    end_fields = log[3][2]
    assert end_fields["elapsed"] is True and end_fields["results"] is False
    assert end_fields["usage"] is None


def test_start_hook_failure_lenient_continues():
    log = []
    rt = ToyRuntime(hooks=[Raiser("start", RuntimeError("x")), Recorder(log)],
                    hooks_raise=False)
    with pytest.warns(RuntimeWarning, match="laya: hook Raiser.on_predict_start failed: x"):
        assert rt.system_one("abc", {})["answers"] == {"len": 3}
    assert events(log) == [("rec", "start"), ("rec", "end")]


def test_inference_failure_runs_error_then_end_whatever_the_policy():
    for raise_policy in (True, False):
        log = []
        boom = OSError("session failed")
        rt = ToyRuntime(hooks=[Recorder(log)], fail_with=boom, hooks_raise=raise_policy)
        with pytest.raises(OSError) as info:
            rt.predict_batch(["x"], {})
        assert info.value is boom
        assert events(log) == [("rec", "start"), ("rec", "error"), ("rec", "end")]
        assert log[2][2]["error"] == repr(boom)


def test_error_hook_failure_is_chained_onto_the_original():
    log = []
    original = OSError("inference failed")
    telemetry = RuntimeError("telemetry down")
    rt = ToyRuntime(hooks=[Raiser("error", telemetry), Recorder(log)], fail_with=original)
    with pytest.raises(OSError) as info:
        rt.predict_batch(["x"], {})
    assert info.value is original
    assert info.value.__context__ is telemetry
    assert telemetry.__context__ is original  # the cycle the spec warns about
    assert events(log) == [("rec", "start"), ("rec", "end")]  # remaining on_error skipped


def test_error_hook_failure_lenient_warns_and_continues():
    log = []
    rt = ToyRuntime(hooks=[Raiser("error", RuntimeError("t")), Recorder(log)],
                    fail_with=OSError("inference"), hooks_raise=False)
    with pytest.warns(RuntimeWarning, match="Raiser.on_error failed: t"):
        with pytest.raises(OSError) as info:
            rt.predict_batch(["x"], {})
    assert info.value.__context__ is None
    assert events(log) == [("rec", "start"), ("rec", "error"), ("rec", "end")]


def test_end_hook_failure_on_success_path():
    log = []
    audit = RuntimeError("audit failed")
    rt = ToyRuntime(hooks=[Raiser("end", audit), Recorder(log)])
    with pytest.raises(RuntimeError) as info:
        rt.system_one("x", {})
    assert info.value is audit
    assert rt.inferred == [["x"]]  # inference succeeded all the same
    assert events(log) == [("rec", "start")]  # remaining end hooks skipped

    lenient = ToyRuntime(hooks=[Raiser("end", audit), Recorder(log)], hooks_raise=False)
    with pytest.warns(RuntimeWarning, match="Raiser.on_predict_end failed: audit failed"):
        assert lenient.system_one("x", {})["answers"] == {"len": 1}


def test_end_hook_failure_on_failure_path_and_last_writer_wins():
    original = OSError("inference")
    error_hook_exc = RuntimeError("error hook")
    end_hook_exc = RuntimeError("end hook")
    rt = ToyRuntime(fail_with=original)
    with pytest.raises(OSError) as info:
        rt.predict_batch(["x"], {}, hooks=[Raiser("error", error_hook_exc),
                                           Raiser("end", end_hook_exc)])
    assert info.value is original and info.value.__context__ is end_hook_exc

    only_end = OSError("inference 2")
    with pytest.raises(OSError) as info:
        ToyRuntime(fail_with=only_end).predict_batch(["x"], {},
                                                     hooks=[Raiser("end", end_hook_exc)])
    assert info.value.__context__ is end_hook_exc


@pytest.mark.parametrize("where", ["start", "inference"])
def test_keyboard_interrupt_propagates_after_error_and_end(where):
    log = []
    interrupt = KeyboardInterrupt()
    hooks = [Recorder(log)]
    if where == "start":
        hooks.insert(0, Raiser("start", interrupt))
    rt = ToyRuntime(hooks=hooks, hooks_raise=False,
                    fail_with=interrupt if where == "inference" else None)
    with pytest.raises(KeyboardInterrupt):
        rt.system_one("x", {})
    expected = [("rec", "error"), ("rec", "end")]
    if where == "inference":
        expected.insert(0, ("rec", "start"))
    assert events(log) == expected


def test_per_call_policy_overrides_instance():
    rt = ToyRuntime(hooks=[Raiser("end", RuntimeError("e"))], hooks_raise=False)
    with pytest.raises(RuntimeError):
        rt.system_one("x", {}, hooks_raise=True)
    strict = ToyRuntime(hooks=[Raiser("end", RuntimeError("e"))])
    with pytest.warns(RuntimeWarning):
        assert strict.system_one("x", {}, hooks_raise=False)["answers"] == {"len": 1}


def test_per_call_timeout_overrides_instance():
    release = threading.Event()

    def slow(ctx):
        release.wait(5)

    rt = ToyRuntime(on_predict_end=slow)
    try:
        with pytest.raises(TimeoutError, match="exceeded 0.05s"):
            rt.system_one("x", {}, hooks_timeout=0.05)
    finally:
        release.set()
    quick = ToyRuntime(on_predict_end=lambda ctx: None, hooks_timeout=0.05)
    assert quick.system_one("x", {}, hooks_timeout=10)["answers"] == {"len": 1}


def test_gate_runs_after_usage_and_before_end_hooks():
    from laya_edge.lifecycle import run_predict
    seen = []
    call = ToyRuntime(on_predict_end=lambda ctx: seen.append(
        (ctx.usage, ctx.results[0].get("gated"))))._hook_call()
    ctx = H.PredictContext(states=["abc"], questions={})

    def gate(results):
        seen.append(("gate", ctx.usage))
        for r in results:
            r["gated"] = True

    out = run_predict(call, ctx, lambda c: [toy_answer(s) for s in c.states], gate)
    usage = {"input_tokens": 3, "output_tokens": 1}
    assert seen == [("gate", usage), (usage, True)]
    assert out[0]["gated"] is True


# -- section 9: ordering ------------------------------------------------------------------------

def test_installed_before_per_call_in_list_order_event_by_event():
    log = []
    a, b, c = Recorder(log, "A"), Recorder(log, "B"), Recorder(log, "C")
    H.set_default_hooks(hooks=[Recorder(log, "D")])
    ToyRuntime(hooks=[a, b]).system_one("x", {}, hooks=[c],
                                        on_predict_start=lambda ctx: log.append(("fn", "start", 0)),
                                        on_predict_end=lambda ctx: log.append(("fn", "end", 0)))
    assert events(log) == [("D", "start"), ("A", "start"), ("B", "start"), ("C", "start"),
                           ("fn", "start"), ("D", "end"), ("A", "end"), ("B", "end"),
                           ("C", "end"), ("fn", "end")]


# -- section 18: concurrency ------------------------------------------------------------------------

def test_hooks_concurrent_false_lock_is_reentrant():
    rt = ToyRuntime(hooks_concurrent=False)
    inner = []

    def start(ctx):
        if ctx.states == ["outer"]:
            inner.append(rt.system_one("inner", {})["answers"]["len"])

    rt.add_hook(H.normalise_hooks(on_predict_start=start))
    assert rt.system_one("outer", {})["answers"] == {"len": 5}
    assert inner == [5]


def test_hooks_concurrent_false_serialises_hook_calls_across_threads():
    import time
    active, peak = [0], [0]
    guard = threading.Lock()

    def slow(ctx):
        with guard:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        time.sleep(0.005)
        with guard:
            active[0] -= 1

    for concurrent, bound in ((False, 1), (True, 2)):
        active[0] = peak[0] = 0
        rt = ToyRuntime(on_predict_start=slow, on_predict_end=slow,
                        hooks_concurrent=concurrent)
        threads = [threading.Thread(target=lambda: [rt.system_one("x", {}) for _ in range(10)])
                   for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert (peak[0] == 1) if bound == 1 else (peak[0] >= bound)


def test_contexts_never_leak_across_threads():
    contexts = {}
    lock = threading.Lock()

    def start(ctx):
        with lock:
            contexts[ctx.run_id] = ctx.states[0]

    def end(ctx):
        assert contexts[ctx.run_id] == ctx.states[0]
        assert ctx.results[0]["answers"]["len"] == len(ctx.states[0])

    rt = ToyRuntime(on_predict_start=start, on_predict_end=end)
    errors = []

    def worker(n):
        try:
            for i in range(50):
                state = "x" * (n * 50 + i)
                assert rt.system_one(state, {})["answers"]["len"] == len(state)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and len(contexts) == 400


# -- side by side with upstream laya 0.4.15 ------------------------------------------------------

def _upstream_agent(fail_with=None, **hook_options):
    """Upstream's ONNXAgent lifecycle with its inference replaced by the toy's."""
    import laya.hooks as up
    from laya.onnx_agent import ONNXAgent

    agent = ONNXAgent.__new__(ONNXAgent)
    agent.hooks = up.normalise_hooks(hook_options.get("hooks"),
                                     hook_options.get("on_predict_start"),
                                     hook_options.get("on_predict_end"))
    agent.hooks_raise = bool(hook_options.get("hooks_raise", True))
    agent._hooks_lock = None
    agent._hooks_mutex = threading.Lock()
    agent.hooks_timeout = up.validate_timeout(hook_options.get("hooks_timeout"))
    agent.model_id = "toy"

    def infer_batch(states, questions, **kwargs):
        if fail_with is not None:
            raise fail_with
        return [toy_answer(s) for s in states]

    agent._infer_batch = infer_batch
    return agent


def _skip_one(ctx):
    ctx.skip([{"cached": True, "usage": {"input_tokens": 1}}])


def _skip_wrong(ctx):
    ctx.skip([{}, {}, {}])


def _rewrite(ctx):
    ctx.states = ["rewritten"] + list(ctx.states[1:])
    ctx.max_len = 8


SCENARIOS = {
    "success": dict(hook_options={}),
    "skip": dict(hook_options={"on_predict_start": _skip_one}),
    "skip-wrong-strict": dict(hook_options={"on_predict_start": _skip_wrong}),
    "skip-wrong-lenient": dict(hook_options={"on_predict_start": _skip_wrong,
                                             "hooks_raise": False}),
    "rewrite": dict(hook_options={"on_predict_start": _rewrite}),
    "start-raises": dict(hook_options={"hooks": [Raiser("start", RuntimeError("s"))]}),
    "start-raises-lenient": dict(hook_options={"hooks": [Raiser("start", RuntimeError("s"))],
                                               "hooks_raise": False}),
    "inference-fails": dict(hook_options={}, fail_with=OSError("infer")),
    "error-hook-fails": dict(hook_options={"hooks": [Raiser("error", RuntimeError("e"))]},
                             fail_with=OSError("infer")),
    "end-hook-fails": dict(hook_options={"hooks": [Raiser("end", RuntimeError("end"))]}),
    "end-hook-fails-lenient": dict(hook_options={"hooks": [Raiser("end", RuntimeError("end"))],
                                                 "hooks_raise": False}),
    "both-fail": dict(hook_options={"hooks": [Raiser("error", RuntimeError("e")),
                                              Raiser("end", RuntimeError("end"))]},
                      fail_with=OSError("infer")),
    "interrupt-lenient": dict(hook_options={"hooks": [Raiser("start", KeyboardInterrupt())],
                                            "hooks_raise": False}),
}


def _trace(runtime, states):
    log = []
    outcome = None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            result = runtime.predict_batch(states, {"q": {}}, hooks=[Recorder(log)])
            outcome = ("ok", result)
        except BaseException as exc:
            context = exc.__context__
            outcome = ("raised", type(exc).__name__, str(exc),
                       None if context is None else (type(context).__name__, str(context)))
    trace = [(name, event, {k: v for k, v in fields.items() if k != "ctx"})
             for name, event, fields in log]
    return trace, outcome, [str(w.message) for w in caught]


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_lifecycle_matches_upstream_onnx_agent(name):
    scenario = SCENARIOS[name]
    ours = ToyRuntime(fail_with=scenario.get("fail_with"), **scenario["hook_options"])
    theirs = _upstream_agent(fail_with=scenario.get("fail_with"), **scenario["hook_options"])
    for states in (["abc", "de"], []):
        assert _trace(ours, states) == _trace(theirs, states)


# -- laya_edge decisions beyond upstream -----------------------------------------------------------

def test_malformed_cached_usage_fails_through_error_and_end_hooks():
    log = []

    def start(ctx):
        ctx.skip([{"usage": {"input_tokens": "many"}}])

    rt = ToyRuntime(hooks=[Recorder(log)], on_predict_start=start)
    with pytest.raises(ValueError, match="many"):
        rt.system_one("x", {})
    assert events(log) == [("rec", "start"), ("rec", "error"), ("rec", "end")]


def test_failure_after_skip_still_reports_usage_and_never_masks_the_error():
    log = []
    boom = RuntimeError("later start hook")

    def skip(ctx):
        ctx.skip([{"usage": {"input_tokens": 4}}])

    rt = ToyRuntime(hooks=[Recorder(log)], on_predict_start=[skip, Raiser("start", boom).on_predict_start])
    with pytest.raises(RuntimeError) as info:
        rt.system_one("x", {})
    assert info.value is boom
    assert log[-1][1] == "end" and log[-1][2]["usage"] == {"input_tokens": 4, "output_tokens": 0}

    def bad_skip(ctx):
        ctx.skip([{"usage": {"input_tokens": "bad"}}])

    rt = ToyRuntime(on_predict_start=[bad_skip, Raiser("start", boom).on_predict_start])
    with pytest.raises(RuntimeError) as info:
        rt.system_one("x", {})
    assert info.value is boom and isinstance(info.value.__context__, ValueError)
