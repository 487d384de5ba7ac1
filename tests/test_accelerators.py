"""The accelerator rules that need no GPU: which runs a large call becomes on each device (seen
by a recording session around a real one), the caller's providers reconciled with device and
precision, the fallback plans and their precision, the TensorRT cache directory, which GPU an
index names under CUDA_VISIBLE_DEVICES, and the CUDA memory limit.

Real CUDA and TensorRT sessions are tested in tests/gpu/ where onnxruntime offers them.
"""
import copy
import dataclasses
import warnings

import pytest

import laya_edge
from laya_edge import session as S
from laya_edge.accelerators import (CPU_RUN_TOKENS, CUDA_RUN_TOKENS, UNKNOWN_GPU, RunLimits,
                                    gpu_name, prepare_provider_directories, run_limits,
                                    visible_gpu)
from agent_support import assert_close

VARIANTS = {"fp32": "laya.onnx", "fp16": "laya.fp16.onnx", "int8": "laya.int8.onnx"}
RANGES = {"batch": {"min": 1, "opt": 8, "max": 64}, "sequence": {"min": 4, "opt": 256, "max": 512},
          "markers": {"min": 2, "opt": 4, "max": 64}}
QUESTIONS4 = {
    "dept": {"type": "choice", "instructions": "Which team should handle this?",
             "criteria": ["billing", "technical", "sales"]},
    "urgent": {"type": "noul", "instructions": "The customer needs help today."},
    "refund": {"type": "noul", "instructions": "The customer asks for money back."},
    "severity": {"type": "score", "instructions": "How severe is it?",
                 "criteria": ["minor", "annoying", "blocking"]},
}
TICKETS = ["I was charged twice this month, please refund one payment.",
           "The app crashes when I open settings. " * 12,
           "Can we get a volume discount for 50 seats?",
           "Your latest invoice lists a product we never ordered. " * 30]


