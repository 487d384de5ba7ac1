"""The predict lifecycle on a real ONNXAgent (docs/hooks/lifecycle.md,
docs/hooks/api.md#event-payloads, docs/hooks/errors.md; docs/design/decoding.md#the-abstention-gate,
docs/design/calls.md#long-states).

Where the trace is observable, each rule is checked side by side: the same test runs on our
agent and on upstream laya 0.4.15's ONNXAgent over the same bundle, and both must behave the
same (the payloads are identical: same graph, same model name). The hook examples shipped in
examples/hooks/ are run against a real bundle too.
"""
from __future__ import annotations

import time
import warnings
from pathlib import Path
from typing import Any, Dict, List

import pytest

from modules import load_file

from agent_support import assert_identical, edge_agent, outcome, upstream_onnx_agent

KIND = "modernbert-tiny"
EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "hooks"
EMPTY = {"model": "laya-rl-agent-onnx", "answers": {},
         "usage": {"input_tokens": 0, "output_tokens": 0}}
QUESTIONS = {
    "dept": {"type": "choice", "instructions": "Which team should handle this ticket?",
             "criteria": ["billing", "tech", "sales"]},
    "urgent": {"type": "noul", "instructions": "Is this urgent?"},
}
STATES = ["My invoice was charged twice this month.", "The app crashes when I open settings."]


@pytest.fixture(scope="module")
def bundle(bundles):
    return bundles[KIND]


@pytest.fixture(scope="module")
def built(bundle):
    return {"ours": edge_agent(bundle), "upstream": upstream_onnx_agent(bundle)}


@pytest.fixture(params=["ours", "upstream"])
def impl(request, built):
    """`(agent, hooks module)` of one runtime; tests using it must pass on both."""
    if request.param == "ours":
        from laya_edge import hooks as module
    else:
        import laya.hooks as module
        module.clear_default_hooks()
    yield built[request.param], module
    module.clear_default_hooks()


@pytest.fixture
def agent(impl):
    return impl[0]


def build(impl, bundle, **kwargs):
    """A fresh agent of the same runtime as `impl`, with constructor hook options."""
    agent, module = impl
    if module.__name__.startswith("laya_edge"):
        return edge_agent(bundle, **kwargs)
    return upstream_onnx_agent(bundle, **kwargs)


class Session:
    """Wraps the agent's onnxruntime session: counts runs, and can be told to fail."""

    def __init__(self, session, fail: BaseException = None):
        self.session, self.fail, self.runs = session, fail, 0

    def run(self, *args, **kwargs):
        self.runs += 1
        if self.fail is not None:
            raise self.fail
        return self.session.run(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.session, name)


@pytest.fixture
def session(agent, monkeypatch):
    wrapped = Session(agent.session)
    monkeypatch.setattr(agent, "session", wrapped)
    return wrapped


class Trace:
    """Records every event with the fields docs/hooks/api.md#event-payloads says are populated."""

    def __init__(self):
        self.events: List[tuple] = []
        self.contexts: List[Any] = []

    def _record(self, event, ctx):
        self.contexts.append(ctx)
        self.events.append((event, {
            "states": list(ctx.states) if isinstance(ctx.states, (list, tuple)) else ctx.states,
            "questions": ctx.questions, "results": ctx.results, "usage": ctx.usage,
            "elapsed": ctx.elapsed_ms, "error": ctx.error, "model": ctx.model,
            "agent": ctx.agent, "max_len": ctx.max_len, "head_max_len": ctx.head_max_len,
            "run_id": ctx.run_id}))

    def on_predict_start(self, ctx):
        self._record("start", ctx)

    def on_error(self, ctx):
        self._record("error", ctx)

    def on_predict_end(self, ctx):
        self._record("end", ctx)

    def names(self):
        return [event for event, _ in self.events]

    def __getitem__(self, event):
        return next(fields for name, fields in self.events if name == event)


