"""The harness of the Router tests: every scenario runs twice, once on `laya_edge.Router` and
once on upstream's `laya.Router`, each driving the same kind of agents (fake agents attached
with `attach()`, recording their calls, optionally refusing keywords or raising; for model
builds a stand-in class monkeypatched over `laya_edge.onnx_agent.ONNXAgent` /
`laya.agent.Agent`, so nothing is ever downloaded). A recording hook snapshots the context
fields of docs/hooks/api.md#event-payloads on every event; `assert_parity` compares the two
traces, the agent calls, the builds, the return values, the exceptions and the warnings, except
where laya_edge follows the user's documents rather than upstream (docs/hooks/lifecycle.md,
"Where laya_edge follows the seeds", items 1, 2 and 4): there the tests assert our behaviour
explicitly and show upstream's difference.
"""
from __future__ import annotations

import copy
import inspect
import json
import threading
import time
import warnings
from typing import Any, Callable, Dict, List, Optional

import laya.hooks as UH
import laya.router as UR
import laya_edge.hooks as EH
import laya_edge.residency as EResidency
import laya_edge.router as ER

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
# checkpoint sources of the model-lifecycle and registry scenarios (never read: builds are stand-ins)
SOURCES = {"english": "/srv/en", "multilingual": ("/srv/bundle", "multilingual"),
           "typed-decisions": "/srv/typed"}


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


SOURCE_KEYS = ["path", "revision", "manifest_sha256", "created"]


def without_sources(value: Any) -> Any:
    """`value` minus `source` in every routing decision: the one key laya_edge adds to a decision
    answered by an agent that knows its bundle (docs/design/upstream-differences.md), checked
    here for its shape so the rest compares with upstream as is."""
    if isinstance(value, dict):
        if {"model", "reason", "source"} <= set(value):
            assert list(value["source"]) == SOURCE_KEYS, value["source"]
            assert value["source"]["manifest_sha256"] is None or len(
                value["source"]["manifest_sha256"]) == 64
        return {k: without_sources(v) for k, v in value.items()
                if not (k == "source" and {"model", "reason"} <= set(value))}
    if isinstance(value, list):
        return [without_sources(v) for v in value]
    return value


class Outcome:
    def __init__(self, side: Side, value: Any, error: Optional[BaseException],
                 caught: List[Any]):
        self.side, self.value, self.error = side, value, error
        self.warnings = [(w.category.__name__, str(w.message)) for w in caught]
        self.trace, self.calls, self.builds = side.trace, side.calls, side.builds
        if side.name == "edge":
            self.value, self.trace = without_sources(value), without_sources(side.trace)

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
