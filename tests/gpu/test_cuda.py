"""Real CUDA (and, where this onnxruntime offers it, TensorRT) sessions on a small exported
bundle: answers against the CPU's fp32, a 32 x 4 call within the run limits, the fallback when a
device cannot start, and runtime_info read back from the session.

Skipped, with the reason, where onnxruntime offers no CUDA execution provider: CI's CPU machine
skips this whole module. scripts/gpu_check.py runs it on a GPU machine.
"""
import warnings

import numpy as np
import pytest

ort = pytest.importorskip("onnxruntime")
CUDA, TENSORRT = "CUDAExecutionProvider", "TensorrtExecutionProvider"
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(CUDA not in ort.get_available_providers(),
                       reason="this onnxruntime offers no CUDAExecutionProvider (a CPU build, or "
                              "no onnxruntime-gpu installed): no GPU to test on"),
]

import laya_edge  # noqa: E402
from laya_edge.export import ExportOptions, Progress, export_bundle  # noqa: E402

QUESTIONS = {
    "dept": {"type": "choice", "instructions": "Which team should handle this ticket?",
             "criteria": ["billing", "technical", "sales", "legal"]},
    "urgent": {"type": "noul", "instructions": "The customer needs help today."},
    "refund": {"type": "noul", "instructions": "The customer asks for money back."},
    "severity": {"type": "score", "instructions": "How severe is the problem?",
                 "criteria": ["minor", "annoying", "blocking"]},
}
TICKETS = [
    "I was charged twice for my subscription this month, please refund one of the payments.",
    "The mobile app crashes every time I open the settings page since the last update.",
    "We would like a quote for 50 more seats and a volume discount for the annual plan.",
    "Your latest invoice lists a product we never ordered; our accounts team needs a fix. " * 6,
    "My password reset e-mail never arrives and I am locked out before an important demo.",
    "The parcel arrived damaged and two items are missing from the order.",
    "Please delete my account and all my data as required by GDPR.",
    "Great service last week, the agent solved the sync issue in minutes. Thanks! " * 3,
]
STATES = TICKETS * 4  # 32 states x 4 questions: 128 rows


@pytest.fixture(scope="module")
def gpu_bundle(checkpoints, tmp_path_factory):
    out = tmp_path_factory.mktemp("gpu") / "minilm"
    export_bundle(ExportOptions(source=str(checkpoints["minilm"]), out=out,
                                precisions=("fp32", "fp16")), Progress(quiet=True))
    return out


def load(bundle, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return laya_edge.load(str(bundle), **kwargs)


def probabilities(results):
    return np.array([answer["probability"] for result in results
                     for answer in result["answers"].values()])


def choices(results):
    return [answer["answer"] for result in results for answer in result["answers"].values()]


@pytest.fixture(scope="module")
def cpu_answers(gpu_bundle):
    return load(gpu_bundle, device="cpu", precision="fp32").predict_batch(STATES, QUESTIONS)


def test_cuda_fp32_answers_as_the_cpu(gpu_bundle, cpu_answers):
    agent = load(gpu_bundle, device="cuda", precision="fp32")
    info = agent.runtime_info()
    assert (info["device"], info["precision"], info["providers"][0]) == ("cuda", "fp32", CUDA)
    answers = agent.predict_batch(STATES, QUESTIONS)
    assert choices(answers) == choices(cpu_answers)
    assert np.abs(probabilities(answers) - probabilities(cpu_answers)).max() <= 1e-4


def test_cuda_fp16_agrees_with_the_cpus_fp32(gpu_bundle, cpu_answers):
    agent = load(gpu_bundle, device="cuda")
    assert agent.runtime_info()["precision"] == "fp16"
    ours, reference = choices(agent.predict_batch(STATES, QUESTIONS)), choices(cpu_answers)
    agreement = sum(a == b for a, b in zip(ours, reference)) / len(reference)
    assert agreement >= 0.995, agreement


@pytest.mark.skipif(TENSORRT not in ort.get_available_providers(),
                    reason="this onnxruntime offers no TensorrtExecutionProvider")
def test_tensorrt_answers_a_32x4_call_within_its_profile(gpu_bundle, cpu_answers, tmp_path,
                                                         monkeypatch):
    cache = tmp_path / "fresh" / "engines"
    monkeypatch.setenv("LAYA_EDGE_TRT_CACHE", str(cache))
    agent = load(gpu_bundle, device="tensorrt", precision="fp32")
    assert agent.runtime_info()["providers"][0] == TENSORRT
    # 128 rows: split at the profile's 64, so TensorRT never rebuilds or rejects a shape
    answers = agent.predict_batch(STATES, QUESTIONS)
    assert choices(answers) == choices(cpu_answers)
    assert np.abs(probabilities(answers) - probabilities(cpu_answers)).max() <= 1e-3
    assert any(cache.rglob("*")), "TensorRT wrote no engine or timing cache"


def test_a_device_that_cannot_start_falls_back_to_the_cpus_precision(gpu_bundle, cpu_answers):
    with pytest.warns(RuntimeWarning, match="CUDAExecutionProvider failed to initialise"):
        agent = laya_edge.load(str(gpu_bundle), device="cuda:97")
    info = agent.runtime_info()
    assert (info["device"], info["providers"]) == ("cpu", ["CPUExecutionProvider"])
    assert info["precision"] == "fp32"  # not the fp16 graph planned for the GPU
    assert agent.predict_batch(STATES, QUESTIONS) == cpu_answers