# -- start hooks shape the call ------------------------------------------------------------

def test_start_hook_wraps_a_bare_string_into_a_list(agent, session):
    def wrap(ctx):
        if isinstance(ctx.states, str):
            ctx.states = [ctx.states]

    wrapped = agent.predict_batch(STATES[0], QUESTIONS, on_predict_start=wrap)
    assert_identical(wrapped, agent.predict_batch([STATES[0]], QUESTIONS))
    assert session.runs == 2
    with pytest.raises(TypeError, match="predict_batch expects a list of states"):
        agent.predict_batch(STATES[0], QUESTIONS)        # without the hook: refused, no run
    assert session.runs == 2


def test_start_hook_rewrites_states_and_questions_not_the_callers(agent):
    caller_states, caller_questions = list(STATES), dict(QUESTIONS)
    trace = Trace()

    def rewrite(ctx):
        ctx.states = [state.upper() for state in ctx.states]
        ctx.questions = {"only": {"type": "noul", "instructions": "Is it about money?"}}

    results = agent.predict_batch(caller_states, caller_questions, on_predict_start=rewrite,
                                  hooks=[trace])
    assert caller_states == STATES and caller_questions == QUESTIONS
    assert trace["start"]["states"] == STATES                  # the trace hook ran first
    assert trace["end"]["states"] == [s.upper() for s in STATES]
    assert [list(r["answers"]) for r in results] == [["only"], ["only"]]
    assert_identical(results, agent.predict_batch([s.upper() for s in STATES],
                                                  {"only": {"type": "noul",
                                                            "instructions": "Is it about money?"}}))


def test_start_hook_budgets_equal_per_call_budgets(agent):
    long_state = "please refund the order " * 200
    seen = []

    def budget(ctx):
        seen.append((ctx.max_len, ctx.head_max_len))
        ctx.max_len, ctx.head_max_len = 96, 24

    by_hook = agent.predict_batch([long_state], QUESTIONS, on_predict_start=budget,
                                  max_len=300, head_max_len=100)
    assert seen == [(300, 100)]                              # the hook sees the call's budgets
    assert_identical(by_hook, agent.predict_batch([long_state], QUESTIONS, max_len=96,
                                                  head_max_len=24))
    assert by_hook[0]["usage"]["input_tokens"] == 2 * 96
    assert by_hook != agent.predict_batch([long_state], QUESTIONS)


# -- skip and caching --------------------------------------------------------------------------

def test_skip_with_cached_results_runs_nothing(agent, session):
    cached = [{"model": "cache", "answers": {"dept": {"type": "choice", "choice": "tech",
                                                      "answer_confidence": 0.2}},
               "usage": {"input_tokens": 5, "output_tokens": 1}},
              {"model": "cache", "answers": {}, "usage": {"input_tokens": 2}}]
    trace = Trace()
    results = agent.predict_batch(STATES, QUESTIONS, on_predict_start=lambda ctx: ctx.skip(cached),
                                  hooks=[trace], min_confidence=0.5)
    assert results is cached and session.runs == 0
    assert trace.names() == ["start", "end"]
    assert trace["end"]["usage"] == {"input_tokens": 7, "output_tokens": 1}
    assert cached[0]["answers"]["dept"]["abstention"] == "abstained"   # the gate ran on them
    assert cached[0]["answers"]["dept"]["low_confidence"] is True


def test_skip_with_one_result_for_two_states_returns_it_as_is(agent, session):
    one = [dict(EMPTY)]
    assert agent.predict_batch(STATES, QUESTIONS, on_predict_start=lambda c: c.skip(one)) is one
    assert session.runs == 0


