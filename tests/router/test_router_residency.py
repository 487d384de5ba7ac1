"""The Router's model lifecycle against upstream laya 0.4.15: load, preload, unload, attach,
register and unregister, LRU eviction, shared builds, on_load and on_evict
(docs/design/routing.md#residency)."""
from __future__ import annotations

import threading
import time
import types
from typing import Any, Dict, List

import pytest

from router_support import (SOURCES, Act, DE1, EN1, Q1, assert_parity, both, plain, raiser)

# upstream laya emits DeprecationWarnings these comparisons do not look at
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

# ==============================================================================================
# Model lifecycle: load / preload / unload / attach / register / unregister
# (docs/design/routing.md#residency, docs/hooks/lifecycle.md#model-lifecycle-on_load-and-on_evict)
# ==============================================================================================

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


def test_a_failed_build_is_recorded_until_a_build_succeeds():
    """What a service reports as not loadable, and how it tells a failed load from a bad
    request: the exact error of the last failed build, per checkpoint, gone once one builds."""
    import laya_edge

    mounted = threading.Event()

    def build(path: str, **options: Any) -> Any:
        if not mounted.is_set():
            raise OSError(f"{path}: disk not mounted")
        return types.SimpleNamespace(path=path)

    router = laya_edge.Router(models={"english": "/srv/en", "multilingual": "/srv/ml"},
                              agent_factory=build)
    assert router.load_failures() == {}
    with pytest.raises(OSError) as failed:
        router.load("english")
    assert router.load_failures() == {"english": failed.value}
    mounted.set()
    router.load("multilingual")
    assert router.load_failures() == {"english": failed.value}
    router.load("english")
    assert router.load_failures() == {}
