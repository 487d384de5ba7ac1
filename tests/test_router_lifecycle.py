"""Router lifecycle (docs/design/routing.md, docs/hooks/lifecycle.md), as
traces compared with upstream laya 0.4.15's `laya.Router`.

Every scenario runs twice, once on `laya_edge.Router` and once on upstream's `laya.Router`, each
driving the same kind of agents: fake agents attached with `attach()` (deterministic payloads
with usage, recording their calls, optionally refusing keywords or raising) and, for model builds,
a stand-in class monkeypatched over `laya_edge.onnx_agent.ONNXAgent` / `laya.agent.Agent`, so
nothing is ever downloaded. A recording hook snapshots the context fields of
docs/hooks/api.md#event-payloads on every event; the two traces, the agent calls, the builds, the
return values, the exceptions and the warnings must be identical, except where the seeds
deliberately differ from upstream (docs/hooks/lifecycle.md, "Where laya_edge follows the seeds",
items 1, 2 and 4): there our behaviour is asserted explicitly and upstream's difference is shown. A
few tests drive real laya_edge ONNXAgents on the exported test bundles.
"""
from __future__ import annotations

import copy
import inspect
import json
import threading
import time
import warnings
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

import pytest

import laya.hooks as UH
import laya.router as UR
import laya_edge.hooks as EH
import laya_edge.residency as EResidency
import laya_edge.router as ER

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

# -- texts and questions -----------------------------------------------------------------------

EN1 = "My invoice was charged twice and I need a refund for the second payment"
EN2 = {"subject": "Password reset",
       "body": "I cannot log in to my account since yesterday, can you help me?"}
DE1 = "Mein Konto wurde zweimal belastet und ich möchte das Geld zurück haben"
DE2 = "Ich habe mein Passwort vergessen und kann mich nicht mehr anmelden"
FR1 = "Je ne peux pas me connecter à mon compte depuis hier, pouvez-vous m'aider ?"
JA1 = "注文した商品がまだ届いていません。確認してください。"
NO_LETTERS = "1234 5678 !!! ???"

Q1 = {"urgent": {"type": "noul", "instructions": "Is it urgent?"},
      "topic": {"type": "choice", "criteria": ["billing", "access", "other"]}}
Q1_REORDERED = {"topic": Q1["topic"], "urgent": Q1["urgent"]}
Q_CRIT_A = {"topic": {"type": "choice", "criteria": {"billing": "money", "access": "login"}}}
Q_CRIT_B = {"topic": {"type": "choice", "criteria": {"access": "login", "billing": "money"}}}
Q_UMLAUT = {"dringend": {"type": "noul", "instructions": "Ist es dringend? Grüße"}}

SIDES = ("edge", "upstream")


@pytest.fixture(autouse=True)
def _clean_upstream_defaults():
    UH.clear_default_hooks()
    yield
    UH.clear_default_hooks()


@pytest.fixture(autouse=True)
def _no_env(monkeypatch):
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.delenv("LAYA_SHA256_DIGESTS", raising=False)


# -- normalisation -----------------------------------------------------------------------------

def plain(value: Any) -> Any:
    """JSON-like copy: dict subclasses (RouteDecision) become dicts, tuples lists, exceptions
    `Type: message`; key order is kept (comparisons use repr, so order counts)."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, BaseException):
        return f"{type(value).__name__}: {value}"
    if isinstance(value, float):
        return round(value, 6)
    return value


def same(ours: Any, theirs: Any) -> None:
    assert ours == theirs
    assert repr(ours) == repr(theirs)


# -- recording hooks ---------------------------------------------------------------------------

class Recorder:
    """Snapshots the context fields docs/hooks/api.md#event-payloads lists, on every event."""

    EVENTS = ("on_route", "on_load", "on_evict", "on_predict_start", "on_predict_end", "on_error")

    def __init__(self, side: "Side", tag: str = "rec"):
        self.side, self.tag = side, tag

    def snap(self, event: str, ctx: Any) -> None:
        agent = ctx.agent
        self.side.trace.append({
            "tag": self.tag, "event": event,
            "states": plain(copy.deepcopy(list(ctx.states) if isinstance(ctx.states, (list, tuple))
                                          else ctx.states)),
            "questions": plain(copy.deepcopy(ctx.questions)),
            "run": self.side.ordinal(ctx.run_id),
            "results": plain(copy.deepcopy(ctx.results)),
            "decision": plain(copy.deepcopy(ctx.decision)),
            "model": ctx.model,
            "agent": None if agent is None else getattr(agent, "label", type(agent).__name__),
            "router": None if ctx.router is None else ctx.router is self.side.current,
            "max_len": ctx.max_len, "head_max_len": ctx.head_max_len,
            "usage": plain(copy.deepcopy(ctx.usage)),
            "elapsed": ctx.elapsed_ms is not None,
            "error": plain(ctx.error),
        })

    def on_route(self, ctx):
        self.snap("on_route", ctx)

    def on_load(self, ctx):
        self.snap("on_load", ctx)

    def on_evict(self, ctx):
        self.snap("on_evict", ctx)

    def on_predict_start(self, ctx):
        self.snap("on_predict_start", ctx)

    def on_predict_end(self, ctx):
        self.snap("on_predict_end", ctx)

    def on_error(self, ctx):
        self.snap("on_error", ctx)


class Act:
    """A hook running `fn(ctx)` on one event (after recording nothing)."""

    def __init__(self, event: str, fn: Callable[[Any], Any]):
        setattr(self, event, fn)


def raiser(event: str, exc: BaseException, when: Callable[[Any], bool] = lambda ctx: True) -> Act:
    def fn(ctx):
        if when(ctx):
            raise exc
    return Act(event, fn)


# -- agents ------------------------------------------------------------------------------------

class FakeAgent:
    """Deterministic agent: records its calls, runs its own installed hooks the way a real agent
    does (defaults composed at call time), optionally refuses keywords or raises."""

    def __init__(self, side: "Side", label: str, hooks: Any = None, fail: Any = None,
                 refuse: Any = (), lang_temperatures: Any = None, routing: Any = None,
                 delay: float = 0.0):
        self.side, self.label = side, label
        self.hooks = side.H.normalise_hooks(hooks)
        self.fail, self.refuse, self.own_routing, self.delay = fail, set(refuse), routing, delay
        if lang_temperatures is not None:
            self.lang_temperatures = lang_temperatures

    def payload(self, state: Any, questions: Dict[Any, Any]) -> Dict[str, Any]:
        text = json.dumps(state, sort_keys=True, ensure_ascii=False, default=str)
        answers = {}
        for i, qid in enumerate(questions):
            c = ((sum(map(ord, text)) + 17 * i) % 97) / 100
            answers[str(qid)] = {"type": "choice", "choice": "yes",
                                 "probabilities": {"yes": round(c, 2), "no": round(1 - c, 2)},
                                 "confidence": round(c, 2)}
        result = {"model": self.label, "answers": answers,
                  "usage": {"input_tokens": len(text), "output_tokens": len(questions)}}
        if self.own_routing is not None:
            result["routing"] = dict(self.own_routing)
        return result

    def _infer(self, method: str, states: List[Any], questions: Dict[Any, Any],
               kwargs: Dict[str, Any]) -> List[Dict[str, Any]]:
        self.side.calls.append((self.label, method, plain(states), list(map(str, questions)),
                                plain(kwargs)))
        for key in kwargs:
            if key in self.refuse:
                raise TypeError(f"{type(self).__name__}.{method}() got an unexpected keyword "
                                f"argument '{key}'")
        if self.delay:
            time.sleep(self.delay)
        if self.fail is not None:
            raise self.fail
        H = self.side.H
        ctx = H.PredictContext(states=list(states), questions=questions, model=self.label,
                               agent=self)
        active = H.compose_hooks(self.hooks)
        H.dispatch(active, "on_predict_start", ctx)
        if ctx.results is None:
            ctx.results = [self.payload(s, ctx.questions) for s in ctx.states]
        H.dispatch(active, "on_predict_end", ctx)
        return ctx.results

    def system_one(self, state, questions, **kwargs):
        return self._infer("system_one", [state], questions, kwargs)[0]

    def predict_batch(self, states, questions, **kwargs):
        return self._infer("predict_batch", list(states), questions, kwargs)

    def predict_long(self, state, questions, **kwargs):
        result = self._infer("predict_long", [state], questions, kwargs)[0]
        result["usage"]["windows"] = 1
        return result


class OldAgent:
    """An agent from before `lang` / `sort_by_length`: Python itself refuses the keywords."""

    def __init__(self, side: "Side", label: str = "old"):
        self.side, self.label = side, label

    def system_one(self, state, questions, max_len=None, head_max_len=None):
        self.side.calls.append((self.label, "system_one", plain([state]), list(questions),
                                {"max_len": max_len, "head_max_len": head_max_len}))
        return FakeAgent.payload(self, state, questions)

    def predict_batch(self, states, questions, batch_size=None, max_len=None, head_max_len=None):
        self.side.calls.append((self.label, "predict_batch", plain(states), list(questions),
                                {"batch_size": batch_size, "max_len": max_len}))
        return [FakeAgent.payload(self, s, questions) for s in states]

    own_routing = None


class NoLongAgent(OldAgent):
    pass


class LangLong(OldAgent):
    def predict_long(self, state, questions, window=None, stride=None, aggregate="auto",
                     batch_size=None, lang=None):
        self.side.calls.append((self.label, "predict_long", plain([state]), list(questions),
                                {"window": window, "stride": stride, "aggregate": aggregate,
                                 "batch_size": batch_size, "lang": lang}))
        result = FakeAgent.payload(self, state, questions)
        result["usage"]["windows"] = 1
        return result


class NoLangLong(OldAgent):
    def predict_long(self, state, questions, window=None, stride=None, aggregate="auto",
                     batch_size=None):
        self.side.calls.append((self.label, "predict_long", plain([state]), list(questions),
                                {"window": window, "stride": stride, "aggregate": aggregate,
                                 "batch_size": batch_size}))
        result = FakeAgent.payload(self, state, questions)
        result["usage"]["windows"] = 1
        return result


class KwLong(OldAgent):
    def predict_long(self, state, questions, **kwargs):
        self.side.calls.append((self.label, "predict_long", plain([state]), list(questions),
                                plain(kwargs)))
        result = FakeAgent.payload(self, state, questions)
        result["usage"]["windows"] = 1
        return result


# -- one implementation, and both --------------------------------------------------------------

_REAL_SIGNATURES: Dict[str, inspect.Signature] = {}


def real_signature(side_name: str) -> inspect.Signature:
    """`__init__` signature of the class the Router builds (read before any monkeypatching)."""
    if side_name not in _REAL_SIGNATURES:
        if side_name == "edge":
            import laya_edge.onnx_agent as module
            cls = module.ONNXAgent
        else:
            import laya.agent as module
            cls = module.Agent
        _REAL_SIGNATURES[side_name] = inspect.signature(cls.__init__)
    return _REAL_SIGNATURES[side_name]


class Side:
    """One implementation under test: its Router class, hook module, and what it recorded."""

    def __init__(self, name: str, monkeypatch: Any):
        self.name, self.mp = name, monkeypatch
        self.R = ER.Router if name == "edge" else UR.Router
        self.module = ER if name == "edge" else UR
        # where each implementation's residency calls gc.collect()
        self.gc_module = EResidency if name == "edge" else UR
        self.H = EH if name == "edge" else UH
        self.trace: List[Dict[str, Any]] = []
        self.calls: List[Any] = []
        self.builds: List[Any] = []
        self.current: Any = None
        self._runs: Dict[str, int] = {}
        self.lock = threading.Lock()
        self.active = self.max_active = 0
        self.collects = 0

    def ordinal(self, run_id: str) -> int:
        with self.lock:
            return self._runs.setdefault(run_id, len(self._runs))

    def router(self, **kwargs: Any) -> Any:
        kwargs.setdefault("default", "english")
        self.current = self.R(**kwargs)
        return self.current

    def rec(self, tag: str = "rec") -> Recorder:
        return Recorder(self, tag)

    def agent(self, label: str, **kwargs: Any) -> FakeAgent:
        return FakeAgent(self, label, **kwargs)

    def callable(self, tag: str) -> Callable[[Any], None]:
        recorder = Recorder(self, tag)
        return lambda ctx: recorder.snap("callable", ctx)

    def patch_builds(self, delay: float = 0.0, fail: Optional[BaseException] = None,
                     gate: Optional[threading.Event] = None,
                     started: Optional[threading.Event] = None,
                     **agent_kwargs: Any) -> None:
        """Make the Router's builds construct FakeAgents (recording repo and keywords)."""
        side = self

        class StandIn(FakeAgent):
            def __init__(self, model_id_or_path, **kwargs):
                with side.lock:
                    side.builds.append((model_id_or_path, plain(kwargs)))
                    side.active += 1
                    side.max_active = max(side.max_active, side.active)
                try:
                    if started is not None:
                        started.set()
                    if gate is not None:
                        gate.wait(10)
                    if delay:
                        time.sleep(delay)
                    if fail is not None:
                        raise fail
                finally:
                    with side.lock:
                        side.active -= 1
                sub = kwargs.get("subfolder")
                FakeAgent.__init__(self, side, f"built:{model_id_or_path}"
                                   + (f"/{sub}" if sub else ""), **agent_kwargs)
                self.revision = kwargs.get("revision")

        StandIn.__init__.__signature__ = real_signature(self.name)
        # Evictions and unloads run gc.collect() (docs/design/routing.md#residency; upstream also
        # empties torch caches): in a test process holding torch each pass costs up to a second.
        # Stand-in agents hold nothing worth collecting, so count the passes instead of running
        # them.
        self.mp.setattr(self.gc_module, "gc", _CountingGc(self))
        if self.name == "edge":
            import laya_edge.onnx_agent as module
            self.mp.setattr(module, "ONNXAgent", StandIn)
        else:
            import laya.agent as module
            self.mp.setattr(module, "Agent", StandIn)

    def set_defaults(self, *hooks: Any) -> None:
        self.H.set_default_hooks(list(hooks))