def test_skip_with_a_wrong_count_follows_hooks_raise(agent, session):
    three = [dict(EMPTY)] * 3
    with pytest.raises(ValueError, match=r"one per state in ctx.states \(2\); got 3"):
        agent.predict_batch(STATES, QUESTIONS, on_predict_start=lambda c: c.skip(three))
    assert session.runs == 0
    with pytest.warns(RuntimeWarning, match="laya: hook _StartAdapter.on_predict_start failed"):
        results = agent.predict_batch(STATES, QUESTIONS, hooks_raise=False,
                                      on_predict_start=lambda c: c.skip(three))
    assert session.runs == 1 and len(results) == 2          # inference ran normally


def test_cache_hook_answers_the_second_call(agent, session):
    store: Dict[str, Any] = {}

    def key(ctx, i):
        return repr([ctx.states[i], ctx.questions, ctx.model, ctx.max_len, ctx.head_max_len])

    def read(ctx):
        hits = [store.get(key(ctx, i)) for i in range(len(ctx.states))]
        if all(hit is not None for hit in hits):
            ctx.skip(hits)

    def write(ctx):
        for i, result in enumerate(ctx.results or []):
            store[key(ctx, i)] = result

    first = agent.predict_batch(STATES, QUESTIONS, on_predict_start=read, on_predict_end=write)
    second = agent.predict_batch(STATES, QUESTIONS, on_predict_start=read, on_predict_end=write)
    assert session.runs == 1
    assert all(a is b for a, b in zip(first, second))
    agent.predict_batch(STATES, QUESTIONS, on_predict_start=read, on_predict_end=write,
                        max_len=128)
    assert session.runs == 2                                 # another budget: another key


# -- empty inputs ----------------------------------------------------------------------------------

def test_empty_inputs_still_fire_hooks(agent, session):
    trace = Trace()
    assert agent.predict_batch([], QUESTIONS, hooks=[trace]) == []
    assert trace.names() == ["start", "end"]
    assert trace["end"]["results"] == [] and trace["end"]["usage"] == {"input_tokens": 0,
                                                                       "output_tokens": 0}
    trace = Trace()
    results = agent.predict_batch(STATES, {}, hooks=[trace])
    assert results == [EMPTY, EMPTY] and results[0] is not results[1]
    assert trace.names() == ["start", "end"]
    assert trace["end"]["usage"] == {"input_tokens": 0, "output_tokens": 0}
    trace = Trace()
    assert agent.system_one(STATES[0], {}, hooks=[trace]) == EMPTY
    assert trace["start"]["states"] == [STATES[0]]
    assert trace.names() == ["start", "end"]
    assert session.runs == 0
    assert repr(agent.predict_batch(STATES[:1], {})[0]) == repr(EMPTY)     # key order too


def test_empty_questions_still_refuse_a_none_state(agent):
    trace = Trace()
    with pytest.raises(TypeError, match="state must not be None"):
        agent.predict_batch([None], {}, hooks=[trace])
    assert trace.names() == ["start", "error", "end"]


# -- the error path ---------------------------------------------------------------------------

def test_inference_failure_fires_error_then_end(agent, monkeypatch):
    boom = RuntimeError("onnxruntime exploded")
    monkeypatch.setattr(agent, "session", Session(agent.session, fail=boom))
    trace = Trace()
    with pytest.raises(RuntimeError) as raised:
        agent.predict_batch(STATES, QUESTIONS, hooks=[trace], hooks_raise=False)
    assert raised.value is boom
    assert trace.names() == ["start", "error", "end"]
    error, end = trace["error"], trace["end"]
    assert error["error"] is boom and error["elapsed"] is None and error["usage"] is None
    assert end["error"] is boom and end["results"] is None and end["usage"] is None
    assert isinstance(end["elapsed"], float) and end["elapsed"] >= 0
    assert len({id(ctx) for ctx in trace.contexts}) == 1
    assert len({fields["run_id"] for _, fields in trace.events}) == 1


