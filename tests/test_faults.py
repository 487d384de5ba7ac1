"""Faults mid-call: the caller gets one clear exception or the right answer, the end hooks run
for every call that started, and the agent or Router keeps answering afterwards. (Hooks that raise, time out or raise
KeyboardInterrupt are covered in test_hooks_dispatch.py and test_lifecycle.py; an unavailable
execution provider in test_precision.py.)"""
import shutil

import pytest

import laya_edge
from laya_edge import BaseHook
from laya_edge import onnx_agent as agent_module

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

QUESTIONS = {"refund": {"type": "noul", "instructions": "Is a refund requested?"},
             "dept": {"type": "choice", "instructions": "Which team?",
                      "criteria": ["billing", "technical", "sales"]}}
STATES = ["I was charged twice.", "The app crashes on start.", "A quote for 20 seats, please.",
          "Refund my order, it never arrived."]


class Seen(BaseHook):
    def __init__(self):
        self.events = []

    def on_predict_start(self, ctx):
        self.events.append(("start", None))

    def on_error(self, ctx):
        self.events.append(("error", type(ctx.error).__name__))

    def on_predict_end(self, ctx):
        self.events.append(("end", type(ctx.error).__name__ if ctx.error else None))

    def on_load(self, ctx):
        self.events.append(("load", ctx.model))


class InjectedRuntimeFailure(RuntimeError):
    pass


def failing_on_call(number, real):
    """`session.run` stand-in that fails on its `number`-th call (1-based)."""
    calls = []

    def run(*args, **kwargs):
        calls.append(1)
        if len(calls) == number:
            raise InjectedRuntimeFailure("onnxruntime failed (injected)")
        return real(*args, **kwargs)
    return run, calls


def test_onnxruntime_failing_mid_batch(bundles, monkeypatch):
    seen = Seen()
    agent = laya_edge.ONNXAgent(str(bundles["modernbert-tiny"]), hooks=[seen])
    expected = laya_edge.ONNXAgent(str(bundles["modernbert-tiny"])).predict_batch(STATES,
                                                                                 QUESTIONS)
    run, calls = failing_on_call(2, agent_module.run)
    monkeypatch.setattr(agent_module, "run", run)
    with pytest.raises(InjectedRuntimeFailure, match="injected"):
        agent.predict_batch(STATES, QUESTIONS, batch_size=1)
    assert len(calls) == 2  # the batch stopped at the failing run
    assert seen.events == [("start", None), ("error", "InjectedRuntimeFailure"),
                           ("end", "InjectedRuntimeFailure")]
    monkeypatch.undo()
    assert agent.predict_batch(STATES, QUESTIONS, batch_size=1) == expected


@pytest.mark.parametrize("damage", ["delete graph", "truncate tokenizer", "truncate graph"])
def test_a_damaged_bundle_fails_its_load_and_leaves_the_router_working(bundles, tmp_path,
                                                                      damage):
    english = tmp_path / "english"
    shutil.copytree(bundles["modernbert-tiny"], english)
    seen = Seen()
    router = laya_edge.Router(models={"english": str(english),
                                      "multilingual": str(bundles["unigram-tiny"])},
                              max_loaded=1, hooks=[seen])
    target = english / ("tokenizer/tokenizer.json" if "tokenizer" in damage else "laya.onnx")
    if damage.startswith("delete"):
        target.unlink()
    else:
        target.write_bytes(target.read_bytes()[:100])
    error = FileNotFoundError if damage.startswith("delete") else ValueError
    with pytest.raises(error, match="laya.onnx|SHA-256 mismatch") as raised:
        router.predict(STATES[0], QUESTIONS)
    assert str(english) in str(raised.value) or "laya.onnx" in str(raised.value)
    # The seeds put route and load before the predict context exists
    # (docs/hooks/lifecycle.md#routerpredict): a failed load raises to the caller with no start or
    # end event, and nothing is left resident.
    assert seen.events == []
    assert router.loaded == []
    german = router.predict("Meine Rechnung ist doppelt abgebucht.", QUESTIONS)
    reference = laya_edge.ONNXAgent(str(bundles["unigram-tiny"]))
    assert german["answers"] == reference.system_one("Meine Rechnung ist doppelt abgebucht.",
                                                     QUESTIONS)["answers"]
    assert router.loaded == ["multilingual"]