class _CountingGc:
    def __init__(self, side: "Side"):
        self.side = side

    def collect(self, *args: Any) -> int:
        self.side.collects += 1
        return 0


class Outcome:
    def __init__(self, side: Side, value: Any, error: Optional[BaseException],
                 caught: List[Any]):
        self.side, self.value, self.error = side, value, error
        self.warnings = [(w.category.__name__, str(w.message)) for w in caught]
        self.trace, self.calls, self.builds = side.trace, side.calls, side.builds

    def err(self) -> Optional[str]:
        return None if self.error is None else plain(self.error)

    def events(self, trace: Optional[List[Dict[str, Any]]] = None) -> List[tuple]:
        return [(e["tag"], e["event"]) for e in (self.trace if trace is None else trace)]


def run_side(name: str, monkeypatch: Any, scenario: Callable[[Side], Any]) -> Outcome:
    side = Side(name, monkeypatch)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            value = scenario(side)
            error = None
        except Exception as exc:  # noqa: BLE001 -- the outcome is compared
            value, error = None, exc
    EH.clear_default_hooks()
    UH.clear_default_hooks()
    return Outcome(side, plain(value), error, caught)


def both(monkeypatch: Any, scenario: Callable[[Side], Any]):
    """(ours, upstream's) outcome of one scenario."""
    return tuple(run_side(name, monkeypatch, scenario) for name in SIDES)


def assert_parity(ours: Outcome, theirs: Outcome, trace: bool = True) -> None:
    same(ours.err(), theirs.err())
    same(ours.value, theirs.value)
    same(ours.calls, theirs.calls)
    same(ours.builds, theirs.builds)
    same(ours.warnings, theirs.warnings)
    if trace:
        # the seeds' item 2 (docs/hooks/lifecycle.md): on_error never sees elapsed_ms in laya_edge
        # (upstream's predict_batch sets it before on_error); everything else must be identical
        same(without(ours.trace, "on_error", "elapsed"),
             without(theirs.trace, "on_error", "elapsed"))
        assert not any(e["elapsed"] for e in ours.trace if e["event"] == "on_error")


def without(trace: List[Dict[str, Any]], event: str, *fields: str) -> List[Dict[str, Any]]:
    return [{k: v for k, v in e.items() if not (e["event"] == event and k in fields)}
            for e in trace]


def two_agents(side: Side, **kwargs: Any) -> Any:
    router = side.router(**kwargs)
    router.attach("english", side.agent("en"))
    router.attach("multilingual", side.agent("ml", lang_temperatures={"de": {"temperature": 1}}))
    return router


# ==============================================================================================
# route and Router.predict (docs/hooks/lifecycle.md#routerroute, #routerpredict)
# ==============================================================================================

def test_route_decisions_and_on_route_hooks_match_upstream(monkeypatch):
    def scenario(side):
        router = side.router(hooks=[side.rec("installed")])
        side.set_defaults(side.rec("default"))
        out = []
        for state, kwargs in [(EN1, {}), (DE1, {}), (JA1, {}), (NO_LETTERS, {}), (EN2, {}),
                              (FR1, {"lang": "en_US.UTF-8"}), (EN1, {"lang": "C"}),
                              (EN1, {"lang_guess": lambda s: "de"}), (DE1, {"model": "EN "}),
                              (DE1, {"task": "typed-decisions"}), (EN1, {"task": "ml"}),
                              ({"a": EN1, "b": DE2}, {}), (EN1, {"explain": True})]:
            out.append(router.route(state, Q1, hooks=[side.rec("percall")], **kwargs))
        service = ER.TYPED_DECISION_WORKFLOWS["customer_service"]
        out.append(router.route(EN1, {k: {} for k in service}))
        return out

    ours, theirs = both(monkeypatch, scenario)
    assert_parity(ours, theirs)
    # every call: defaults, then installed, then per-call hooks
    # (docs/hooks/lifecycle.md#ordering-rules)
    assert ours.events()[:3] == [("default", "on_route"), ("installed", "on_route"),
                                 ("percall", "on_route")]
    first = ours.trace[0]
    assert first["states"] == [EN1] and first["questions"] == plain(Q1)
    assert first["router"] is True and first["agent"] is None and first["model"] is None
    assert [d["model"] for d in ours.value[:4]] == ["english", "multilingual", "multilingual",
                                                   "english"]


def test_on_route_may_replace_the_decision_with_a_plain_dict_naming_an_alias(monkeypatch):
    """The hook pins `ml` before anything loads: only the multilingual checkpoint is built."""
    def scenario(side):
        side.patch_builds()

        def pin(ctx):
            ctx.decision = {"model": "ml", "reason": "pinned by policy"}

        router = side.router(models={"english": "/srv/en", "multilingual": "/srv/ml"},
                             hooks=[Act("on_route", pin), side.rec()])
        result = router.predict(EN1, Q1)
        batch = router.predict_batch([{"state": EN1, "questions": Q1},
                                      {"state": DE1, "questions": Q1}])
        return {"result": result, "batch": batch, "loaded": router.loaded}

    ours, theirs = both(monkeypatch, scenario)
    assert_parity(ours, theirs)
    assert [b[0] for b in ours.builds] == ["/srv/ml"]        # english never built
    assert ours.events()[:4] == [("rec", "on_route"), ("rec", "on_load"),
                                 ("rec", "on_predict_start"), ("rec", "on_predict_end")]
    start = ours.trace[2]
    assert start["model"] == "ml"                            # predict: as routed
    assert start["decision"] == {"model": "ml", "reason": "pinned by policy"}
    assert ours.value["result"]["routing"] == {"model": "ml", "reason": "pinned by policy"}
    batch_starts = [e for e in ours.trace[4:] if e["event"] == "on_predict_start"]
    assert [e["model"] for e in batch_starts] == ["multilingual", "multilingual"]  # resolved
    assert ours.value["loaded"] == ["multilingual"]
    # one shared forward pass for both pinned requests
    assert [c[1] for c in ours.calls] == ["system_one", "predict_batch"]
    assert ours.calls[1][2] == [EN1, DE1]


def test_predict_hook_layers_defaults_once_and_agent_hooks_inside(monkeypatch):
    """Per-call hooks reach on_route, per-call callables do not; defaults fire once per request
    at Router level (not again inside the agent); the agent's installed hooks still fire."""
    def scenario(side):
        router = side.router(hooks=[side.rec("installed")])
        router.attach("english", side.agent("en", hooks=[side.rec("agent")]))
        side.set_defaults(side.rec("default"))
        result = router.predict(EN1, Q1, hooks=[side.rec("percall")],
                                on_predict_start=side.callable("start-fn"),
                                on_predict_end=side.callable("end-fn"), max_len=128)
        return result

    ours, theirs = both(monkeypatch, scenario)
    assert_parity(ours, theirs)
    assert ours.events() == [
        ("default", "on_route"), ("installed", "on_route"), ("percall", "on_route"),
        ("default", "on_predict_start"), ("installed", "on_predict_start"),
        ("percall", "on_predict_start"), ("start-fn", "callable"),
        ("agent", "on_predict_start"), ("agent", "on_predict_end"),
        ("default", "on_predict_end"), ("installed", "on_predict_end"),
        ("percall", "on_predict_end"), ("end-fn", "callable")]
    start, end = ours.trace[3], ours.trace[9]
    assert start["run"] == end["run"] and start["run"] != ours.trace[0]["run"]
    assert start == dict(start, states=[EN1], model="english", agent="en", router=True,
                         max_len=128, head_max_len=None, results=None, usage=None,
                         elapsed=False, error=None)
    assert start["decision"]["model"] == "english"
    assert end["usage"] == {"input_tokens": len(json.dumps(EN1)), "output_tokens": 2}
    assert end["elapsed"] is True
    agent_start = ours.trace[7]
    assert agent_start["model"] == "en" and agent_start["router"] is None
    assert ours.calls == [("en", "system_one", [EN1], ["urgent", "topic"],
                           {"lang": "en", "max_len": 128})]
    assert ours.value["routing"]["model"] == "english"


def test_predict_batch_defaults_fire_once_per_request(monkeypatch):
    def scenario(side):
        router = side.router()
        router.attach("english", side.agent("en", hooks=[side.rec("agent")]))
        side.set_defaults(side.rec("default"))
        return router.predict_batch([{"state": EN1, "questions": Q1},
                                     {"state": EN2, "questions": Q1}])

    ours, theirs = both(monkeypatch, scenario)
    assert_parity(ours, theirs)
    assert ours.events() == [("default", "on_route")] * 2 + [("default", "on_predict_start")] * 2 \
        + [("agent", "on_predict_start"), ("agent", "on_predict_end")] \
        + [("default", "on_predict_end")] * 2


def test_routing_is_added_to_results_and_skipped_results_without_overwriting(monkeypatch):
    def scenario(side):
        def cache(ctx):
            state = ctx.states[0]
            if state == "CACHED plain":
                ctx.skip([{"answers": {}, "usage": {"input_tokens": 1, "output_tokens": 0}}])
            elif state == "CACHED routed":
                ctx.skip([{"answers": {}, "routing": {"model": "cache"}}])

        router = side.router(hooks=[Act("on_predict_start", cache), side.rec()])
        router.attach("english", side.agent("en", routing={"model": "agent-says"}))
        return {
            "inferred": router.predict(EN1, Q1),            # agent routing overwritten
            "skipped": router.predict("CACHED plain", Q1),  # routing added
            "kept": router.predict("CACHED routed", Q1),    # cached routing kept
            "batch": router.predict_batch([{"state": "CACHED plain", "questions": Q1},
                                           {"state": "CACHED routed", "questions": Q1},
                                           {"state": EN1, "questions": Q1}]),
        }

    ours, theirs = both(monkeypatch, scenario)
    assert_parity(ours, theirs)
    value = ours.value
    assert value["inferred"]["routing"]["model"] == "english"
    assert value["skipped"]["routing"]["model"] == "english"
    assert value["kept"]["routing"] == {"model": "cache"}
    assert [r["routing"]["model"] for r in value["batch"]] == ["english", "cache", "english"]
    assert [c[2] for c in ours.calls] == [[EN1], [EN1]]       # cache hits never reach the agent


def test_predict_pre_checks_raise_before_any_event(monkeypatch):
    class NotAHook:
        pass

    def scenario(side):
        router = side.router(hooks=[side.rec()])
        router.attach("english", side.agent("en"))
        messages = []
        for kwargs in [dict(state=None, questions=Q1), dict(state=EN1, questions=["q"]),
                       dict(state=EN1, questions=Q1, min_confidence=1.5),
                       dict(state=EN1, questions=Q1, hooks=[Recorder]),
                       dict(state=EN1, questions=Q1, hooks=[NotAHook()]),
                       dict(state=EN1, questions=Q1, on_predict_start=5),
                       dict(state=EN1, questions=Q1, hooks_timeout=0),
                       dict(state=EN1, questions=Q1, hooks_timeout=True)]:
            try:
                router.predict(**kwargs)
            except (TypeError, ValueError) as exc:
                messages.append(plain(exc))
        try:
            router.route(EN1, ["not", "a", "dict"])
        except TypeError as exc:
            messages.append(plain(exc))
        return messages

    ours, theirs = both(monkeypatch, scenario)
    assert_parity(ours, theirs)
    assert ours.trace == [] and ours.calls == []
    assert ours.value[:2] == [
        "TypeError: state must not be None; pass a string, dict, or list",
        "TypeError: questions must be a dict of question id -> definition, got list"]
    assert ours.value[-1] == ("TypeError: questions must be a dict of question id -> definition, "
                              "got list")
    assert len(ours.value) == 9


def test_predict_inference_failure_fires_error_then_end(monkeypatch):
    def scenario(side):
        router = side.router(hooks=[side.rec()])
        router.attach("english", side.agent("en", fail=RuntimeError("model exploded")))
        router.predict(EN1, Q1)

    ours, theirs = both(monkeypatch, scenario)
    assert_parity(ours, theirs)
    assert ours.err() == "RuntimeError: model exploded"
    assert ours.events() == [("rec", "on_route"), ("rec", "on_predict_start"),
                             ("rec", "on_error"), ("rec", "on_predict_end")]
    error, end = ours.trace[2], ours.trace[3]
    assert error["elapsed"] is False and error["usage"] is None
    assert error["error"] == end["error"] == "RuntimeError: model exploded"
    assert end["elapsed"] is True and end["results"] is None and end["usage"] is None