def test_failing_error_and_end_hooks_are_chained_not_raised(agent, monkeypatch):
    boom = RuntimeError("inference failed")
    monkeypatch.setattr(agent, "session", Session(agent.session, fail=boom))
    error_hook_exc, end_hook_exc = KeyError("telemetry down"), OSError("audit sink down")

    class Broken:
        def on_error(self, ctx):
            raise error_hook_exc

    def end(ctx):
        assert ctx.error is boom
        assert ctx.error.__context__ is error_hook_exc
        raise end_hook_exc

    with pytest.raises(RuntimeError) as raised:
        agent.system_one(STATES[0], QUESTIONS, hooks=[Broken()], on_predict_end=end)
    assert raised.value is boom
    assert raised.value.__context__ is end_hook_exc           # the last failing hook wins


def test_start_hook_failure_skips_inference(agent, session):
    trace = Trace()

    def fail(ctx):
        raise LookupError("no tenant")

    with pytest.raises(LookupError, match="no tenant"):
        agent.predict_batch(STATES, QUESTIONS, hooks=[trace], on_predict_start=fail)
    assert session.runs == 0
    assert trace.names() == ["start", "error", "end"]
    assert isinstance(trace["end"]["error"], LookupError)


def test_base_exception_from_inference_still_runs_the_end_hooks(agent, monkeypatch):
    monkeypatch.setattr(agent, "session", Session(agent.session, fail=KeyboardInterrupt()))
    trace = Trace()
    with pytest.raises(KeyboardInterrupt):
        agent.predict_batch(STATES, QUESTIONS, hooks=[trace], hooks_raise=False)
    assert trace.names() == ["start", "error", "end"]


# -- what end hooks see --------------------------------------------------------------------------

def test_end_hooks_see_usage_elapsed_and_the_results(agent):
    trace = Trace()
    before = time.perf_counter()
    results = agent.predict_batch(STATES, QUESTIONS, hooks=[trace])
    took_ms = (time.perf_counter() - before) * 1000
    end = trace["end"]
    assert end["results"] is results
    assert end["usage"] == {"input_tokens": sum(r["usage"]["input_tokens"] for r in results),
                            "output_tokens": 0}
    assert 0 < end["elapsed"] <= took_ms
    assert end["model"] == agent.model_id and end["agent"] is agent
    assert trace["start"]["results"] is None and trace["start"]["elapsed"] is None


def test_min_confidence_gate_is_applied_before_the_end_hooks(agent):
    seen = {}

    def end(ctx):
        seen.update({qid: (answer["abstention"], answer["abstention_threshold"],
                           answer.get("low_confidence"))
                     for qid, answer in ctx.results[0]["answers"].items()})

    result = agent.system_one(STATES[0], QUESTIONS, on_predict_end=end,
                              min_confidence={"noul:2": 1.0, "default": 0.0})
    assert seen == {"dept": ("passed", 0.0, None), "urgent": ("abstained", 1.0, True)}
    assert result["answers"]["urgent"]["low_confidence"] is True
    ungated = agent.system_one(STATES[0], QUESTIONS)
    assert all("abstention" not in answer for answer in ungated["answers"].values())


def test_end_hook_may_replace_the_results(agent):
    def replace(ctx):
        ctx.results = [{"replaced": True}]

    assert agent.predict_batch(STATES, QUESTIONS, on_predict_end=replace) == [{"replaced": True}]


# -- per-call policy overrides ------------------------------------------------------------------

def test_per_call_hooks_raise_overrides_the_instance(impl, bundle):
    def fail(ctx):
        raise RuntimeError("metrics down")

    strict = build(impl, bundle, on_predict_end=fail)
    with pytest.raises(RuntimeError, match="metrics down"):
        strict.system_one(STATES[0], QUESTIONS)
    with pytest.warns(RuntimeWarning, match="laya: hook _EndAdapter.on_predict_end failed: "
                                            "metrics down"):
        result = strict.system_one(STATES[0], QUESTIONS, hooks_raise=False)
    assert set(result["answers"]) == {"dept", "urgent"}

    lenient = build(impl, bundle, on_predict_end=fail, hooks_raise=False)
    with pytest.warns(RuntimeWarning):
        lenient.system_one(STATES[0], QUESTIONS)
    with pytest.raises(RuntimeError, match="metrics down"):
        lenient.system_one(STATES[0], QUESTIONS, hooks_raise=True)


