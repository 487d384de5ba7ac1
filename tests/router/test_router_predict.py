"""Router.route and Router.predict against upstream laya 0.4.15: decisions, the hook order, the
predict lifecycle around routing and loading (docs/hooks/lifecycle.md#routerpredict)."""
from __future__ import annotations

import inspect
import json

import pytest

import laya.router as UR

import laya_edge.router as ER

from router_support import (Act, DE1, DE2, EN1, EN2, FR1, JA1, NO_LETTERS, Q1, Recorder,
                            assert_parity, both, plain, raiser, same)

# upstream laya emits DeprecationWarnings these comparisons do not look at
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

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