def test_predict_min_confidence_gate_applies_before_end_hooks(monkeypatch):
    def scenario(side):
        router = side.router(hooks=[side.rec()])
        router.attach("english", side.agent("en"))
        single = router.predict(EN1, Q1, min_confidence=0.5)
        batch = router.predict_batch([{"state": EN1, "questions": Q1},
                                      {"state": EN2, "questions": Q1}],
                                     min_confidence={"choice:2": 0.6, "default": 0.1})
        return {"single": single, "batch": batch}

    ours, theirs = both(monkeypatch, scenario)
    assert_parity(ours, theirs)
    ends = [e for e in ours.trace if e["event"] == "on_predict_end"]
    assert all("abstention" in a for e in ends for r in e["results"]
               for a in r["answers"].values())
    assert ends[0]["results"] == [ours.value["single"]]


@pytest.mark.parametrize("failure", ["on_route", "build", "on_load", "on_evict"])
def test_route_and_load_failures_in_predict_fire_no_predict_event(monkeypatch, failure):
    """The seeds' item 1 (docs/hooks/lifecycle.md): the seeds win -- route and load happen before
    the predict context exists, so their failures propagate with no start, error or end event.
    Upstream
    0.4.15 wraps them in the predict try block and fires on_error + on_predict_end."""
    def scenario(side):
        side.patch_builds(fail=OSError("no weights") if failure == "build" else None)
        hooks = [side.rec()]
        if failure in ("on_route", "on_load", "on_evict"):
            hooks.insert(0, raiser(failure, RuntimeError(f"{failure} hook failed")))
        router = side.router(models={"english": "/srv/en", "multilingual": "/srv/ml"},
                             max_loaded=1, hooks=hooks if failure != "on_evict" else [side.rec()])
        if failure == "on_evict":
            router.load("multilingual")
            router.add_hook(hooks[0])
        try:
            router.predict(EN1, Q1)
        finally:
            side.loaded_after = router.loaded

    ours, theirs = both(monkeypatch, scenario)
    expected = {"on_route": "RuntimeError: on_route hook failed", "build": "OSError: no weights",
                "on_load": "RuntimeError: on_load hook failed",
                "on_evict": "RuntimeError: on_evict hook failed"}[failure]
    assert ours.err() == theirs.err() == expected
    same(ours.builds, theirs.builds)
    predict_events = {"on_predict_start", "on_error", "on_predict_end"}
    assert not [e for e in ours.trace if e["event"] in predict_events]
    upstream_predict = [e for e in theirs.trace if e["event"] in predict_events]
    assert [e["event"] for e in upstream_predict] == ["on_error", "on_predict_end"]
    assert upstream_predict[0]["error"] == expected
    # the lifecycle events themselves are identical
    same([e for e in ours.trace if e["event"] not in predict_events],
         [e for e in theirs.trace if e["event"] not in predict_events])
    # a failing on_load / on_evict leaves the new agent resident
    # (docs/hooks/lifecycle.md#model-lifecycle-on_load-and-on_evict)
    if failure in ("on_load", "on_evict"):
        assert ours.side.loaded_after == theirs.side.loaded_after == ["english"]
    elif failure == "build":
        assert ours.side.loaded_after == []


def test_edge_default_is_english_where_upstream_is_multilingual(monkeypatch):
    """The seeds' item 4 (docs/hooks/lifecycle.md): default="english"."""
    ours, theirs = ER.Router(), UR.Router()
    assert ours.default == "english" and theirs.default == "multilingual"
    assert inspect.signature(ER.Router.__init__).parameters["default"].default == "english"
    for state in (NO_LETTERS, "Hello there"):
        assert ours.route(state)["model"] == "english"
        assert theirs.route(state)["model"] == "multilingual"
        assert ours.route(state)["reason"].endswith("using default (english)")
    assert ER.Router(default="ml").route(NO_LETTERS)["model"] == "multilingual"
    # with the same default, the decisions are identical
    assert plain(ER.Router(default="multilingual").route("Hello there")) == \
        plain(UR.Router().route("Hello there"))


# ==============================================================================================
# predict_batch (docs/hooks/lifecycle.md#routerpredict_batch, docs/design/routing.md#answering)
# ==============================================================================================

def grouping_requests() -> List[Dict[str, Any]]:
    return [
        {"state": EN1, "questions": Q1},                                   # 0  en  G1
        {"state": DE1, "questions": Q1},                                   # 1  ml  H1 (de)
        {"state": EN2, "questions": Q1_REORDERED},                         # 2  en  G2
        {"state": FR1, "questions": Q1, "lang": "fr"},                     # 3  ml  H2 (fr)
        {"state": EN1 + " again", "questions": Q1, "max_len": 64},         # 4  en  G3
        {"state": "anything", "questions": Q1, "model": "ml"},             # 5  ml  H3 (no lang)
        {"state": EN2, "questions": dict(Q1)},                             # 6  en  G1 (equal JSON)
        {"state": JA1, "questions": Q1, "head_max_len": 32},               # 7  ml  H4
        {"state": DE2, "questions": Q1},                                   # 8  ml  H1
        {"state": EN1, "questions": Q_CRIT_A},                             # 9  en  G4
        {"state": EN1, "questions": Q_CRIT_B},                             # 10 en  G5 (order)
        {"state": "x", "questions": Q1, "model": "english", "max_len": 64},  # 11 en G3
        {"state": "PIN this English request about a billing problem", "questions": Q1},  # 12 H3
        {"state": EN1 + "!", "questions": Q1, "unrelated": "ignored"},     # 13 en  G1
        {"state": "Ärger mit der Rechnung", "questions": Q_UMLAUT, "model": "en"},  # 14 en G6
    ]


def test_predict_batch_groups_per_checkpoint_then_per_question_group(monkeypatch):
    def scenario(side):
        def pin(ctx):
            if str(ctx.states[0]).startswith("PIN"):
                ctx.decision = {"model": "ml", "reason": "pinned"}

        router = two_agents(side, hooks=[Act("on_route", pin), side.rec()])
        diagnostics: Dict[str, Any] = {}
        results = router.predict_batch(grouping_requests(), batch_size=2, sort_by_length=True,
                                       diagnostics=diagnostics)
        return {"results": results, "diagnostics": diagnostics}

    ours, theirs = both(monkeypatch, scenario)
    assert_parity(ours, theirs)
    reqs = grouping_requests()
    base = {"batch_size": 2, "sort_by_length": True}
    expected = [
        ("en", [0, 6, 13], list(Q1), base),
        ("en", [2], list(Q1_REORDERED), base),
        ("en", [4, 11], list(Q1), dict(base, max_len=64)),
        ("en", [9], ["topic"], base),
        ("en", [10], ["topic"], base),
        ("en", [14], ["dringend"], base),
        ("ml", [1, 8], list(Q1), dict(base, lang="de")),
        ("ml", [3], list(Q1), dict(base, lang="fr")),
        ("ml", [5, 12], list(Q1), base),
        ("ml", [7], list(Q1), dict(base, head_max_len=32)),
    ]
    assert [(c[0], c[2], c[3], c[4]) for c in ours.calls] == [
        (label, [plain(reqs[i]["state"]) for i in idx], qs, kwargs)
        for label, idx, qs, kwargs in expected]
    # routes in input order, then per checkpoint: all starts (input order), all ends (reverse)
    events = ours.events()
    assert events[:15] == [("rec", "on_route")] * 15
    starts_ends = [(e["event"], e["states"][0]) for e in ours.trace[15:]]
    en_idx = [0, 2, 4, 6, 9, 10, 11, 13, 14]
    ml_idx = [1, 3, 5, 7, 8, 12]
    assert starts_ends == (
        [("on_predict_start", plain(reqs[i]["state"])) for i in en_idx]
        + [("on_predict_end", plain(reqs[i]["state"])) for i in reversed(en_idx)]
        + [("on_predict_start", plain(reqs[i]["state"])) for i in ml_idx]
        + [("on_predict_end", plain(reqs[i]["state"])) for i in reversed(ml_idx)])
    starts = {e["states"][0] if isinstance(e["states"][0], str) else "EN2": e
              for e in ours.trace[15:] if e["event"] == "on_predict_start"}
    assert starts[EN1 + " again"]["max_len"] == 64
    assert starts[JA1]["head_max_len"] == 32 and starts[JA1]["max_len"] is None
    assert starts["anything"]["model"] == "multilingual"       # resolved in batches
    assert starts["PIN this English request about a billing problem"]["decision"] == \
        {"model": "ml", "reason": "pinned"}
    assert all(e["router"] is True and e["results"] is None for e in starts.values())
    # every request has its own run id
    assert len({e["run"] for e in ours.trace[15:]}) == 15
    results = ours.value["results"]
    assert [r["model"] for r in results] == ["ml" if i in ml_idx else "en" for i in range(15)]
    assert results[12]["routing"] == {"model": "ml", "reason": "pinned"}
    assert ours.value["diagnostics"] == {"sort_by_length": {"groups": 10, "reordered": 1,
                                                            "smallest": 1, "largest": 3}}


def test_predict_batch_with_one_hook_set_equals_predict_per_request(monkeypatch):
    requests = [{"state": EN1, "questions": Q1}, {"state": DE1, "questions": Q1},
                {"state": EN2, "questions": Q1, "max_len": 99}]

    def batched(side):
        router = two_agents(side, hooks=[side.rec()])
        return router.predict_batch(requests)

    def one_by_one(side):
        router = two_agents(side, hooks=[side.rec()])
        return [router.predict(r["state"], r["questions"], max_len=r.get("max_len"))
                for r in requests]

    for side_name in SIDES:
        batch = run_side(side_name, monkeypatch, batched)
        single = run_side(side_name, monkeypatch, one_by_one)
        assert batch.err() is None and single.err() is None
        # the same payloads, routing included, whichever entry point answered
        same(batch.value, single.value)
        # and the same events per request (batch: all routes first, then the groups)
        same(sorted(batch.events()), sorted(single.events()))
        key = lambda e: (e["event"], repr(e["states"]))    # noqa: E731
        strip = lambda e: {k: v for k, v in e.items() if k not in ("run", "model")}  # noqa: E731
        same([strip(e) for e in sorted(batch.trace, key=key)],
             [strip(e) for e in sorted(single.trace, key=key)])


def test_start_hook_skip_and_rewrite_affect_only_their_own_request(monkeypatch):
    def scenario(side):
        def start(ctx):
            state = ctx.states[0]
            if state == "REWRITE":
                ctx.states = ["rewritten state"]
                ctx.questions = {"only": {"type": "noul"}}
                ctx.max_len = 16
            elif state == "SKIP":
                ctx.skip([{"answers": {}, "usage": {"input_tokens": 5, "output_tokens": 1}}])
            elif state == "BUDGET":
                ctx.head_max_len = 8

        router = two_agents(side, hooks=[Act("on_predict_start", start), side.rec()])
        shared = dict(Q1)
        return router.predict_batch([
            {"state": EN1, "questions": shared}, {"state": "REWRITE", "questions": shared},
            {"state": "SKIP", "questions": shared}, {"state": "BUDGET", "questions": shared},
            {"state": EN2, "questions": shared}], batch_size=4)

    ours, theirs = both(monkeypatch, scenario)
    assert_parity(ours, theirs)
    assert [(c[2], c[3], c[4]) for c in ours.calls] == [
        ([EN1, plain(EN2)], list(Q1), {"batch_size": 4}),
        (["rewritten state"], ["only"], {"batch_size": 4, "max_len": 16}),
        (["BUDGET"], list(Q1), {"batch_size": 4, "head_max_len": 8})]
    skipped = ours.value[2]
    assert skipped["usage"] == {"input_tokens": 5, "output_tokens": 1}
    assert skipped["routing"]["model"] == "english"
    ends = {e["states"][0] if isinstance(e["states"][0], str) else "EN2": e
            for e in ours.trace if e["event"] == "on_predict_end"}
    assert ends["rewritten state"]["questions"] == {"only": {"type": "noul"}}
    assert ends["rewritten state"]["max_len"] == 16
    assert ends["SKIP"]["usage"] == {"input_tokens": 5, "output_tokens": 1}


def test_in_place_mutation_of_a_shared_questions_dict_reaches_every_request(monkeypatch):
    def scenario(side):
        def start(ctx):
            if ctx.states[0] == EN1:
                ctx.questions["extra"] = {"type": "noul"}

        router = two_agents(side, hooks=[Act("on_predict_start", start)])
        shared = dict(Q1)
        router.predict_batch([{"state": EN2, "questions": shared},
                              {"state": EN1, "questions": shared}])
        return list(shared)

    ours, theirs = both(monkeypatch, scenario)
    assert_parity(ours, theirs)
    assert ours.value == ["urgent", "topic", "extra"]
    assert [c[3] for c in ours.calls] == [["urgent", "topic", "extra"]]