def quiet_load(path, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return laya_edge.load(str(path), **kwargs)


class Recording:
    """A real session that records the shape of every run it is given."""

    def __init__(self, session):
        self.session, self.runs = session, []

    def run(self, names, feeds):
        self.runs.append(feeds["input_ids"].shape)
        return self.session.run(names, feeds)

    def get_providers(self):
        return self.session.get_providers()


STATES = (TICKETS * 8)[:32]
LONG_STATES = [ticket * 8 for ticket in STATES]  # rows long enough to reach the token caps


@pytest.fixture(scope="module")
def unsplit(bundles):
    """A CPU agent on the tiny bundle and its answers with no run limits at all (one run per
    length group), computed once for every device's limits."""
    agent = quiet_load(bundles["modernbert-tiny"], device="cpu")
    agent.plan = dataclasses.replace(agent.plan, limits=RunLimits())
    return (agent, agent.predict_batch(STATES, QUESTIONS4),
            agent.predict_batch(LONG_STATES, QUESTIONS4))


@pytest.mark.parametrize("device, rows, tokens", [
    ("tensorrt", 64, 64 * 512), ("cuda", None, CUDA_RUN_TOKENS), ("cpu", None, CPU_RUN_TOKENS)])
def test_a_32x4_call_runs_within_each_devices_limits(unsplit, device, rows, tokens):
    """32 states x 4 questions are 128 rows: TensorRT's profile takes at most 64 per run, CUDA
    and the CPU at most their token caps; the answers are those of the unsplit call."""
    shared, reference, reference_long = unsplit
    agent = copy.copy(shared)
    agent.plan = dataclasses.replace(shared.plan, limits=run_limits(device, RANGES))
    agent.session = recording = Recording(shared.session)
    answered = agent.predict_batch(STATES, QUESTIONS4)
    answered_long = agent.predict_batch(LONG_STATES, QUESTIONS4)
    assert sum(shape[0] for shape in recording.runs) == 2 * 128
    assert len(recording.runs) >= 3  # the long call is split on every device
    assert all(rows is None or shape[0] <= rows for shape in recording.runs)
    assert all(shape[0] * shape[1] <= tokens or shape[0] == 1 for shape in recording.runs)
    if rows is not None:
        assert max(shape[0] for shape in recording.runs) == rows  # split at the limit
    assert_close(answered, reference)
    assert_close(answered_long, reference_long)


def test_more_options_than_the_tensorrt_profile_is_refused_before_any_run(bundles):
    agent = quiet_load(bundles["modernbert-tiny"], device="cpu")
    agent.plan = dataclasses.replace(agent.plan, device="tensorrt",
                                     limits=run_limits("tensorrt", RANGES))
    agent.session = recording = Recording(agent.session)
    many = {"pick": {"type": "choice", "instructions": "Which?",
                     "criteria": [f"option {i}" for i in range(70)]}}
    with pytest.raises(ValueError, match="a question has 70 options; this tensorrt session "
                                         "takes at most 64 per row"):
        agent.system_one("hello", many)
    assert recording.runs == []


# -- the caller's providers --------------------------------------------------------------------

def test_a_cpu_provider_list_on_a_gpu_machine_runs_the_cpu_plan():
    chosen = S.plan(None, None, [S.CUDA, S.CPU], VARIANTS, providers=[S.CPU])
    assert (chosen.device, chosen.precision, chosen.graph) == ("cpu", "int8", "laya.int8.onnx")
    assert chosen.fallback is None and chosen.binding is None


def test_a_cuda_provider_list_plans_for_cuda_with_its_device_index():
    chosen = S.plan(None, None, [S.CUDA, S.CPU], VARIANTS,
                    providers=[(S.CUDA, {"device_id": 2}), S.CPU])
    assert (chosen.device, chosen.device_id, chosen.precision) == ("cuda", 2, "fp16")
    assert chosen.binding == ("cuda", 2)
    # its fallback is the CPU with the CPU's precision, not the fp16 graph
    assert (chosen.fallback.device, chosen.fallback.precision) == ("cpu", "int8")
    assert chosen.fallback.device_id == 2


def test_a_provider_without_rules_runs_plain_on_fp32():
    """A provider laya_edge has no rules for (OpenVINO here) runs plain, on the fp32 graph."""
    chosen = S.plan(None, None, ["OpenVINOExecutionProvider", S.CPU], VARIANTS,
                    providers=["OpenVINOExecutionProvider", S.CPU])
    assert (chosen.device, chosen.precision, chosen.binding) == (
        "OpenVINOExecutionProvider", "fp32", None)
    assert chosen.fallback.device == "cpu"


@pytest.mark.parametrize("kwargs, message", [
    ({"device": "cuda", "providers": [S.CPU]},
     "device='cuda' disagrees with providers=, whose first provider 'CPUExecutionProvider' "
     "runs on 'cpu'"),
    ({"device": "cuda:1", "providers": [(S.CUDA, {"device_id": 0})]},
     "device=':1' disagrees with providers=, whose options set device_id=0"),
    ({"providers": [S.CUDA, S.CPU], "provider_options": [{"device_id": 0}]},
     r"one options dict per provider \(2\)"),
    ({"providers": [(S.CUDA, {"device_id": 0})], "provider_options": [{}]},
     "not both"),
    ({"provider_options": [{}]}, "provider_options needs providers="),
    ({"providers": "CPUExecutionProvider"}, "non-empty list of provider names"),
    ({"providers": []}, "non-empty list of provider names"),
    ({"providers": [(S.CUDA, "device_id=0")]}, r"a \(name, options dict\) pair"),
    ({"providers": [S.CPU], "provider_options": ["x"]}, "entries must be dicts"),
    ({"providers": [(S.CUDA, {"device_id": "first"})]}, "device_id must be a GPU index"),
])
def test_providers_that_disagree_or_do_not_line_up_are_refused(kwargs, message):
    device = kwargs.pop("device", None)
    with pytest.raises(ValueError, match=message):
        S.plan(device, None, [S.CUDA, S.CPU], VARIANTS, **kwargs)


def test_bad_providers_are_refused_before_the_bundle_is_read(bundles):
    with pytest.raises(ValueError, match="disagrees with providers="):
        laya_edge.load(str(bundles["minilm"]), device="cuda", providers=[S.CPU])


# -- fallback plans ----------------------------------------------------------------------------

@pytest.mark.parametrize("precision, cpu_precision", [
    (None, "int8"), ("fp16", "fp32"), ("fp32", "fp32"), ("int8", "int8")])
def test_the_cpu_fallback_plans_its_own_precision(precision, cpu_precision):
    cuda = S.plan("cuda:1", precision, [S.CUDA, S.CPU], VARIANTS)
    fallback = cuda.fallback
    assert (fallback.device, fallback.device_id, fallback.providers) == ("cpu", 1, [S.CPU])
    assert fallback.precision == cpu_precision and fallback.graph == VARIANTS[cpu_precision]
    assert fallback.fallback is None


def test_tensorrt_falls_back_to_cuda_with_its_options_then_to_the_cpu(monkeypatch):
    monkeypatch.setattr(S, "gpu_name", lambda index: "NVIDIA H200")
    trt = S.plan("tensorrt:1", None, [S.TENSORRT, S.CUDA, S.CPU], VARIANTS, "f" * 64, RANGES,
                 gpu_mem_limit=2 ** 30)
    cuda, cpu = trt.fallback, trt.fallback.fallback
    assert [trt.device, cuda.device, cpu.device] == ["tensorrt", "cuda", "cpu"]
    assert [trt.precision, cuda.precision, cpu.precision] == ["fp16", "fp16", "int8"]
    assert cuda.graph == VARIANTS["fp16"] and trt.graph == VARIANTS["fp32"]
    # the CUDA fallback keeps the device index and the memory limit the TensorRT plan had
    assert cuda.providers[0] == trt.providers[1] == (S.CUDA, {"device_id": 1,
                                                              "gpu_mem_limit": 2 ** 30})
    assert cuda.limits.rows is None and trt.limits.rows == 64


@pytest.mark.parametrize("limit", [0, -1, 1.5, True, "1G"])
def test_a_bad_gpu_memory_limit_is_refused(limit, bundles):
    with pytest.raises(ValueError, match="gpu_mem_limit must be a positive number of bytes"):
        S.plan("cuda", None, [S.CUDA, S.CPU], VARIANTS, gpu_mem_limit=limit)
    with pytest.raises(ValueError, match="gpu_mem_limit"):
        laya_edge.load(str(bundles["minilm"]), gpu_mem_limit=limit)


def test_provider_directories_are_created_whole(tmp_path):
    engines = tmp_path / "fresh" / "cache" / "root" / "key"
    prepare_provider_directories([(S.TENSORRT, {"trt_engine_cache_path": str(engines),
                                                "trt_timing_cache_path": str(engines)}),
                                  (S.CUDA, {"device_id": 0}), S.CPU])
    assert engines.is_dir()


# -- which GPU an index names ----------------------------------------------------------------

@pytest.mark.parametrize("visible, index, expected", [
    (None, 1, "1"),
    ("3", 0, "3"),
    ("2,3", 1, "3"),
    ("2,3", 2, None),
    ("GPU-8f6e2d1c-aaaa, 1", 0, "GPU-8f6e2d1c-aaaa"),
    ("", 0, None),
    ("-1", 0, None),
    ("0,-1,2", 1, None),  # CUDA stops at the first invalid entry
    ("NoDevFiles", 0, None),
])
def test_the_gpu_an_index_names_follows_cuda_visible_devices(visible, index, expected):
    environ = {} if visible is None else {"CUDA_VISIBLE_DEVICES": visible}
    assert visible_gpu(index, environ) == expected


def test_a_hidden_gpu_has_no_name():
    assert gpu_name(0, {"CUDA_VISIBLE_DEVICES": ""}) == UNKNOWN_GPU