def test_per_call_hooks_timeout_overrides_the_instance(impl, bundle):
    def slow(ctx):
        time.sleep(0.3)

    agent = build(impl, bundle, on_predict_start=slow, hooks_timeout=5)
    with pytest.raises(TimeoutError, match=r"^laya: hook _StartAdapter.on_predict_start "
                                           r"exceeded 0.05s$"):
        agent.system_one(STATES[0], QUESTIONS, hooks_timeout=0.05)
    assert agent.system_one(STATES[0], QUESTIONS)["answers"]     # the instance limit: 5 s
    for bad in (0, -1, float("nan"), True):
        with pytest.raises(ValueError, match="hooks_timeout must be a positive finite number"):
            agent.system_one(STATES[0], QUESTIONS, hooks_timeout=bad)


def test_configuration_errors_fire_no_hook(agent, session):
    trace = Trace()
    for kwargs in ({"min_confidence": 2}, {"hooks_timeout": 0}, {"on_predict_start": 3},
                   {"hooks": [type]}):
        with pytest.raises((TypeError, ValueError)):
            agent.predict_batch(STATES, QUESTIONS, hooks=kwargs.pop("hooks", [trace]), **kwargs)
    assert trace.events == [] and session.runs == 0


# -- ordering and process-wide defaults ---------------------------------------------------------

def test_defaults_then_installed_then_per_call(impl, bundle):
    _, module = impl
    order = []

    def named(name):
        class Named:
            def on_predict_start(self, ctx):
                order.append(("start", name))

            def on_predict_end(self, ctx):
                order.append(("end", name))
        return Named()

    module.set_default_hooks([named("default")])
    agent = build(impl, bundle, hooks=[named("installed")])
    agent.system_one(STATES[0], QUESTIONS, hooks=[named("call")],
                     on_predict_start=lambda ctx: order.append(("start", "callable")))
    assert order == [("start", "default"), ("start", "installed"), ("start", "call"),
                     ("start", "callable"), ("end", "default"), ("end", "installed"),
                     ("end", "call")]
    order.clear()
    module.clear_default_hooks()
    agent.system_one(STATES[0], QUESTIONS)
    assert order == [("start", "installed"), ("end", "installed")]


def test_defaults_set_after_construction_apply(agent, impl):
    _, module = impl
    seen = []
    module.add_default_hook(type("Seen", (), {"on_predict_end": lambda self, ctx: seen.append(
        ctx.usage)})())
    agent.predict_batch(STATES, QUESTIONS)
    assert len(seen) == 1 and seen[0]["input_tokens"] > 0


def test_hooks_installed_scope_and_registry(agent):
    trace = Trace()
    with agent.hooks_installed(trace) as scoped:
        assert scoped is agent
        agent.system_one(STATES[0], QUESTIONS)
    agent.system_one(STATES[0], QUESTIONS)
    assert trace.names() == ["start", "end"]
    agent.add_hook(trace)
    try:
        agent.system_one(STATES[0], QUESTIONS)
    finally:
        assert agent.remove_hook(trace) is True
    assert trace.names() == ["start", "end"] * 2


def test_same_trace_for_both_runtimes(built):
    """The event sequence and what each event sees are the same for both runtimes."""
    def trace_of(agent):
        trace = Trace()
        agent.predict_batch(STATES, QUESTIONS, hooks=[trace], max_len=200)
        agent.predict_batch([], QUESTIONS, hooks=[trace])
        agent.system_one(STATES[0], {}, hooks=[trace])
        with pytest.raises(ValueError):
            agent.predict_batch(STATES, {"bad": {"type": "choice"}}, hooks=[trace])
        return [(event, {k: v for k, v in fields.items()
                         if k not in ("agent", "elapsed", "run_id", "error")},
                 repr(fields["error"]), fields["elapsed"] is None)
                for event, fields in trace.events]

    assert trace_of(built["ours"]) == trace_of(built["upstream"])