FAILURES = ["start-hook", "agent", "usage", "result-count"]


@pytest.mark.parametrize("failure", FAILURES)
def test_a_failing_group_fails_every_started_request(monkeypatch, failure):
    """Failure in the second checkpoint group: the first group has completed (its ends ran with
    results), every started request of the failing group gets on_error then on_predict_end in
    reverse order, the third group never loads or starts."""
    boom = RuntimeError("group failed")

    def scenario(side):
        side.patch_builds()
        hooks = [side.rec()]
        if failure == "start-hook":
            hooks.insert(0, raiser("on_predict_start", boom, lambda ctx: ctx.states[0] == DE2))

        def cache(ctx):
            if failure == "usage" and ctx.states[0] == DE1:
                ctx.skip([{"answers": {}, "usage": {"input_tokens": "lots"}}])

        router = side.router(hooks=hooks + [Act("on_predict_start", cache)],
                             models={"typed-decisions": "/srv/typed"})
        router.attach("english", side.agent("en"))
        ml = side.agent("ml", fail=boom if failure == "agent" else None)
        if failure == "result-count":
            ml.predict_batch = lambda states, questions, **kw: []
        router.attach("multilingual", ml)
        return router.predict_batch([
            {"state": EN1, "questions": Q1}, {"state": DE1, "questions": Q1},
            {"state": EN2, "questions": Q1}, {"state": FR1, "questions": Q_UMLAUT},
            {"state": DE2, "questions": Q1}, {"state": "typed", "questions": Q1, "task": "typed"},
            {"state": JA1, "questions": Q1}])

    ours, theirs = both(monkeypatch, scenario)
    same(ours.err(), theirs.err())
    same(ours.calls, theirs.calls)
    assert ours.builds == theirs.builds == []              # the typed group never loads
    # the seeds' item 2 (docs/hooks/lifecycle.md): our on_error never sees elapsed_ms; upstream's
    # does
    same(without(ours.trace, "on_error", "elapsed"), without(theirs.trace, "on_error", "elapsed"))
    assert all(not e["elapsed"] for e in ours.trace if e["event"] == "on_error")
    assert all(e["elapsed"] for e in theirs.trace if e["event"] == "on_error")
    expected_error = {
        "start-hook": "RuntimeError: group failed", "agent": "RuntimeError: group failed",
        "usage": "ValueError: invalid literal for int() with base 10: 'lots'",
        "result-count": "RuntimeError: internal error: Agent.predict_batch returned 0 results "
                        "for 3 states"}[failure]
    assert ours.err() == expected_error
    events = [(e["event"], e["states"][0] if isinstance(e["states"][0], str) else "EN2")
              for e in ours.trace if e["event"] != "on_route"]
    en_done = [("on_predict_start", EN1), ("on_predict_start", "EN2"),
               ("on_predict_end", "EN2"), ("on_predict_end", EN1)]
    # a raising start hook stops the recorder (installed after it) for that request only
    started = [DE1, FR1, DE2] if failure == "start-hook" else [DE1, FR1, DE2, JA1]
    recorded_starts = started[:-1] if failure == "start-hook" else started
    failed = [item for s in reversed(started) for item in (("on_error", s), ("on_predict_end", s))]
    assert events == en_done + [("on_predict_start", s) for s in recorded_starts] + failed
    # the first group ended with results and usage; the failing one carries the shared error
    assert all(e["results"] and e["usage"] and e["error"] is None
               for e in ours.trace[7:11] if e["event"] == "on_predict_end")
    fail_ends = [e for e in ours.trace if e["event"] == "on_predict_end" and e["error"]]
    assert {e["error"] for e in fail_ends} == {expected_error}
    assert all(e["usage"] is None for e in fail_ends)
    if failure == "usage":
        # requests whose question group already ran keep their results on the failure path
        with_results = [e["states"][0] for e in fail_ends if e["results"] is not None]
        assert with_results == [JA1, DE2, FR1, DE1]


def test_end_hook_errors_are_raised_after_every_request_ended(monkeypatch):
    def scenario(side):
        def bad(ctx):
            if ctx.states[0] in (EN1, DE1) or isinstance(ctx.states[0], dict):
                raise ValueError(f"end hook failed for {str(ctx.states[0])[:12]}")

        router = two_agents(side, hooks=[side.rec(), Act("on_predict_end", bad),
                                         side.rec("after")])
        router.predict_batch([{"state": EN1, "questions": Q1}, {"state": DE1, "questions": Q1},
                              {"state": EN2, "questions": Q1},
                              {"state": "Another English ticket about a refund for my order",
                               "questions": Q1}])

    ours, theirs = both(monkeypatch, scenario)
    assert_parity(ours, theirs)
    # ends run in reverse order: the last (fine), EN2 (fails first), EN1 (fails too); the first
    # failure is raised once every request of the group has ended; later groups never run
    assert ours.err() == "ValueError: end hook failed for {'subject': "
    ends = [(e["tag"], str(e["states"][0])[:12]) for e in ours.trace
            if e["event"] == "on_predict_end"]
    assert ends == [("rec", "Another Engl"), ("after", "Another Engl"),
                    ("rec", "{'subject': "), ("rec", EN1[:12])]
    assert [c[0] for c in ours.calls] == ["en"]


def test_error_and_end_hook_failures_on_the_failure_path_are_chained(monkeypatch):
    def scenario(side):
        router = side.router(hooks=[raiser("on_error", KeyError("error hook")), side.rec()])
        router.attach("english", side.agent("en", fail=RuntimeError("forward failed")))
        try:
            router.predict_batch([{"state": EN1, "questions": Q1},
                                  {"state": EN2, "questions": Q1}])
        except RuntimeError as exc:
            return {"context": plain(exc.__context__), "msg": str(exc)}

    ours, theirs = both(monkeypatch, scenario)
    same(ours.value, theirs.value)
    same(without(ours.trace, "on_error", "elapsed"), without(theirs.trace, "on_error", "elapsed"))
    assert ours.value == {"context": "KeyError: 'error hook'", "msg": "forward failed"}
    assert [e["event"] for e in ours.trace if e["event"] != "on_route"] == \
        ["on_predict_start", "on_predict_start", "on_predict_end", "on_predict_end"]


def test_lenient_start_hook_failure_warns_and_the_batch_continues(monkeypatch):
    def scenario(side):
        router = two_agents(side, hooks=[raiser("on_predict_start", RuntimeError("flaky")),
                                         side.rec()])
        return router.predict_batch([{"state": EN1, "questions": Q1},
                                     {"state": DE1, "questions": Q1}], hooks_raise=False)

    ours, theirs = both(monkeypatch, scenario)
    assert_parity(ours, theirs)
    assert ours.warnings == [
        ("RuntimeWarning", "laya: hook Act.on_predict_start failed: flaky")] * 2
    assert len(ours.value) == 2


def test_route_batch_validation_messages_and_nothing_loads(monkeypatch):
    ok = {"state": EN1, "questions": Q1}
    cases = [None, {"state": EN1, "questions": Q1}, "requests", b"bytes", 5,
             [ok, 5], [ok, {"questions": Q1}], [ok, {"state": None, "questions": Q1}],
             [ok, {"state": EN1}], [ok, {"state": EN1, "questions": ["q"]}],
             [ok, {"state": EN1, "questions": Q1, "model": "nope"}]]

    def scenario(side):
        side.patch_builds()
        router = side.router(hooks=[side.rec()],
                             models={"english": "/srv/en", "multilingual": "/srv/ml"})
        messages = []
        for case in cases:
            for method in (router.route_batch, router.predict_batch):
                try:
                    method(case)
                except (TypeError, ValueError) as exc:
                    messages.append(plain(exc))
        messages.append(router.route_batch([]))
        messages.append(router.predict_batch([]))
        messages.append(router.route_batch((ok,), explain=True)[0]["detection"]["diagnostic"])
        messages.append(router.loaded)
        return messages

    ours, theirs = both(monkeypatch, scenario)
    assert_parity(ours, theirs)
    assert ours.builds == [] and ours.value[-1] == []
    assert ours.value[:12:2] == [
        "TypeError: requests must be a sequence of request dictionaries"] * 5 + [
        "TypeError: request 1 must be a dict, got int"]
    assert ours.value[12:22:2] == [
        "ValueError: request 1 is missing required key 'state'",
        "TypeError: request 1 'state' must not be None; pass a string, dict, or list",
        "ValueError: request 1 is missing required key 'questions'",
        "TypeError: request 1 'questions' must be a dict, got list",
        "ValueError: unknown model 'nope'; choose one of ['english', 'multilingual', "
        "'typed-decisions'] (or an alias: ['decisions', 'default', 'en', 'laya', "
        "'laya-multilingual', 'laya-typed-decisions', 'ml', 'multi', 'typed', "
        "'typed_decisions'])"]
    assert ours.value[22:24] == [[], []]
    # earlier items were routed (on_route fired) before a later one was rejected; the empty
    # batches fired nothing; nothing was ever loaded
    assert {e["event"] for e in ours.trace} == {"on_route"}
    assert len(ours.trace) == 12 + 1


def test_lang_and_sort_by_length_retry_for_agents_that_do_not_take_them(monkeypatch):
    def scenario(side):
        router = side.router(hooks=[side.rec()])
        old = OldAgent(side, "old")
        old.lang_temperatures = {"de": {}}        # so the batch passes `lang`
        router.attach("english", old)
        router.attach("multilingual", OldAgent(side, "old-ml"))
        out = {"single": router.predict(EN1, Q1, max_len=50),
               "single_ml": router.predict(DE1, Q1),
               "lang": router.predict_batch([{"state": EN1, "questions": Q1}], batch_size=3),
               "sort": router.predict_batch([{"state": DE1, "questions": Q1}], batch_size=3,
                                            sort_by_length=True)}
        try:  # both refused: Python names only the first, so one retry is not enough
            router.predict_batch([{"state": EN1, "questions": Q1}], sort_by_length=True)
        except TypeError as exc:
            out["both"] = plain(exc)
        return out

    ours, theirs = both(monkeypatch, scenario)
    same(ours.value, theirs.value)
    same(ours.calls, theirs.calls)
    same(without(ours.trace, "on_error", "elapsed"), without(theirs.trace, "on_error", "elapsed"))
    assert [(c[0], c[1], c[4]) for c in ours.calls] == [
        ("old", "system_one", {"max_len": 50, "head_max_len": None}),
        ("old-ml", "system_one", {"max_len": None, "head_max_len": None}),
        ("old", "predict_batch", {"batch_size": 3, "max_len": None}),
        ("old-ml", "predict_batch", {"batch_size": 3, "max_len": None})]
    assert ours.value["single"]["routing"]["model"] == "english"
    assert ours.value["both"] == ("TypeError: OldAgent.predict_batch() got an unexpected keyword "
                                  "argument 'sort_by_length'")


def test_refused_keywords_are_dropped_one_call_later(monkeypatch):
    def scenario(side):
        router = side.router()
        router.attach("multilingual", side.agent("ml", refuse={"lang"},
                                                 lang_temperatures={"de": {}}))
        router.attach("english", side.agent("en", refuse={"sort_by_length"}))
        return [router.predict(DE1, Q1),
                router.predict_batch([{"state": DE1, "questions": Q1},
                                      {"state": EN1, "questions": Q1}],
                                     batch_size=2, sort_by_length=True)]

    ours, theirs = both(monkeypatch, scenario)
    assert_parity(ours, theirs)
    assert [(c[0], c[1], c[4]) for c in ours.calls] == [
        ("ml", "system_one", {"lang": "de"}), ("ml", "system_one", {}),
        ("ml", "predict_batch", {"batch_size": 2, "lang": "de", "sort_by_length": True}),
        ("ml", "predict_batch", {"batch_size": 2, "sort_by_length": True}),
        ("en", "predict_batch", {"batch_size": 2, "sort_by_length": True}),
        ("en", "predict_batch", {"batch_size": 2})]


def test_other_type_errors_from_the_agent_are_not_retried(monkeypatch):
    def scenario(side):
        router = side.router(hooks=[side.rec()])
        router.attach("english", side.agent("en", fail=TypeError(
            "helper() got an unexpected keyword argument 'lang'")))
        router.attach("multilingual", side.agent("ml", fail=TypeError("bad input")))
        errors = []
        for call in (lambda: router.predict_batch([{"state": EN1, "questions": Q1}]),
                     lambda: router.predict(DE1, Q1)):
            try:
                call()
            except TypeError as exc:
                errors.append(plain(exc))
        return errors

    ours, theirs = both(monkeypatch, scenario)
    assert_parity(ours, theirs)
    # the batch did not pass `lang` (the english agent has no lang_temperatures): no retry
    assert ours.value == ["TypeError: helper() got an unexpected keyword argument 'lang'",
                          "TypeError: bad input"]
    assert len(ours.calls) == 2


# ==============================================================================================
# predict_long (docs/design/routing.md#answering)
# ==============================================================================================

