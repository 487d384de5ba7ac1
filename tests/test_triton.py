"""`--triton-repo`: the repository is valid Triton configuration that matches the graph, and
`TritonAgent` answers exactly as `ONNXAgent` through a Triton-protocol client."""
import hashlib
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import laya_edge

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

ONNX_TO_TRITON = {7: "TYPE_INT64", 9: "TYPE_BOOL", 1: "TYPE_FP32"}
QUESTIONS = {"refund": {"type": "noul", "instructions": "Is a refund requested?"},
             "dept": {"type": "choice", "instructions": "Which team?",
                      "criteria": {"billing": "money", "technical": "bugs", "sales": None}},
             "urgency": {"type": "score", "instructions": "How urgent?",
                         "criteria": ["low", "high", "critical"]}}
STATES = ["I was charged twice, refund one.", "The app crashes at start.",
          "Quote for 20 seats?"] * 3


@pytest.fixture(scope="module")
def repo(checkpoints, tmp_path_factory):
    """A bundle and its Triton repository, written by the export command line."""
    root = tmp_path_factory.mktemp("triton")
    done = subprocess.run([sys.executable, "-m", "laya_edge.export",
                           str(checkpoints["modernbert-tiny"]), "--out", str(root / "bundle"),
                           "--triton-repo", str(root / "repo"), "--quiet"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    return root / "bundle", root / "repo"


def parse_config(path):
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2

    return text_format.Parse(path.read_text(), model_config_pb2.ModelConfig())


def graph_tensors(graph_path):
    import onnx

    graph = onnx.load(str(graph_path), load_external_data=False).graph

    def describe(values):
        return {v.name: (ONNX_TO_TRITON[v.type.tensor_type.elem_type],
                         [d.dim_value if d.HasField("dim_value") else -1
                          for d in v.type.tensor_type.shape.dim]) for v in values}
    return describe(graph.input), describe(graph.output)


@pytest.mark.parametrize("model", ["laya", "laya-tensorrt"])
def test_config_matches_the_graph(repo, model):
    from tritonclient.grpc import model_config_pb2

    bundle, root = repo
    config = parse_config(root / model / "config.pbtxt")
    manifest = json.loads((bundle / "laya_edge.json").read_text())
    graph = root / model / "1" / "model.onnx"
    assert (hashlib.sha256(graph.read_bytes()).hexdigest()
            == manifest["files"]["laya.onnx"]["sha256"])
    assert config.name == model and config.platform == "onnxruntime_onnx"
    assert config.max_batch_size == manifest["graph"]["shape_ranges"]["batch"]["max"]
    assert list(config.dynamic_batching.preferred_batch_size)
    inputs, outputs = graph_tensors(graph)
    for declared, actual in ((config.input, inputs), (config.output, outputs)):
        assert [t.name for t in declared] == list(actual)
        for tensor in declared:
            data_type, dims = actual[tensor.name]
            assert model_config_pb2.DataType.Name(tensor.data_type) == data_type
            assert dims[0] == -1  # the graph's batch axis is Triton's batching axis
            batched = list(tensor.reshape.shape) if tensor.HasField("reshape") else list(
                tensor.dims)
            assert batched == dims[1:], tensor.name


def test_tensorrt_model_carries_the_agents_tensorrt_profiles(repo):
    from laya_edge.session import tensorrt_options

    bundle, root = repo
    config = parse_config(root / "laya-tensorrt" / "config.pbtxt")
    plain = parse_config(root / "laya" / "config.pbtxt")
    accelerator, = config.optimization.execution_accelerators.gpu_execution_accelerator
    assert accelerator.name == "tensorrt"
    assert accelerator.parameters["precision_mode"] == "FP16"
    ranges = json.loads((bundle / "laya_edge.json").read_text())["graph"]["shape_ranges"]
    expected = tensorrt_options(0, True, Path("unused"), ranges)
    for key in ("trt_profile_min_shapes", "trt_profile_opt_shapes", "trt_profile_max_shapes"):
        assert accelerator.parameters[key] == expected[key]
    assert config.instance_group[0].kind == config.instance_group[0].KIND_GPU
    assert not plain.optimization.execution_accelerators.gpu_execution_accelerator


def test_a_bundle_without_fp32_is_refused(repo, tmp_path):
    from laya_edge.export.triton_repository import write_triton_repo

    bundle, _ = repo
    manifest = json.loads((bundle / "laya_edge.json").read_text())
    copy = tmp_path / "shipped"
    copy.mkdir()
    manifest["variants"].pop("fp32")
    (copy / "laya_edge.json").write_text(json.dumps(manifest))
    with pytest.raises(ValueError, match="no fp32 graph"):
        write_triton_repo(copy, tmp_path / "repo")


class LoopbackTriton:
    """A stand-in for `tritonclient.http.InferenceServerClient` that serves the repository the
    way Triton would: it reads config.pbtxt, checks each request against it (batch size, types,
    batched dims), applies its reshapes and runs model.onnx with onnxruntime."""

    def __init__(self, root, model):
        import onnxruntime

        self.config = parse_config(root / model / "config.pbtxt")
        self.session = onnxruntime.InferenceSession(str(root / model / "1" / "model.onnx"),
                                                    providers=["CPUExecutionProvider"])
        self.batches = []

    def get_model_config(self, name):
        return {"name": name, "max_batch_size": self.config.max_batch_size}

    def infer(self, name, inputs, outputs=None):
        from tritonclient.grpc import model_config_pb2
        from tritonclient.utils import triton_to_np_dtype

        declared = {t.name: t for t in self.config.input}
        feeds = {}
        for tensor in inputs:
            spec = declared[tensor.name()]
            shape = tensor.shape()
            assert tensor.datatype() == model_config_pb2.DataType.Name(spec.data_type)[5:]
            assert shape[0] <= self.config.max_batch_size
            assert len(shape[1:]) == len(spec.dims)
            assert all(d == -1 or d == s for d, s in zip(spec.dims, shape[1:]))
            raw = tensor._get_binary_data()  # what the HTTP client would put on the wire
            array = np.frombuffer(raw, dtype=triton_to_np_dtype(tensor.datatype())).reshape(shape)
            if spec.HasField("reshape"):
                array = array.reshape([shape[0]] + list(spec.reshape.shape))
            feeds[tensor.name()] = array
        self.batches.append(len(feeds["qtype"]))
        names = [o.name() for o in outputs]
        results = dict(zip(names, self.session.run(names, feeds)))
        return type("Result", (), {"as_numpy": staticmethod(results.__getitem__)})


def test_triton_agent_answers_as_the_onnx_agent(repo):
    from laya_edge.serving.triton import TritonAgent

    bundle, root = repo
    server = LoopbackTriton(root, "laya")
    agent = TritonAgent(str(bundle), model_name="laya", client=server)
    local = laya_edge.ONNXAgent(str(bundle), device="cpu", precision="fp32")
    assert agent.predict_batch(STATES, QUESTIONS) == local.predict_batch(STATES, QUESTIONS)
    assert agent.system_one(STATES[0], QUESTIONS) == local.system_one(STATES[0], QUESTIONS)
    assert agent.runtime_info()["providers"] == ["Triton:laya"]
    assert server.batches and max(server.batches) <= server.config.max_batch_size


def test_oversized_batches_are_sliced_to_max_batch_size(repo):
    from laya_edge.serving.triton import TritonAgent

    bundle, root = repo
    server = LoopbackTriton(root, "laya")
    server.config.max_batch_size = 4
    agent = TritonAgent(str(bundle), model_name="laya", client=server)
    local = laya_edge.ONNXAgent(str(bundle), device="cpu", precision="fp32")
    assert agent.predict_batch(STATES, QUESTIONS) == local.predict_batch(STATES, QUESTIONS)
    assert max(server.batches) == 4 and len(server.batches) > 1