# -- predict_long and hooks (docs/hooks/lifecycle.md#onnxagentpredict_long) -------------------

LONG = " ".join(f"sentence {i} about a refund for order {i * 7} that never arrived." for i in
                range(40))


def scan(agent, **kwargs):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = agent.predict_long(LONG, QUESTIONS, window=96, **kwargs)
    return result, [str(w.message) for w in caught]


def test_predict_long_left_as_built_reports_windows(impl):
    agent, _ = impl
    trace = Trace()
    result, warned = scan(agent, hooks=[trace])
    windows = trace["start"]["states"]
    assert len(windows) > 2 and all(isinstance(w, str) for w in windows)
    assert trace.names() == ["start", "end"]                 # one shared predict_batch
    assert len(trace["end"]["results"]) == len(windows)
    assert result["usage"]["windows"] == len(windows) and warned == []
    assert all(a["window"]["count"] == len(windows) for a in result["answers"].values())


def test_predict_long_skip_reports_no_window(impl):
    agent, _ = impl
    cached = {"model": "cache", "answers": {"dept": {"choice": "tech"}},
              "usage": {"input_tokens": 0, "output_tokens": 0}}
    result, warned = scan(agent, on_predict_start=lambda ctx: ctx.skip([cached]))
    assert result["usage"]["windows"] == 0 and result["answers"] == cached["answers"]
    assert "window" not in result["answers"]["dept"]
    assert result is not cached and "windows" not in cached["usage"]
    assert warned == ["laya: predict_long: a hook answered the state before it was scanned, so "
                      "no window decided the result and none is reported"]
    single = agent.predict_long("short", QUESTIONS, on_predict_start=lambda c: c.skip([cached]))
    assert single["usage"]["windows"] == 0


def test_predict_long_replaced_scan_reports_no_window(impl):
    agent, _ = impl

    def keep_two(ctx):
        ctx.states = ctx.states[:2]

    result, warned = scan(agent, on_predict_start=keep_two)
    assert result["usage"]["windows"] == 2 and warned == []
    assert all("window" not in answer for answer in result["answers"].values())

    def drop_all(ctx):
        ctx.states = []

    result, warned = scan(agent, on_predict_start=drop_all)
    assert result == {"model": "laya-rl-agent-onnx", "answers": {},
                      "usage": {"input_tokens": 0, "output_tokens": 0, "windows": 0}}
    assert warned == ["laya: predict_long: a start hook left no states to score, so the call "
                      "aggregated nothing and returns no answers"]


def test_predict_long_single_window_hooks_see_the_state(impl):
    agent, _ = impl
    trace = Trace()
    result = agent.predict_long(STATES[0], QUESTIONS, hooks=[trace])
    assert trace["start"]["states"] == [STATES[0]]
    assert result["usage"]["windows"] == 1


@pytest.mark.parametrize("hook,message", [
    ("shrink-budget", "predict_long: after the start hooks ran, the questions and token budget "
                      "(max_len=64 head_max_len=32) leave "),
    ("skip-per-window", "predict_long: a start hook answered this state with "),
    ("drop-answer", "predict_long: answer 'urgent' is missing from "),
])
def test_predict_long_hook_misuse_is_refused_like_upstream(built, hook, message):
    def shrink(ctx):
        ctx.max_len, ctx.head_max_len = 64, 32

    def skip_all(ctx):
        ctx.skip([dict(EMPTY) for _ in ctx.states])

    def drop(ctx):
        for result in ctx.results:
            result["answers"].pop("urgent", None)

    kwargs = {"shrink-budget": {"on_predict_start": shrink},
              "skip-per-window": {"on_predict_start": skip_all},
              "drop-answer": {"on_predict_end": drop}}[hook]
    ours = outcome(lambda: scan(built["ours"], **kwargs))
    theirs = outcome(lambda: scan(built["upstream"], **kwargs))
    assert ours[0] == "error" and ours[1] is ValueError and ours[2].startswith(message)
    assert ours[:3] == theirs[:3]