def test_predict_long_scans_on_ctx_agent_and_keeps_the_agents_routing(monkeypatch):
    def scenario(side):
        other = LangLong(side, "swapped")

        def swap(ctx):
            if ctx.states[0] == "SWAP":
                ctx.agent = other

        router = side.router(hooks=[Act("on_predict_start", swap), side.rec()])
        router.attach("english", side.agent("en", hooks=[side.rec("agent")],
                                            routing={"model": "agent-routing"}))
        side.set_defaults(side.rec("default"))
        return [router.predict_long(EN1, Q1, window=32, stride=16, batch_size=2,
                                    on_predict_start=side.callable("start-fn")),
                router.predict_long("SWAP", Q1, model="en"),
                router.predict(EN1, Q1)]

    ours, theirs = both(monkeypatch, scenario)
    assert_parity(ours, theirs)
    long_result, swapped, plain_predict = ours.value
    assert long_result["routing"] == {"model": "agent-routing"}      # setdefault
    assert long_result["usage"]["windows"] == 1
    assert plain_predict["routing"]["model"] == "english"            # predict overwrites
    assert swapped["routing"]["model"] == "english"
    assert [(c[0], c[1], c[4]) for c in ours.calls] == [
        ("en", "predict_long", {"window": 32, "stride": 16, "aggregate": "auto",
                                "batch_size": 2, "lang": "en"}),
        ("swapped", "predict_long", {"window": None, "stride": None, "aggregate": "auto",
                                     "batch_size": None, "lang": None}),
        ("en", "system_one", {"lang": "en"})]
    # defaults once at Router level; the agent's own hooks inside; callables not on on_route
    assert ours.events()[:7] == [("default", "on_route"), ("rec", "on_route"),
                                 ("default", "on_predict_start"), ("rec", "on_predict_start"),
                                 ("start-fn", "callable"), ("agent", "on_predict_start"),
                                 ("agent", "on_predict_end")]


@pytest.mark.parametrize("agent_cls,lang,model,passed,warned", [
    (LangLong, None, None, "de", None), (KwLong, "de-AT", None, "de-AT", None),
    (LangLong, None, "ml", None, None), (NoLangLong, None, "ml", "-", None),
    (NoLangLong, None, None, "-", "detected 'de'"), (NoLangLong, "fr", None, "-", "requested 'fr'"),
    (NoLangLong, "x" * 40, None, "-", "requested '" + "x" * 32 + "'..."),
    (NoLangLong, 7, None, "-", "requested <not a string>")])
def test_predict_long_passes_lang_only_when_accepted(monkeypatch, agent_cls, lang, model, passed,
                                                     warned):
    def scenario(side):
        router = side.router()
        router.attach("multilingual", agent_cls(side, "long"))
        return router.predict_long(DE1, Q1, lang=lang, model=model)

    ours, theirs = both(monkeypatch, scenario)
    assert_parity(ours, theirs)
    kwargs = ours.calls[0][4]
    if passed == "-":
        assert "lang" not in kwargs
    else:
        assert kwargs["lang"] == passed
    if warned is None:
        assert ours.warnings == []
    else:
        which, shown = warned.split(" ", 1)
        assert ours.warnings == [("RuntimeWarning", (
            f"laya: Router.predict_long: NoLangLong.predict_long has no `lang` parameter, so the "
            f"{which} language {shown} is not reaching it and the scan runs without it"))]


def test_predict_long_warning_points_at_the_caller(monkeypatch):
    for side_name in SIDES:
        side = Side(side_name, monkeypatch)
        router = side.router()
        router.attach("multilingual", NoLangLong(side))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            router.predict_long(DE1, Q1)
        assert [Path(w.filename).name for w in caught] == [Path(__file__).name], side_name


def test_predict_long_without_a_scan_raises_type_error_whatever_hooks_raise(monkeypatch):
    def scenario(side):
        router = side.router(hooks=[side.rec()], hooks_raise=False)
        router.attach("english", NoLongAgent(side, "nolong"))
        router.predict_long(EN1, Q1)

    ours, theirs = both(monkeypatch, scenario)
    # the message differs by design (docs/design/upstream-differences.md#wording)
    same([{k: v for k, v in e.items() if k != "error"} for e in ours.trace],
         [{k: v for k, v in e.items() if k != "error"} for e in theirs.trace])
    assert ours.err() == ("TypeError: NoLongAgent has no predict_long, so a state longer than "
                          "its window cannot be scanned; ONNXAgent implements it, and an agent "
                          "attached by hand needs it too")
    assert theirs.err().startswith("TypeError: NoLongAgent has no predict_long, so a state")
    assert ours.events() == [("rec", "on_route"), ("rec", "on_predict_start"),
                             ("rec", "on_error"), ("rec", "on_predict_end")]


def test_hooks_timeout_does_not_bound_the_scan(monkeypatch):
    def scenario(side):
        router = side.router(hooks=[side.rec()], hooks_timeout=0.25,
                             hooks_concurrent=False)
        router.attach("english", side.agent("en", delay=0.8))
        return router.predict_long(EN1, Q1, hooks_timeout=0.25)

    ours, theirs = both(monkeypatch, scenario)
    assert_parity(ours, theirs)
    assert ours.err() is None and ours.value["usage"]["windows"] == 1


# ==============================================================================================
# Model lifecycle: load / preload / unload / attach / register / unregister
# (docs/design/routing.md#residency, docs/hooks/lifecycle.md#model-lifecycle-on_load-and-on_evict)
# ==============================================================================================

SOURCES = {"english": "/srv/en", "multilingual": ("/srv/bundle", "multilingual"),
           "typed-decisions": "/srv/typed"}


def test_lifecycle_events_contexts_and_lru_order(monkeypatch):
    def scenario(side):
        side.patch_builds()
        router = side.router(models=SOURCES, hooks=[side.rec()])
        steps = []

        def step(name, value=None):
            steps.append((name, router.loaded, router.max_loaded, len(side.trace),
                          getattr(value, "label", value)))

        english = router.load("en")
        step("load en", english)
        step("load ml", router.load("ml"))
        step("touch english", router.load("english") is english)     # resident: no event
        step("load typed", router.load("typed"))                      # evicts multilingual
        step("preload ml", router.preload(["ml", "multi"]) is router)  # cap 3, builds ml
        step("preload none", router.preload([]) is router)
        step("attach english", router.attach("english", side.agent("attached-en")))
        step("attach new", router.attach("custom-one", side.agent("custom")))
        step("unload typed", router.unload("typed"))
        step("unload typed again", router.unload("typed"))
        step("register same", router.register("custom-one", None))
        step("re-point ml", router.register("ml", "/srv/ml2", description="second"))
        step("re-point ml same", router.register("multilingual", "/srv/ml2"))
        step("registered", plain(router.registered))
        step("unregister", router.unregister("custom-one"))
        router.max_loaded = 1
        step("load typed cap 1", router.load("typed"))                # evicts english
        step("repr", repr(router))
        with router as entered:
            step("enter", entered is router)
            step("load ml in with", router.load("ml"))
        step("after with", repr(router))
        step("revisions", router.loaded_revisions)
        return steps

    ours, theirs = both(monkeypatch, scenario)
    assert_parity(ours, theirs)
    # gc.collect() after every eviction and unload, as upstream (which also empties torch caches)
    assert ours.side.collects == theirs.side.collects == 8
    assert [(s[0], s[1], s[2]) for s in ours.value] == [
        ("load en", ["english"], 2), ("load ml", ["english", "multilingual"], 2),
        ("touch english", ["multilingual", "english"], 2),
        ("load typed", ["english", "typed-decisions"], 2),
        ("preload ml", ["english", "typed-decisions", "multilingual"], 3),
        ("preload none", ["english", "typed-decisions", "multilingual"], 3),
        ("attach english", ["typed-decisions", "multilingual", "english"], 3),
        ("attach new", ["typed-decisions", "multilingual", "english", "custom-one"], 4),
        ("unload typed", ["multilingual", "english", "custom-one"], 4),
        ("unload typed again", ["multilingual", "english", "custom-one"], 4),
        ("register same", ["multilingual", "english", "custom-one"], 4),
        ("re-point ml", ["english", "custom-one"], 4),
        ("re-point ml same", ["english", "custom-one"], 4),
        ("registered", ["english", "custom-one"], 4),
        ("unregister", ["english"], 4),
        ("load typed cap 1", ["typed-decisions"], 1),
        ("repr", ["typed-decisions"], 1),
        ("enter", ["typed-decisions"], 1),
        ("load ml in with", ["multilingual"], 1),
        ("after with", [], 1),
        ("revisions", [], 1)]
    value = {s[0]: s[4] for s in ours.value}
    assert value["registered"] == {"custom-one": {"source": None, "description": None}}
    assert value["repr"] == "Router(loaded=['typed-decisions'], max_loaded=1, default='english')"
    assert value["after with"] == "Router(loaded=[], max_loaded=1, default='english')"
    assert ours.events() == [("rec", e) for e in [
        "on_load", "on_load", "on_evict", "on_load", "on_load",  # en, ml, (ml out) typed, ml
        "on_evict",                                              # unload typed
        "on_evict",                                              # re-point ml
        "on_evict",                                              # unregister custom-one
        "on_evict", "on_load",                                   # cap 1: english out, typed in
        "on_evict", "on_load",                                   # typed out, ml in
        "on_evict"]]                                             # __exit__
    assert [(e["event"], e["model"], e["agent"]) for e in ours.trace] == [
        ("on_load", "english", "built:/srv/en"),
        ("on_load", "multilingual", "built:/srv/bundle/multilingual"),
        ("on_evict", "multilingual", None), ("on_load", "typed-decisions", "built:/srv/typed"),
        ("on_load", "multilingual", "built:/srv/bundle/multilingual"),
        ("on_evict", "typed-decisions", None), ("on_evict", "multilingual", None),
        ("on_evict", "custom-one", None), ("on_evict", "english", None),
        ("on_load", "typed-decisions", "built:/srv/typed"), ("on_evict", "typed-decisions", None),
        ("on_load", "multilingual", "built:/srv/ml2"), ("on_evict", "multilingual", None)]
    for event in ours.trace:   # lifecycle contexts (docs/hooks/api.md#event-payloads)
        assert event["states"] == [] and event["questions"] == {} and event["router"] is True
        assert event["decision"] is None and event["results"] is None
    assert [b[0] for b in ours.builds] == ["/srv/en", "/srv/bundle", "/srv/typed", "/srv/bundle",
                                          "/srv/typed", "/srv/ml2"]
    assert ours.builds[0][1] == {"device": None, "token": None, "subfolder": None}
    assert ours.builds[1][1] == {"device": None, "token": None, "subfolder": "multilingual"}


def test_on_evict_fires_before_on_load_one_per_evicted_name(monkeypatch):
    def scenario(side):
        side.patch_builds()
        router = side.router(models=SOURCES, hooks=[side.rec()], max_loaded=3)
        for name in ("english", "multilingual", "typed-decisions"):
            router.load(name)
        router.register("extra", "/srv/extra")
        router.max_loaded = 1
        router.load("extra")
        return router.loaded

    ours, theirs = both(monkeypatch, scenario)
    assert_parity(ours, theirs)
    assert [(e["event"], e["model"]) for e in ours.trace[3:]] == [
        ("on_evict", "english"), ("on_evict", "multilingual"), ("on_evict", "typed-decisions"),
        ("on_load", "extra")]
    assert ours.value == ["extra"]


def test_a_raising_on_evict_stops_that_call_but_the_new_agent_stays(monkeypatch):
    def scenario(side):
        side.patch_builds()
        router = side.router(models=SOURCES, max_loaded=3)
        for name in ("english", "multilingual", "typed-decisions"):
            router.load(name)
        router.add_hook([raiser("on_evict", RuntimeError("evict hook")), side.rec()])
        router.max_loaded = 1
        router.register("extra", "/srv/extra")
        try:
            router.load("extra")
        except RuntimeError as exc:
            return {"error": str(exc), "loaded": router.loaded,
                    "next": getattr(router.load("extra"), "label", None)}

    ours, theirs = both(monkeypatch, scenario)
    assert_parity(ours, theirs)
    assert ours.value == {"error": "evict hook", "loaded": ["extra"], "next": "built:/srv/extra"}
    assert ours.trace == []          # nothing after the raising hook ran, no on_load


def test_a_failing_on_load_leaves_the_agent_resident_and_does_not_fire_again(monkeypatch):
    def scenario(side):
        side.patch_builds()
        router = side.router(models=SOURCES, hooks=[raiser("on_load", RuntimeError("load hook")),
                                                    side.rec()])
        try:
            router.load("english")
        except RuntimeError as exc:
            first = str(exc)
        again = router.load("english")
        lenient = side.router(models=SOURCES, hooks_raise=False,
                              hooks=[raiser("on_load", RuntimeError("load hook")), side.rec()])
        lenient.load("multilingual")
        return {"first": first, "loaded": router.loaded, "again": again.label,
                "result": router.predict(EN1, Q1)["model"]}

    ours, theirs = both(monkeypatch, scenario)
    assert_parity(ours, theirs)
    assert ours.value == {"first": "load hook", "loaded": ["english"], "again": "built:/srv/en",
                          "result": "built:/srv/en"}
    assert ours.warnings == [("RuntimeWarning", "laya: hook Act.on_load failed: load hook")]
    assert [(e["event"], e["model"]) for e in ours.trace] == [
        ("on_load", "multilingual"), ("on_route", None), ("on_predict_start", "english"),
        ("on_predict_end", "english")]


