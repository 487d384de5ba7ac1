"""Router.predict_long against upstream laya 0.4.15 (docs/design/routing.md#answering)."""
from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from router_support import (Act, DE1, EN1, KwLong, LangLong, NoLangLong, NoLongAgent, Q1, SIDES,
                            Side, assert_parity, both, same)

# upstream laya emits DeprecationWarnings these comparisons do not look at
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

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