def test_predict_long_matches_upstream_under_hooks(built):
    """Left-as-built, skip and replaced scans give the same payloads on both runtimes."""
    def keep_two(ctx):
        ctx.states = ctx.states[:2]

    for kwargs in ({}, {"on_predict_start": keep_two},
                   {"on_predict_start": lambda c: c.skip([dict(EMPTY)])}):
        ours, theirs = scan(built["ours"], **kwargs), scan(built["upstream"], **kwargs)
        assert_identical(ours, theirs)


# -- the documented examples run against a real bundle ----------------------------------------

def load_example(name: str):
    return load_file(EXAMPLES / f"{name}.py", f"example_{name}", reuse=False)


@pytest.fixture
def counted_runs(monkeypatch):
    """Every session run of any laya_edge agent, counted."""
    import laya_edge.onnx_agent as agent_module

    runs = []
    real = agent_module.run

    def counting(session, inputs, **options):
        runs.append(inputs["input_ids"].shape)
        return real(session, inputs, **options)

    monkeypatch.setattr(agent_module, "run", counting)
    return runs


def test_cache_example_answers_the_second_call_from_the_cache(bundle, counted_runs, capsys):
    cache = load_example("cache")
    runs_at_end = []
    real_report = cache.report

    def report(ctx):
        runs_at_end.append(len(counted_runs))
        real_report(ctx)

    cache.report = report
    quietly_main(cache, bundle)
    out = capsys.readouterr().out
    assert "answered from the cache: True" in out
    # first call runs, the repeat does not, reordered criteria and a new state run, the
    # system_one of a cached state does not
    assert runs_at_end == [1, 1, 2, 3, 3]
    assert len(cache.CACHE) == 5


def test_audit_example_records_every_call(bundle, capsys):
    audit = load_example("audit")
    records = []
    real = audit.AuditLog.on_predict_end

    def keep(self, ctx):
        real(self, ctx)
        records.append(self.records[-1])

    audit.AuditLog.on_predict_end = keep
    quietly_main(audit, bundle)
    out = capsys.readouterr().out
    assert "3 audit records, 1 with an error" in out
    assert [r["states"] for r in records] == [1, 2, 1]
    assert [r["error"] for r in records[:2]] == [None, None]
    assert records[2]["error"] == ("ValueError: question 'dept': no 'instructions'; add the text "
                                   "the model should answer")
    assert records[2]["usage"] is None and records[0]["usage"]["input_tokens"] > 0
    assert all(r["elapsed_ms"] > 0 and r["model"] == str(bundle) for r in records)


def test_redact_example_redacts_before_inference(bundle, capsys):
    redact = load_example("redact")
    quietly_main(redact, bundle)
    out = capsys.readouterr().out
    reads = [line for line in out.splitlines() if "model reads:" in line]
    assert len(reads) == 2
    assert "[email]" in reads[0] and "[number]" in reads[0] and "@" not in reads[0]
    assert "[email]" in reads[1] and "[number]" in reads[1] and "+49" not in reads[1]
    assert "caller still holds: Hi, I'm jane.doe@example.com" in out
    agent = edge_agent(bundle)
    assert_identical(agent.predict_batch(redact.STATES, redact.QUESTIONS,
                                         on_predict_start=redact.redact_states),
                     agent.predict_batch([redact.redact(s) for s in redact.STATES],
                                         redact.QUESTIONS))


def quietly_main(module, bundle):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)       # the checkpoint's clamp warning
        module.main(str(bundle))