def test_per_call_hooks_and_policy_never_reach_on_load_or_on_evict(monkeypatch):
    def scenario(side):
        side.patch_builds()
        router = side.router(models=SOURCES, max_loaded=1, hooks=[side.rec("installed")])
        side.set_defaults(side.rec("default"))
        router.predict(EN1, Q1, hooks=[side.rec("percall")], hooks_raise=False,
                       hooks_timeout=5)
        router.predict(DE1, Q1, hooks=[side.rec("percall")])
        return router.loaded

    ours, theirs = both(monkeypatch, scenario)
    assert_parity(ours, theirs)
    lifecycle = [(tag, event) for tag, event in ours.events() if event in ("on_load", "on_evict")]
    assert lifecycle == [("default", "on_load"), ("installed", "on_load"),
                         ("default", "on_evict"), ("installed", "on_evict"),
                         ("default", "on_load"), ("installed", "on_load")]


@pytest.mark.parametrize("concurrent", [True, False])
def test_hooks_may_re_enter_the_router_from_on_load(monkeypatch, concurrent):
    def scenario(side):
        side.patch_builds()
        router = side.router(models=SOURCES, hooks_concurrent=concurrent, hooks=[side.rec()])

        def reenter(ctx):
            if ctx.model == "english":
                ctx.router.load("multilingual")
                ctx.router.load("english")
                ctx.router.route(EN1)
                ctx.router.unload("multilingual")

        router.add_hook(Act("on_load", reenter))
        done: Dict[str, Any] = {}
        worker = threading.Thread(target=lambda: done.setdefault("agent", router.load("english")),
                                  daemon=True)
        worker.start()
        worker.join(10)
        assert not worker.is_alive(), "deadlock: on_load re-entering the Router"
        return {"agent": done["agent"].label, "loaded": router.loaded}

    ours, theirs = both(monkeypatch, scenario)
    assert_parity(ours, theirs)
    assert ours.value == {"agent": "built:/srv/en", "loaded": ["english"]}
    assert [(e["event"], e["model"]) for e in ours.trace] == [
        ("on_load", "english"), ("on_load", "multilingual"), ("on_route", None),
        ("on_evict", "multilingual")]


def test_concurrent_loads_of_one_checkpoint_share_one_build(monkeypatch):
    def scenario(side):
        side.patch_builds(delay=0.3)
        router = side.router(models=SOURCES, hooks=[side.rec()], max_loaded=3)
        barrier = threading.Barrier(7)
        got: List[Any] = [None] * 7

        def worker(i):
            barrier.wait(5)
            got[i] = router.load("english" if i < 6 else "ml")

        threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(7)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)
        assert not any(t.is_alive() for t in threads)
        return {"same": all(a is got[0] for a in got[:6]),
                "builds": sorted(b[0] for b in side.builds),
                "max_active": side.max_active, "loaded": sorted(router.loaded),
                "loads": sorted(e["model"] for e in side.trace)}

    for outcome in both(monkeypatch, scenario):
        assert outcome.err() is None
        assert outcome.value == {"same": True, "builds": ["/srv/bundle", "/srv/en"],
                                 "max_active": 1,               # one build at a time
                                 "loaded": ["english", "multilingual"],
                                 "loads": ["english", "multilingual"]}


def test_a_failed_build_raises_the_same_exception_object_to_every_waiter(monkeypatch):
    def scenario(side):
        side.patch_builds(delay=0.5, fail=OSError("weights missing"))
        router = side.router(models=SOURCES, hooks=[side.rec()])
        barrier = threading.Barrier(5)
        errors: List[Any] = [None] * 5

        def worker(i):
            barrier.wait(5)
            try:
                router.load("english")
            except OSError as exc:
                errors[i] = exc

        threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(5)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)
        first_builds = len(side.builds)
        with pytest.raises(OSError):
            router.load("english")               # a later load retries: a second build
        return {"same_object": all(e is errors[0] for e in errors), "msg": str(errors[0]),
                "builds": first_builds, "builds_after": len(side.builds),
                "loaded": router.loaded}

    ours, theirs = both(monkeypatch, scenario)
    assert_parity(ours, theirs)
    assert ours.value == {"same_object": True, "msg": "weights missing", "builds": 1,
                          "builds_after": 2, "loaded": []}
    assert ours.trace == []


def test_unload_waits_for_an_in_flight_build_of_that_checkpoint_only(monkeypatch):
    def scenario(side):
        gate, started = threading.Event(), threading.Event()
        side.patch_builds(gate=gate, started=started)
        router = side.router(models=SOURCES, hooks=[side.rec()])
        router.attach("multilingual", side.agent("ml"))
        loader = threading.Thread(target=router.load, args=("english",), daemon=True)
        loader.start()
        assert started.wait(5)
        t0 = time.perf_counter()
        router.unload("multilingual")             # other checkpoint: does not wait
        other_fast = time.perf_counter() - t0 < 1.0
        unloader = threading.Thread(target=router.unload, args=("english",), daemon=True)
        unloader.start()
        time.sleep(0.2)
        waiting = unloader.is_alive()
        observed = router.loaded                  # `loaded` does not block during a build
        gate.set()
        loader.join(5)
        unloader.join(5)
        return {"other_fast": other_fast, "waiting": waiting, "observed": observed,
                "loaded": router.loaded}

    ours, theirs = both(monkeypatch, scenario)
    # the builder's on_load and the unloader's on_evict both run after the build finished, on
    # two threads: their relative order is not defined, so compare the events as sets
    for outcome in (ours, theirs):
        outcome.trace.sort(key=lambda e: (e["event"], e["model"]))
        for event in outcome.trace:
            event.pop("run")
    assert_parity(ours, theirs)
    assert ours.value == {"other_fast": True, "waiting": True, "observed": [], "loaded": []}
    assert [(e["event"], e["model"]) for e in ours.trace] == [
        ("on_evict", "english"), ("on_evict", "multilingual"), ("on_load", "english")]


def test_unload_all_waits_for_every_build_and_attach_during_a_build_wins(monkeypatch):
    def scenario(side):
        gate, started = threading.Event(), threading.Event()
        side.patch_builds(gate=gate, started=started)
        router = side.router(models=SOURCES, hooks=[side.rec()])
        got: Dict[str, Any] = {}
        loader = threading.Thread(target=lambda: got.setdefault("a", router.load("english")),
                                  daemon=True)
        loader.start()
        assert started.wait(5)
        router.attach("english", side.agent("attached"))
        gate.set()
        loader.join(5)
        attached_won = got["a"].label
        resident = router.loaded
        gate2, started2 = threading.Event(), threading.Event()
        side.patch_builds(gate=gate2, started=started2)
        loader2 = threading.Thread(target=router.load, args=("ml",), daemon=True)
        loader2.start()
        assert started2.wait(5)
        side.evict_order = []
        router.add_hook(Act("on_evict", lambda ctx: side.evict_order.append(ctx.model)))
        unloader = threading.Thread(target=router.unload, daemon=True)
        unloader.start()
        time.sleep(0.2)
        waiting = unloader.is_alive()
        gate2.set()
        loader2.join(5)
        unloader.join(5)
        return {"attached_won": attached_won, "resident": resident, "waiting": waiting,
                "loaded": router.loaded}

    ours, theirs = both(monkeypatch, scenario)
    # after the first load, the builder's on_load and the unloader's on_evicts run on two
    # threads once the build finished: order them for the comparison
    for outcome in (ours, theirs):
        outcome.trace[1:] = sorted(outcome.trace[1:], key=lambda e: (e["event"], e["model"]))
        for event in outcome.trace:
            event.pop("run")
    assert_parity(ours, theirs)
    assert ours.value == {"attached_won": "attached", "resident": ["english"], "waiting": True,
                          "loaded": []}
    # rule 4: on_load fires for the building caller, with the attached agent
    assert [(e["event"], e["model"], e["agent"]) for e in ours.trace] == [
        ("on_load", "english", "attached"), ("on_evict", "english", None),
        ("on_evict", "multilingual", None),
        ("on_load", "multilingual", "built:/srv/bundle/multilingual")]
    # unload() frees least-recent first
    assert ours.side.evict_order == ["english", "multilingual"]


# ==============================================================================================
# Registry and construction (docs/design/routing.md#checkpoints)
# ==============================================================================================

def attempt(fn: Callable[[], Any]) -> Any:
    try:
        return plain(fn())
    except Exception as exc:  # noqa: BLE001 -- compared
        return plain(exc)


NAMES = ["english", " EN ", "Laya", "default", "multi", "ML", "laya-multilingual", "typed",
         "typed_decisions", "laya-typed-decisions", "decisions", "Typed-Decisions ", "papers", 5,
         None, "auto", ""]


def test_name_functions_match_upstream():
    for name in NAMES:
        assert ER.canonical_name(name) == UR.canonical_name(name)
        assert attempt(lambda: ER.normalise_name(name)) == attempt(lambda: UR.normalise_name(name))
        assert ER.resolve_model_spec(name) == UR.resolve_model_spec(name)
    assert attempt(lambda: ER.normalise_name("nope")) == (
        "ValueError: unknown model 'nope'; choose one of ['english', 'multilingual', "
        "'typed-decisions'] (or an alias: ['decisions', 'default', 'en', 'laya', "
        "'laya-multilingual', 'laya-typed-decisions', 'ml', 'multi', 'typed', 'typed_decisions'])")
    assert ER.resolve_model_spec("ml") == ("convaiinnovations/laya", "multilingual")
    assert ER.DEFAULT_MODELS == UR.DEFAULT_MODELS
    assert ER.STANDALONE_MODELS == UR.STANDALONE_MODELS
    workflows = list(ER.TYPED_DECISION_WORKFLOWS.values())
    for questions in [{k: {} for k in ids} for ids in workflows] + [
            {k: {} for k in reversed(sorted(workflows[0]))}, {k: {} for k in workflows[1] | {"x"}},
            {k: {} for k in list(workflows[2])[:-1]}, {}, None, {"urgency": {}}]:
        assert ER.match_typed_decisions_workflow(questions) == \
            UR.match_typed_decisions_workflow(questions)
    assert ER.match_typed_decisions_workflow({k: {} for k in reversed(sorted(workflows[3]))}) \
        == "security_incidents"
    for side_name in SIDES:
        router = (ER.Router if side_name == "edge" else UR.Router)(
            models={"papers": "/p"}, default="english")
        assert router.resolve(" Papers ") == "papers"
    assert attempt(lambda: ER.Router(models={"papers": "/p"}).resolve("nope")) == (
        "ValueError: unknown model 'nope'; choose one of ['english', 'multilingual', 'papers', "
        "'typed-decisions'] (or an alias: ['decisions', 'default', 'en', 'laya', "
        "'laya-multilingual', 'laya-typed-decisions', 'ml', 'multi', 'typed', 'typed_decisions'])")


