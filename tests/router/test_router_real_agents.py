"""Routers over real laya_edge ONNXAgents on the exported test bundles: the same traces as
upstream's Router over the same agents, and concurrency while checkpoints load and evict."""
from __future__ import annotations

import threading
import time
import warnings
from typing import Any, Dict, List

import pytest

import laya_edge.residency as EResidency
import laya_edge.router as ER

from router_support import (Act, DE1, DE2, EN1, EN2, FR1, JA1, Side, assert_parity, both, plain,
                            run_side)

# upstream laya emits DeprecationWarnings these comparisons do not look at
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

# ==============================================================================================
# Real laya_edge ONNXAgents on the exported test bundles
# ==============================================================================================

QR = {"urgent": {"type": "noul", "instructions": "Is it urgent?"},
      "topic": {"type": "choice", "instructions": "What is it about?",
                "criteria": ["billing", "tech", "other"]}}
LONG_EN = " ".join([EN1, "The second charge appeared on my card statement this morning."] * 6)
MIXED = [EN1, DE1, EN2, JA1, FR1, DE2, "Where is my parcel? It was due on Monday.",
         "Das Paket ist nicht angekommen, bitte prüfen Sie den Versand"]


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