def test_register_name_rules_warnings_and_rollback(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))

    def scenario(side):
        side.patch_builds()       # (re-pointing unloads: count gc passes instead of running them)
        router = side.router()
        out = []
        for name, source, description in [
                ("Papers", "/p", None), (" My.Model_2-x ", ("/repo", "sub"), "a fine-tune"),
                ("bad name", "/p", None), ("-lead", "/p", None), ("a/b", "/p", None),
                (5, "/p", None), ("auto", "/p", None), (" AUTO ", "/p", None),
                ("papers", 5, None), ("papers", {"a": 1}, None), ("englsh", "/p", None),
                ("enlgish", "/p", None), ("multilingal", "/p", None), ("englishh", "/p", None),
                ("englysh", "/p", None),
                ("typed-decision", "/p", None), ("ml", "/srv/ml", None),
                ("en", ["/srv/en"], None), ("home", "~/models/x", 42), ("short", ["/s"], None),
                ("typed", ("/srv/typed", "v2"), "re-pointed")]:
            out.append(attempt(lambda: router.register(name, source, description)))
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)
            out.append(attempt(lambda: router.register("englis", "/x", "dropped")))
        out.append(attempt(lambda: router.register("papers", "/p2", "changed")))
        out += [plain(router.models), plain(router.registered), plain(router.descriptions),
                router.route(EN1, model="short")["repo"], router.route(EN1, model="ml")["repo"]]
        return out

    ours, theirs = both(monkeypatch, scenario)
    assert_parity(ours, theirs)
    value = ours.value
    assert value[:2] == ["papers", "my.model_2-x"]
    assert value[2:8] == [
        "ValueError: invalid checkpoint name 'bad name': use lowercase letters, digits, '.', '_' "
        "or '-', starting with a letter or digit",
        "ValueError: invalid checkpoint name '-lead': use lowercase letters, digits, '.', '_' or "
        "'-', starting with a letter or digit",
        "ValueError: invalid checkpoint name 'a/b': use lowercase letters, digits, '.', '_' or "
        "'-', starting with a letter or digit",
        "ValueError: invalid checkpoint name 5: use lowercase letters, digits, '.', '_' or '-', "
        "starting with a letter or digit",
        "ValueError: invalid checkpoint name 'auto': 'auto' means automatic routing in every "
        "model= argument",
        "ValueError: invalid checkpoint name ' AUTO ': 'auto' means automatic routing in every "
        "model= argument"]
    assert value[8:10] == [
        "TypeError: checkpoint source for 'papers' must be a repo id, a local path or a (repo, "
        "subfolder) pair, got int",
        "TypeError: checkpoint source for 'papers' must be a repo id, a local path or a (repo, "
        "subfolder) pair, got dict"]
    assert value[10:21] == ["englsh", "enlgish", "multilingal", "englishh", "englysh",
                            "typed-decision", "multilingual", "english", "home", "short",
                            "typed-decisions"]
    assert value[21] == ("RuntimeWarning: laya: checkpoint name 'englis' is one edit from the "
                         "built-in 'english'; it is registered as a separate checkpoint and "
                         "'english' is unchanged.")
    models, registered, descriptions = value[23:26]
    assert "englis" not in models and "englis" not in descriptions   # rolled back
    assert models["home"] == str(tmp_path / "models" / "x")
    assert models["english"] == ["/srv/en"] and models["multilingual"] == "/srv/ml"
    assert registered["my.model_2-x"] == {"source": "/repo/sub", "description": "a fine-tune"}
    assert registered["home"]["description"] == "42"
    assert registered["papers"] == {"source": "/p2", "description": "changed"}
    assert "english" not in registered and "typed-decisions" not in registered
    assert value[26:] == ["/s", "/srv/ml"]
    warned = [w for w in ours.warnings if w[0] == "RuntimeWarning"]
    assert warned == [("RuntimeWarning", f"laya: checkpoint name {n!r} is one edit from the "
                       f"built-in {b!r}; it is registered as a separate checkpoint and {b!r} is "
                       "unchanged.") for n, b in [("englsh", "english"), ("enlgish", "english"),
                                                 ("multilingal", "multilingual"),
                                                 ("englishh", "english"), ("englysh", "english"),
                                                 ("typed-decision", "typed-decisions")]]


def test_constructor_models_and_unregister_errors(monkeypatch):
    def scenario(side):
        side.patch_builds()
        router = side.router(models={"papers": "/p", "en": "/srv/en"}, default="papers",
                             hooks=[side.rec()])
        out = [attempt(lambda: router.unregister(name)) for name in
               ("english", "en", "papers", "nope")]
        router.register("notes", "/n", "notes")
        router.load("notes")
        router.revisions["notes"] = "abc"
        out.append(attempt(lambda: router.unregister("Notes")))
        out += [plain(router.models), plain(router.registered), plain(router.descriptions),
                router.revisions, router.loaded, attempt(lambda: router.load("notes"))]
        out.append(attempt(lambda: side.router(models={"bad name": "/x"})))
        out.append(attempt(lambda: side.router(default="nope")))
        out.append(attempt(lambda: side.router(models={"english": 3})))
        return out

    ours, theirs = both(monkeypatch, scenario)
    assert_parity(ours, theirs)
    assert ours.value[:4] == [
        "ValueError: 'english' is a built-in checkpoint and cannot be unregistered",
        "ValueError: 'english' is a built-in checkpoint and cannot be unregistered",
        "ValueError: 'papers' is this Router's default checkpoint; set another default before "
        "unregistering it",
        "ValueError: unknown model 'nope'; choose one of ['english', 'multilingual', 'papers', "
        "'typed-decisions'] (or an alias: ['decisions', 'default', 'en', 'laya', "
        "'laya-multilingual', 'laya-typed-decisions', 'ml', 'multi', 'typed', 'typed_decisions'])"]
    assert ours.value[4] is None
    assert "notes" not in ours.value[5] and "notes" not in ours.value[6]
    assert ours.value[8] == {} and ours.value[9] == []
    assert ours.value[10].startswith("ValueError: unknown model 'notes'")
    assert [(e["event"], e["model"]) for e in ours.trace] == [("on_load", "notes"),
                                                              ("on_evict", "notes")]


def test_attached_without_source_cannot_be_rebuilt(monkeypatch):
    def scenario(side):
        side.patch_builds()
        router = side.router(models=SOURCES, max_loaded=1)
        router.attach("mine", side.agent("mine"))
        router.max_loaded = 1
        router.load("english")                   # evicts the attached agent
        out = [router.loaded, attempt(lambda: router.load("mine")),
               router.preload().loaded]          # preload skips names without a source
        return out

    ours, theirs = both(monkeypatch, scenario)
    assert_parity(ours, theirs)
    assert ours.value[1] == (
        "ValueError: checkpoint 'mine' has no source to load from: it was attached as a built "
        "Agent and is no longer resident; attach it again, or register a path or repo")
    assert ours.value[2] == ["english", "multilingual", "typed-decisions"]


def test_revisions_token_and_device_reach_the_build(monkeypatch):
    def scenario(side):
        side.patch_builds()
        monkeypatch.setenv("HF_TOKEN", "env-token")
        pinned = side.router(models=SOURCES, revision="r1", device="cpu", max_loaded=3,
                             revisions={"ml": "r2", "en": None, "typed": "  "})
        for name in ("english", "multilingual", "typed-decisions"):
            pinned.load(name)
        unpinned = side.router(models=SOURCES, revision="   ", token="explicit",
                               revisions={"ml": "r3"})
        unpinned.load("english")
        unpinned.load("ml")
        monkeypatch.delenv("HF_TOKEN")
        return [pinned.revisions, pinned.loaded_revisions, unpinned.loaded_revisions,
                attempt(lambda: side.router(revisions={"nope": "x"}))]

    ours, theirs = both(monkeypatch, scenario)
    assert_parity(ours, theirs)
    assert ours.builds == [
        ("/srv/en", {"device": "cpu", "token": "env-token", "subfolder": None, "revision": "r1"}),
        ("/srv/bundle", {"device": "cpu", "token": "env-token", "subfolder": "multilingual",
                         "revision": "r2"}),
        ("/srv/typed", {"device": "cpu", "token": "env-token", "subfolder": None,
                        "revision": "r1"}),
        ("/srv/en", {"device": None, "token": "explicit", "subfolder": None}),
        ("/srv/bundle", {"device": None, "token": "explicit", "subfolder": "multilingual",
                         "revision": "r3"})]
    assert ours.value[1] == {"english": "r1", "multilingual": "r2", "typed-decisions": "r1"}
    assert ours.value[3].startswith("ValueError: unknown model 'nope'")


def test_agent_kwargs_validation_against_the_onnx_agent_signature(monkeypatch):
    from laya_edge.onnx_agent import ONNXAgent

    accepted = sorted(set(inspect.signature(ONNXAgent.__init__).parameters) - {"self"}
                      - ER.ROUTER_OWNED_AGENT_ARGS)
    assert attempt(lambda: ER.Router(agent_kwargs={"hooks": None, "device": "cpu",
                                                   "bogus": 1})) == (
        "ValueError: Router sets 'device', 'hooks' itself; pass them to Router(...) instead of "
        "in agent_kwargs")
    assert attempt(lambda: UR.Router(agent_kwargs={"hooks": None, "device": "cpu"})) == (
        "ValueError: Router sets 'device', 'hooks' itself; pass them to Router(...) instead of "
        "in agent_kwargs")
    for owned in sorted(ER.ROUTER_OWNED_AGENT_ARGS):
        assert attempt(lambda: ER.Router(agent_kwargs={owned: None})) == (
            f"ValueError: Router sets {owned!r} itself; pass them to Router(...) instead of in "
            "agent_kwargs")
    # laya_edge's Router also owns `precision` (Router(precision=...)); upstream has none
    assert ER.ROUTER_OWNED_AGENT_ARGS == UR._ROUTER_OWNED_AGENT_ARGS | {"precision"}
    assert attempt(lambda: ER.Router(agent_kwargs={"fast": True, "bogus": 1})) == (
        f"ValueError: ONNXAgent accepts none of 'bogus', 'fast'; it accepts {accepted}")
    # upstream checks its PyTorch Agent (which takes `fast`) and names it
    assert attempt(lambda: UR.Router(agent_kwargs={"fast": True, "bogus": 1})).startswith(
        "ValueError: Agent accepts none of 'bogus'; it accepts [")
    router = ER.Router(agent_kwargs={"intra_op_threads": 2, "onnx_path": "x.onnx"})
    assert router.agent_kwargs == {"intra_op_threads": 2, "onnx_path": "x.onnx"}
    assert ER.Router(agent_kwargs={}).agent_kwargs == {} and ER.Router.agent_kwargs == {}
    side = Side("edge", monkeypatch)
    side.patch_builds()
    router = ER.Router(models=SOURCES, agent_kwargs={"intra_op_threads": 2, "onnx_path": "m.onnx",
                                                     "lang_temperatures": {"de": None}})
    router.load("english")
    assert side.builds == [("/srv/en", {"device": None, "token": None, "subfolder": None,
                                        "intra_op_threads": 2, "onnx_path": "m.onnx",
                                        "lang_temperatures": {"de": None}})]


@pytest.mark.parametrize("env", [
    None, "", "not json", "[1, 2]", "{}", '{"laya.onnx": "abc", "tokenizer/tokenizer.json": "d"}',
    '{"en": {"laya.onnx": "1"}, "ml": {}}', '{"papers": {"x": "2"}, "EN": {"laya.onnx": "1"}}',
    '{"en": {"laya.onnx": "1"}, "tokenizer.json": "2"}', '{"en": {"a": "1"}, "ml": 3}',
    '{"nope": {"a": "1"}}'])
def test_sha256_digests_from_arguments_and_environment(monkeypatch, env):
    def scenario(side):
        if env is None:
            monkeypatch.delenv("LAYA_SHA256_DIGESTS", raising=False)
        else:
            monkeypatch.setenv("LAYA_SHA256_DIGESTS", env)
        out = [attempt(lambda: side.router(models={"papers": "/p"}).sha256_digests),
               attempt(lambda: side.router(models={"papers": "/p"}, sha256_digests={
                   "en": {"laya.onnx": "arg"}, "ml": None}).sha256_digests),
               attempt(lambda: side.router(sha256_digests={"zzz": {}}))]
        monkeypatch.delenv("LAYA_SHA256_DIGESTS", raising=False)
        late = side.router()
        if env is not None:
            monkeypatch.setenv("LAYA_SHA256_DIGESTS", env)
        out.append(attempt(lambda: late.register("papers", "/p")))
        out.append(attempt(lambda: late.register("other", "/o")))
        out.append(plain(late.sha256_digests))
        return out

    ours, theirs = both(monkeypatch, scenario)
    assert_parity(ours, theirs)
    if env == '{"en": {"laya.onnx": "1"}, "ml": {}}':
        assert ours.value[0] == {"english": {"laya.onnx": "1"}, "multilingual": {},
                                 "typed-decisions": {}, "papers": {}}
        assert ours.value[1] == {"english": {"laya.onnx": "arg"}, "multilingual": None,
                                 "typed-decisions": {}, "papers": {}}
        assert ours.value[5] == {"papers": {}, "other": {}}
    if env == '{"papers": {"x": "2"}, "EN": {"laya.onnx": "1"}}':
        assert ours.value[5] == {"papers": {"x": "2"}, "other": {}}
    if env and env.startswith('{"laya.onnx"'):        # flat: not a Router layer
        assert ours.value[0] == {} and ours.value[5] == {}
    if env in ('{"en": {"laya.onnx": "1"}, "tokenizer.json": "2"}', '{"en": {"a": "1"}, "ml": 3}'):
        keys = sorted(json.loads(env))
        assert ours.value[0] == (
            "ValueError: LAYA_SHA256_DIGESTS must be either {artifact: digest} for every "
            "checkpoint or {model: {artifact: digest}} per checkpoint; "
            f"{keys} mixes the two or holds a value that is neither")
    if env in (None, "", "not json", "[1, 2]", "{}"):
        assert ours.value[0] == {} and ours.value[5] == {}
    if env is None or env.startswith('{"laya.onnx"'):
        assert ours.value[2].startswith("ValueError: unknown model 'zzz'")
    if env == '{"nope": {"a": "1"}}':        # a nested entry naming no checkpoint
        assert ours.value[0].startswith("ValueError: unknown model 'nope'")


def test_expected_sha256_is_merged_per_file_at_build_time(monkeypatch):
    def scenario(side):
        monkeypatch.delenv("LAYA_SHA256_DIGESTS", raising=False)
        side.patch_builds()
        router = side.router(models=SOURCES, max_loaded=3,
                             agent_kwargs={"expected_sha256": {"tok": "shared", "laya.onnx": "s"}},
                             sha256_digests={"english": {"laya.onnx": "own"},
                                             "multilingual": None})
        for name in ("english", "multilingual", "typed-decisions"):
            router.load(name)
        router.unload()
        router.sha256_digests["typed-decisions"] = "not-a-map"      # read at build time
        router.sha256_digests["english"]["extra"] = "added"
        router.load("typed")
        router.load("english")
        plain_router = side.router(models=SOURCES, sha256_digests={"ml": {"a": "1"}})
        plain_router.load("english")
        plain_router.load("ml")
        monkeypatch.setenv("LAYA_SHA256_DIGESTS", '{"ml": {"laya.onnx": "env"}}')
        env_router = side.router(models=SOURCES, max_loaded=3,
                                 agent_kwargs={"expected_sha256": {"laya.onnx": "shared"}})
        env_router.load("english")
        env_router.load("ml")
        return None

    ours, theirs = both(monkeypatch, scenario)
    assert_parity(ours, theirs)
    assert [b[1].get("expected_sha256", "absent") for b in ours.builds] == [
        {"tok": "shared", "laya.onnx": "own"},                 # per-checkpoint entry wins
        {"tok": "shared", "laya.onnx": "s"},                   # None names no file
        {"tok": "shared", "laya.onnx": "s"},                   # no entry: the shared map
        "not-a-map",                                           # passed through for the agent
        {"tok": "shared", "laya.onnx": "own", "extra": "added"},
        "absent",                                              # nothing to pin: omitted
        {"a": "1"},
        {"laya.onnx": "shared"},                               # nested env: {} placeholder
        {"laya.onnx": "env"}]                                  # env entry beats the shared one


def test_builtin_names_read_the_local_bundle_directory(monkeypatch, tmp_path):
    monkeypatch.setenv("LAYA_EDGE_MODELS", str(tmp_path / "models"))
    (tmp_path / "models" / "english").mkdir(parents=True)
    side = Side("edge", monkeypatch)
    side.patch_builds()
    router = ER.Router(hooks=[side.rec()])
    side.current = router
    router.load("english")
    assert side.builds == [(str(tmp_path / "models" / "english"),
                            {"device": None, "token": None, "subfolder": None})]
    with pytest.raises(FileNotFoundError) as missing:
        router.load("ml")
    message = str(missing.value)
    assert str(tmp_path / "models" / "multilingual") in message
    assert "python -m laya_edge.export --recipe export/multilingual.json" in message
    assert router.loaded == ["english"] and len(side.builds) == 1      # nothing built
    with pytest.raises(FileNotFoundError):                            # no event either
        router.predict(JA1, Q1)
    assert [e["event"] for e in side.trace] == ["on_load", "on_route"]
    (tmp_path / "models" / "multilingual").mkdir()
    router.load("ml")                                                  # a later load retries
    assert side.builds[-1][0] == str(tmp_path / "models" / "multilingual")
    # re-pointing a built-in uses the given source instead
    router.register("typed", ("/hub/repo", "typed-decisions"))
    router.load("typed")
    assert side.builds[-1] == ("/hub/repo", {"device": None, "token": None,
                                             "subfolder": "typed-decisions"})
    # without LAYA_EDGE_MODELS: ~/.cache/laya_edge/bundles/<name>
    monkeypatch.delenv("LAYA_EDGE_MODELS")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    with pytest.raises(FileNotFoundError) as home_missing:
        ER.Router().load("typed-decisions")
    assert str(tmp_path / "home" / ".cache" / "laya_edge" / "bundles" / "typed-decisions") in \
        str(home_missing.value)
    assert "python -m laya_edge.export --recipe export/typed-decisions.json" in \
        str(home_missing.value)


def test_max_loaded_and_flags_are_coerced_like_upstream(monkeypatch):
    def scenario(side):
        out = []
        for value in (0, -3, "3", 2.9, True, 5):
            out.append(attempt(lambda: side.router(max_loaded=value).max_loaded))
        out.append(attempt(lambda: side.router(max_loaded="x")))
        router = side.router(auto_task_detection="yes", hooks_raise=0, hooks_concurrent=0,
                             hooks_timeout="2.5")
        out.append([router.auto_task_detection, router.hooks_raise, router.hooks_concurrent,
                    router.hooks_timeout, type(router._hooks_lock).__name__])
        typed = {k: {} for k in ER.TYPED_DECISION_WORKFLOWS["invoice_processing"]}
        out.append(router.route(EN1, typed))
        out.append(side.router().route(EN1, typed))
        standalone = side.router(standalone_repos=True)
        out.append([standalone.route(DE1)["repo"], standalone.route(EN1)["repo"],
                    plain(standalone.models)])
        out.append([repr(side.router()), repr(side.router(default="ml", max_loaded=4))])
        return out

    ours, theirs = both(monkeypatch, scenario)
    assert_parity(ours, theirs)
    assert ours.value[:6] == [1, 1, 3, 2, 1, 5]
    assert ours.value[7][:4] == [True, False, False, 2.5]
    assert ours.value[8]["model"] == "typed-decisions"
    assert ours.value[8]["workflow"] == "invoice_processing"
    assert ours.value[9]["model"] == "english" and ours.value[9]["workflow"] == \
        "invoice_processing"
    assert ours.value[10][:2] == ["convaiinnovations/laya-multilingual", "convaiinnovations/laya"]
    assert ours.value[11] == ["Router(loaded=[], max_loaded=2, default='english')",
                              "Router(loaded=[], max_loaded=4, default='multilingual')"]


# ==============================================================================================
# Real laya_edge ONNXAgents on the exported test bundles
# ==============================================================================================

QR = {"urgent": {"type": "noul", "instructions": "Is it urgent?"},
      "topic": {"type": "choice", "instructions": "What is it about?",
                "criteria": ["billing", "tech", "other"]}}
LONG_EN = " ".join([EN1, "The second charge appeared on my card statement this morning."] * 6)
MIXED = [EN1, DE1, EN2, JA1, FR1, DE2, "Where is my parcel? It was due on Monday.",
         "Das Paket ist nicht angekommen, bitte prüfen Sie den Versand"]


def onnx_agent(bundle: Path, label: str) -> Any:
    from laya_edge.onnx_agent import ONNXAgent

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        agent = ONNXAgent(str(bundle))
    agent.label = label
    return agent


@pytest.fixture(scope="module")
def real_agents(bundles):
    return (onnx_agent(bundles["modernbert-tiny"], "onnx-en"),
            onnx_agent(bundles["unigram-tiny"], "onnx-ml"))


def real_scenario(side: Side, router: Any) -> Dict[str, Any]:
    requests = [{"state": s, "questions": QR} for s in MIXED] + [
        {"state": EN1, "questions": QR, "max_len": 24},
        {"state": DE1, "questions": {"topic": QR["topic"]}, "lang": "de"}]
    return {"single": [router.predict(s, QR) for s in MIXED[:4]],
            "batch": router.predict_batch(requests, batch_size=3, min_confidence=0.4,
                                          sort_by_length=True),
            "long": router.predict_long(LONG_EN, QR, window=16, stride=8)}


def test_real_onnx_agents_give_identical_traces_under_both_routers(monkeypatch, real_agents):
    en, ml = real_agents

    def scenario(side):
        router = side.router(hooks=[side.rec()])
        router.attach("english", en)
        router.attach("multilingual", ml)
        return real_scenario(side, router)

    ours, theirs = both(monkeypatch, scenario)
    assert_parity(ours, theirs)
    single = ours.value["single"]
    assert [r["routing"]["model"] for r in single] == ["english", "multilingual", "english",
                                                       "multilingual"]
    direct = en.system_one(EN1, QR, lang="en")
    assert {k: v for k, v in single[0].items() if k != "routing"} == plain(direct)
    assert ours.value["long"]["usage"]["windows"] > 1
    assert all("abstention" in a for r in ours.value["batch"] for a in r["answers"].values())


def test_router_builds_real_onnx_agents_from_bundle_paths(monkeypatch, bundles, real_agents):
    en, ml = real_agents
    attached = run_side("edge", monkeypatch, lambda side: real_scenario(
        side, _attached(side, en, ml)))

    def built(side):
        router = side.router(models={"english": str(bundles["modernbert-tiny"]),
                                     "multilingual": str(bundles["unigram-tiny"])},
                             hooks=[side.rec()])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            router.preload(["english", "multilingual"])
        out = real_scenario(side, router)
        out["loaded"] = router.loaded
        return out

    ours = run_side("edge", monkeypatch, built)
    assert ours.err() is None
    loads = [e for e in ours.trace if e["event"] == "on_load"]
    assert [(e["model"], e["agent"]) for e in loads] == [("english", "ONNXAgent"),
                                                       ("multilingual", "ONNXAgent")]
    assert sorted(ours.value.pop("loaded")) == ["english", "multilingual"]
    # same answers as the agents attached by hand (routing repo strings differ: local paths)
    def strip(value):
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k != "repo"}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value
    assert strip(ours.value) == strip(attached.value)


def _attached(side: Side, en: Any, ml: Any) -> Any:
    router = side.router()
    router.attach("english", en)
    router.attach("multilingual", ml)
    return router


@pytest.mark.parametrize("builds", ["cached", "real"])
def test_concurrent_predicts_while_another_thread_loads_and_evicts(monkeypatch, bundles,
                                                                   real_agents, builds):
    """8 threads predict on two bundles while a ninth loads/evicts with max_loaded=1: every
    answer equals the serial one, nothing deadlocks, and it finishes in bounded time."""
    import laya_edge.onnx_agent as onnx_module

    sources = {"english": str(bundles["modernbert-tiny"]),
               "multilingual": str(bundles["unigram-tiny"])}
    collects: List[int] = []
    if builds == "cached":      # instant builds handing out the real agents: maximum churn
        by_path = {sources["english"]: real_agents[0], sources["multilingual"]: real_agents[1]}
        monkeypatch.setattr(onnx_module, "ONNXAgent",
                            lambda path, **kwargs: by_path[path])
        # every eviction runs gc.collect() under the state lock (docs/design/routing.md#residency);
        # in a test process holding torch that costs ~0.1 s a time, so count the calls instead
        monkeypatch.setattr(EResidency, "gc", type("Gc", (), {"collect": staticmethod(
            lambda: collects.append(1) or 0)}))
    serial_router = ER.Router(models=sources, max_loaded=2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        serial = [plain(serial_router.predict(s, QR)) for s in MIXED]
        serial_batch = plain(serial_router.predict_batch(
            [{"state": s, "questions": QR} for s in MIXED]))
    serial_router.unload()
    events: List[str] = []
    router = ER.Router(models=sources, max_loaded=1,
                       hooks=[Act("on_load", lambda ctx: events.append("load")),
                              Act("on_evict", lambda ctx: events.append("evict"))])
    rounds = 6 if builds == "cached" else 2
    stop = threading.Event()
    failures: List[BaseException] = []
    answers: List[Any] = []

    def churn():
        i = 0
        try:
            while not stop.is_set():
                router.load(("english", "multilingual")[i % 2])
                if i % 5 == 4:
                    router.unload()
                i += 1
                time.sleep(0.01)
        except BaseException as exc:  # noqa: BLE001
            failures.append(exc)

    def worker(t):
        try:
            for k in range(rounds):
                i = (t + k) % len(MIXED)
                if k % 3 == 2:
                    got = router.predict_batch([{"state": s, "questions": QR} for s in MIXED])
                    answers.append(("batch", None, plain(got)))
                else:
                    answers.append(("single", i, plain(router.predict(MIXED[i], QR))))
        except BaseException as exc:  # noqa: BLE001
            failures.append(exc)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        started = time.perf_counter()
        churner = threading.Thread(target=churn, daemon=True)
        workers = [threading.Thread(target=worker, args=(t,), daemon=True) for t in range(8)]
        churner.start()
        for w in workers:
            w.start()
        for w in workers:
            w.join(max(1.0, 120 - (time.perf_counter() - started)))
        stop.set()
        churner.join(10)
    assert not any(w.is_alive() for w in workers) and not churner.is_alive(), "deadlock"
    assert failures == []
    assert len(answers) == 8 * rounds
    for kind, i, got in answers:
        assert got == (serial_batch if kind == "batch" else serial[i])
    assert len(router.loaded) <= 1
    assert events.count("load") >= 2 and "evict" in events
    if builds == "cached":
        assert len(collects) >= events.count("evict") > 0


def test_standalone_builtins_also_read_the_local_bundle_directory(monkeypatch, tmp_path):
    import laya_edge.onnx_agent as onnx_agent

    built = []

    class StandIn:
        def __init__(self, repo, **kwargs):
            built.append((repo, kwargs))

    monkeypatch.setattr(onnx_agent, "ONNXAgent", StandIn)
    monkeypatch.setenv("LAYA_EDGE_MODELS", str(tmp_path))
    (tmp_path / "multilingual").mkdir()
    router = ER.Router(standalone_repos=True)
    assert router.route("Bonjour, je voudrais annuler ma commande s'il vous plait")["repo"] == \
        "convaiinnovations/laya-multilingual"
    router.load("multilingual")
    assert built == [(str(tmp_path / "multilingual"),
                      {"device": None, "token": None, "subfolder": None})]
    router.register("english", "convaiinnovations/some-fork")   # re-pointed: used as given
    router.load("english")
    assert built[-1][0] == "convaiinnovations/some-fork"
