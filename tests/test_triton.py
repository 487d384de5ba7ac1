"""`--triton-repo`: the repositories are valid Triton configuration that matches the bundle, and a
real Triton server (the nvidia-pytriton wheel's `tritonserver`) answers through them exactly as
`ONNXAgent` does: the python flavour over HTTP and gRPC, the onnxruntime flavour through
`TritonAgent` (its graph run by tests/triton_onnx_standin.py, the server has no ONNX Runtime
backend)."""
import concurrent.futures
import hashlib
import json
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import laya_edge
from triton_server import TritonServer, backend_python

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

ONNX_TO_TRITON = {7: "TYPE_INT64", 9: "TYPE_BOOL", 1: "TYPE_FP32", 10: "TYPE_FP16"}
QUESTIONS = {"refund": {"type": "noul", "instructions": "Is a refund requested?"},
             "dept": {"type": "choice", "instructions": "Which team?",
                      "criteria": {"billing": "money", "technical": "bugs", "sales": None}},
             "urgency": {"type": "score", "instructions": "How urgent?",
                         "criteria": ["low", "high", "critical"]}}
OTHER_QUESTIONS = {"angry": {"type": "noul", "instructions": "Is the customer angry?"}}
STATES = ["I was charged twice, refund one.", "The app crashes at start.",
          "Quote for 20 seats?"] * 3
TEXT_MODEL = "laya"
# the onnxruntime flavour's fp32 model served on the stand-in backend, and a copy batching 4
GRAPH_MODEL, SMALL_MODEL = "laya-graph", "laya-graph-small"


@pytest.fixture(scope="module")
def exported(checkpoints, tmp_path_factory):
    """A bundle (fp32 + fp16) exported by the command line with a python-flavour repository,
    and its onnxruntime-flavour repository written from the bundle."""
    from laya_edge.export.triton_repository import write_triton_repo

    root = tmp_path_factory.mktemp("triton")
    done = subprocess.run([sys.executable, "-m", "laya_edge.export",
                           str(checkpoints["modernbert-tiny"]), "--out", str(root / "bundle"),
                           "--exporter", "torchscript", "--precision", "fp16",
                           "--triton-repo", str(root / "text"),
                           "--triton-flavour", "python", "--quiet"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    cache = root / "engines" / "trt"
    written = write_triton_repo(root / "bundle", root / "graph", engine_cache=cache)
    return {"bundle": root / "bundle", "text": root / "text", "graph": root / "graph",
            "cache": cache, "written": written, "root": root}


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


# -- the repositories ----------------------------------------------------------------------------

def test_every_shipped_precision_gets_its_model(exported):
    manifest = json.loads((exported["bundle"] / "laya_edge.json").read_text())
    assert sorted(manifest["variants"]) == ["fp16", "fp32"]
    assert sorted(exported["written"]) == ["laya", "laya-fp16", "laya-tensorrt"]
    for model, variant in (("laya", "fp32"), ("laya-fp16", "fp16"), ("laya-tensorrt", "fp32")):
        graph = exported["graph"] / model / "1" / "model.onnx"
        listed = manifest["variants"][variant]["files"][0]
        assert (hashlib.sha256(graph.read_bytes()).hexdigest()
                == manifest["files"][listed]["sha256"]), model
    kinds = {model: [group.kind for group in parse_config(
        exported["graph"] / model / "config.pbtxt").instance_group] for model in exported["written"]}
    gpu = 1  # ModelInstanceGroup.KIND_GPU
    assert kinds == {"laya": [], "laya-fp16": [gpu], "laya-tensorrt": [gpu]}


@pytest.mark.parametrize("model", ["laya", "laya-fp16", "laya-tensorrt"])
def test_config_matches_the_graph(exported, model):
    from tritonclient.grpc import model_config_pb2

    config = parse_config(exported["graph"] / model / "config.pbtxt")
    manifest = json.loads((exported["bundle"] / "laya_edge.json").read_text())
    assert config.name == model and config.platform == "onnxruntime_onnx"
    assert config.max_batch_size == manifest["graph"]["shape_ranges"]["batch"]["max"]
    assert list(config.dynamic_batching.preferred_batch_size)
    assert max(config.dynamic_batching.preferred_batch_size) <= config.max_batch_size
    inputs, outputs = graph_tensors(exported["graph"] / model / "1" / "model.onnx")
    for declared, actual in ((config.input, inputs), (config.output, outputs)):
        assert [t.name for t in declared] == list(actual)
        for tensor in declared:
            data_type, dims = actual[tensor.name]
            if declared is config.input or data_type != "TYPE_FP16":
                assert model_config_pb2.DataType.Name(tensor.data_type) == data_type
            assert dims[0] == -1  # the graph's batch axis is Triton's batching axis
            batched = list(tensor.reshape.shape) if tensor.HasField("reshape") else list(
                tensor.dims)
            assert batched == dims[1:], tensor.name


def test_tensorrt_model_carries_the_agents_tensorrt_profiles(exported):
    from laya_edge.session import tensorrt_options

    config = parse_config(exported["graph"] / "laya-tensorrt" / "config.pbtxt")
    plain = parse_config(exported["graph"] / "laya" / "config.pbtxt")
    accelerator, = config.optimization.execution_accelerators.gpu_execution_accelerator
    assert accelerator.name == "tensorrt"
    assert accelerator.parameters["precision_mode"] == "FP16"
    ranges = json.loads((exported["bundle"] / "laya_edge.json").read_text())["graph"][
        "shape_ranges"]
    expected = tensorrt_options(0, True, exported["cache"], ranges)
    for key in ("trt_profile_min_shapes", "trt_profile_opt_shapes", "trt_profile_max_shapes",
                "trt_engine_cache_path", "trt_timing_cache_path"):
        assert accelerator.parameters[key] == expected[key], key
    assert exported["cache"].is_dir()  # the engine cache path is a real directory
    assert not plain.optimization.execution_accelerators.gpu_execution_accelerator


def test_without_an_engine_cache_no_cache_path_is_named(exported, tmp_path):
    from laya_edge.export.triton_repository import write_triton_repo

    write_triton_repo(exported["bundle"], tmp_path / "repo")
    config = parse_config(tmp_path / "repo" / "laya-tensorrt" / "config.pbtxt")
    accelerator, = config.optimization.execution_accelerators.gpu_execution_accelerator
    assert not any(key.startswith(("trt_engine_cache", "trt_timing_cache"))
                   for key in accelerator.parameters)


def test_an_int8_variant_gets_a_cpu_model(exported, tmp_path):
    """The int8 graph (its bytes here: the fp32 graph's, listed as the manifest lists an int8
    variant) is served on CPU instances, beside the others."""
    from laya_edge.export.triton_repository import write_triton_repo

    copy = tmp_path / "with-int8"
    shutil.copytree(exported["bundle"], copy)
    manifest = json.loads((copy / "laya_edge.json").read_text())
    graph, *sidecars = manifest["variants"]["fp32"]["files"]
    shutil.copyfile(copy / graph, copy / "laya.int8.onnx")
    manifest["variants"]["int8"] = dict(manifest["variants"]["fp32"],
                                        files=["laya.int8.onnx", *sidecars])
    (copy / "laya_edge.json").write_text(json.dumps(manifest))
    written = write_triton_repo(copy, tmp_path / "repo")
    assert sorted(written) == ["laya", "laya-fp16", "laya-int8", "laya-tensorrt"]
    config = parse_config(tmp_path / "repo" / "laya-int8" / "config.pbtxt")
    assert [group.kind for group in config.instance_group] == [2]  # KIND_CPU
    assert not config.optimization.execution_accelerators.gpu_execution_accelerator
    assert ((tmp_path / "repo" / "laya-int8" / "1" / "model.onnx").read_bytes()
            == (copy / "laya.int8.onnx").read_bytes())


def test_a_bundle_shipped_without_fp32_gets_no_tensorrt_model(exported, tmp_path):
    from laya_edge.export.triton_repository import write_triton_repo

    copy = tmp_path / "shipped"
    shutil.copytree(exported["bundle"], copy)
    manifest = json.loads((copy / "laya_edge.json").read_text())
    for name in manifest["variants"]["fp32"]["files"]:
        (copy / name).unlink()
    assert sorted(write_triton_repo(copy, tmp_path / "repo")) == ["laya-fp16"]


def test_python_flavour_carries_the_bundle(exported):
    config = parse_config(exported["text"] / TEXT_MODEL / "config.pbtxt")
    assert config.backend == "python" and config.max_batch_size > 1
    assert config.HasField("dynamic_batching")
    version = exported["text"] / TEXT_MODEL / "1"
    assert "laya_edge.serving.triton_backend" in (version / "model.py").read_text()
    shipped = json.loads((version / "bundle" / "laya_edge.json").read_text())
    assert shipped == json.loads((exported["bundle"] / "laya_edge.json").read_text())


@pytest.mark.parametrize("extra, message", [
    (["--triton-engine-cache", "relative/dir", "--triton-repo", "r"], "absolute path"),
    (["--triton-engine-cache", "/abs/dir"], "applies to --triton-repo"),
    (["--triton-engine-cache", "/abs/dir", "--triton-repo", "r", "--triton-flavour", "python"],
     "applies to --triton-repo"),
    (["--triton-repo", "r", "--triton-flavour", "tensorflow"], "invalid choice"),
])
def test_bad_triton_options_are_refused_before_exporting(tmp_path, extra, message):
    done = subprocess.run([sys.executable, "-m", "laya_edge.export", str(tmp_path / "nothing"),
                           "--out", str(tmp_path / "out"), *extra],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and message in done.stderr
    assert not (tmp_path / "out").exists()


# -- a real server -------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def server(exported):
    """tritonserver over the python-flavour repository and the onnxruntime flavour's fp32
    model (and a copy with max_batch_size 4), on the stand-in backend."""
    from laya_edge.export.triton_repository import model_config

    standin = exported["root"] / "standin"
    manifest = json.loads((exported["bundle"] / "laya_edge.json").read_text())
    ranges = manifest["graph"]["shape_ranges"]
    small = dict(ranges, batch={"min": 1, "opt": 2, "max": 4})
    n_act = graph_tensors(exported["graph"] / "laya" / "1" / "model.onnx")[1]["act_logits"][1][1]
    for model, shape_ranges in ((GRAPH_MODEL, ranges), (SMALL_MODEL, small)):
        shutil.copytree(exported["graph"] / "laya" / "1", standin / model / "1")
        shutil.copyfile(Path(__file__).parent / "triton_onnx_standin.py",
                        standin / model / "1" / "model.py")
        config = model_config(model, n_act, shape_ranges, tensorrt=False)
        assert 'platform: "onnxruntime_onnx"' in config
        (standin / model / "config.pbtxt").write_text(
            config.replace('platform: "onnxruntime_onnx"', 'backend: "python"'))
    running = TritonServer([exported["text"], standin], [TEXT_MODEL, GRAPH_MODEL, SMALL_MODEL],
                           exported["root"] / "server", backend_python())
    yield running
    running.stop()
    assert running.process.returncode is not None


@pytest.fixture(scope="module")
def local(exported):
    return laya_edge.ONNXAgent(str(exported["bundle"]), device="cpu", precision="fp32")


def assert_same_payload(got, want):
    """Equal payloads, probabilities within 1e-4."""
    if isinstance(want, dict):
        assert isinstance(got, dict) and sorted(got) == sorted(want)
        for key in want:
            assert_same_payload(got[key], want[key])
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want)
        for g, w in zip(got, want):
            assert_same_payload(g, w)
    elif isinstance(want, float):
        assert got == pytest.approx(want, abs=1e-4)
    else:
        assert got == want


def statistics(server, model):
    import tritonclient.http as triton_http

    stats, = triton_http.InferenceServerClient(server.http_url).get_inference_statistics(
        model)["model_stats"]
    return {"requests": int(stats["inference_stats"]["success"]["count"]),
            "failures": int(stats["inference_stats"]["fail"]["count"]),
            "executions": int(stats["execution_count"])}


def statistics_after(server, model, before, requests, seconds=10.0):
    """The model's statistics once `requests` more have been counted since `before`, or as
    they stand after `seconds`: Triton counts a request when the backend releases it, which
    can come after the client has its response (seen once in CI: a delta of 0 right after an
    answered request)."""
    deadline = time.monotonic() + seconds
    while True:
        after = statistics(server, model)
        if after["requests"] - before["requests"] >= requests or time.monotonic() > deadline:
            return after
        time.sleep(0.05)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_python_flavour_answers_as_the_onnx_agent(server, local, protocol):
    from laya_edge.serving.triton import TritonTextClient

    url = server.http_url if protocol == "http" else server.grpc_url
    client = TritonTextClient(url, TEXT_MODEL, protocol=protocol)
    assert_same_payload(client.predict(STATES[0], QUESTIONS), local.system_one(STATES[0],
                                                                               QUESTIONS))
    bodies = [{"state": state, "questions": QUESTIONS, "max_len": 64} for state in STATES]
    assert_same_payload(client.predict_batch(bodies),
                        local.predict_batch(STATES, QUESTIONS, max_len=64))


def test_concurrent_requests_are_batched_by_triton_and_answered_right(server, local):
    from laya_edge.serving.triton import TritonTextClient

    before = statistics(server, TEXT_MODEL)
    work = [(state, QUESTIONS if i % 3 else OTHER_QUESTIONS) for i, state in
            enumerate(STATES * 4)]
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        answers = list(pool.map(lambda item: TritonTextClient(
            server.grpc_url, TEXT_MODEL, protocol="grpc").predict(*item), work))
    for (state, questions), answer in zip(work, answers):
        assert_same_payload(answer, local.system_one(state, questions))
    after = statistics_after(server, TEXT_MODEL, before, len(work))
    requests = after["requests"] - before["requests"]
    assert requests == len(work)
    assert after["executions"] - before["executions"] < requests  # Triton merged requests


def test_a_reload_while_requests_run_loses_none(server, local):
    import tritonclient.http as triton_http
    from laya_edge.serving.triton import TritonTextClient

    want = local.system_one(STATES[1], QUESTIONS)
    stop, outcomes = threading.Event(), []

    def keep_asking():
        client = TritonTextClient(server.http_url, TEXT_MODEL)
        while not stop.is_set():
            try:
                outcomes.append(client.predict(STATES[1], QUESTIONS))
            except Exception as exc:  # every outcome is checked below
                outcomes.append(exc)

    threads = [threading.Thread(target=keep_asking) for _ in range(4)]
    for thread in threads:
        thread.start()
    admin = triton_http.InferenceServerClient(server.http_url)
    while len(outcomes) < 8:
        stop.wait(0.05)
    admin.load_model(TEXT_MODEL)  # explicit model control: loads a fresh copy, then swaps
    during = len(outcomes)
    while len(outcomes) < during + 8:
        stop.wait(0.05)
    stop.set()
    for thread in threads:
        thread.join(timeout=60)
    assert admin.is_model_ready(TEXT_MODEL)
    assert server.log.read_text().count(f"successfully loaded '{TEXT_MODEL}'") >= 2
    assert not [o for o in outcomes if isinstance(o, Exception)]
    for outcome in outcomes:
        assert_same_payload(outcome, want)


def raw_request(server, array, datatype="BYTES", name="request"):
    import tritonclient.http as triton_http

    tensor = triton_http.InferInput(name, list(array.shape), datatype)
    tensor.set_data_from_numpy(array)
    return triton_http.InferenceServerClient(server.http_url).infer(TEXT_MODEL, [tensor])


@pytest.mark.parametrize("body, message", [
    (b"not json", "row 0 is not one UTF-8 JSON document"),
    (b"\xff\xfe", "row 0 is not one UTF-8 JSON document"),
    (b"[1, 2]", "must be a JSON object"),
    (json.dumps({"state": "x"}).encode(), "field 'questions' is required"),
    (json.dumps({"state": "x", "questions": QUESTIONS, "colour": 1}).encode(), "colour"),
    (json.dumps({"state": "x", "questions": QUESTIONS, "model": "m"}).encode(), "serves one bundle"),
    (json.dumps({"state": "x", "questions": QUESTIONS, "max_len": "long"}).encode(), "max_len"),
    (json.dumps({"state": "x", "questions": {"q": {"type": "bogus"}}}).encode(), "bogus"),
])
def test_bad_requests_get_tritons_errors_naming_the_problem(server, body, message):
    from tritonclient.utils import InferenceServerException

    with pytest.raises(InferenceServerException, match=message):
        raw_request(server, np.array([[body]], dtype=object))


@pytest.mark.parametrize("array, datatype, name, message", [
    (np.zeros((1, 1), dtype=np.int64), "INT64", "request", "data-type is .INT64."),
    (np.array([[b"{}"]], dtype=object), "BYTES", "prompt", "prompt"),
])
def test_requests_off_the_config_are_refused_by_triton(server, array, datatype, name, message):
    from tritonclient.utils import InferenceServerException

    with pytest.raises(InferenceServerException, match=message):
        raw_request(server, array, datatype, name)


def test_a_bad_request_batched_with_good_ones_fails_alone(server, local):
    from laya_edge.serving.triton import TritonTextClient

    good = {"state": STATES[0], "questions": QUESTIONS}
    bad = {"state": STATES[0], "questions": QUESTIONS, "max_len": -3}

    def ask(body):
        try:
            return TritonTextClient(server.grpc_url, TEXT_MODEL, "grpc").predict_batch([body])[0]
        except Exception as exc:  # checked below
            return exc
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        outcomes = list(pool.map(ask, [good, bad] * 4))
    want = local.system_one(STATES[0], QUESTIONS)
    for body, outcome in zip([good, bad] * 4, outcomes):
        if body is good:
            assert_same_payload(outcome, want)
        else:
            assert isinstance(outcome, Exception) and "max_len" in str(outcome)
    assert raw_request(server, np.array([[json.dumps(good).encode()]], dtype=object))
    with pytest.raises(Exception, match=r"row 1: TypeError: max_len"):
        TritonTextClient(server.http_url, TEXT_MODEL).predict_batch([good, dict(bad, max_len="9")])


def test_triton_agent_answers_as_the_onnx_agent_in_one_request(server, exported, local):
    from laya_edge.serving.triton import TritonAgent

    agent = TritonAgent(str(exported["bundle"]), url=server.http_url, model_name=GRAPH_MODEL)
    before = statistics(server, GRAPH_MODEL)
    # 27 rows of one length (so none are split for padding), far past the CPU's token cap
    long_states = [STATES[0] * 12] * len(STATES)
    everything = {"batch_size": len(long_states)}
    assert (agent.predict_batch(long_states, QUESTIONS, **everything)
            == local.predict_batch(long_states, QUESTIONS, **everything))
    assert statistics_after(server, GRAPH_MODEL, before, 1)["requests"] - before["requests"] == 1
    assert agent.system_one(STATES[0], QUESTIONS) == local.system_one(STATES[0], QUESTIONS)
    assert agent.runtime_info()["providers"] == [f"Triton:{GRAPH_MODEL}"]


def test_triton_agent_keeps_runs_within_the_models_max_batch_size(server, exported, local):
    from laya_edge.serving.triton import TritonAgent

    agent = TritonAgent(str(exported["bundle"]), url=server.http_url, model_name=SMALL_MODEL)
    before = statistics(server, SMALL_MODEL)
    everything = {"batch_size": len(STATES)}
    assert (agent.predict_batch(STATES, QUESTIONS, **everything)
            == local.predict_batch(STATES, QUESTIONS, **everything))
    rows = len(STATES) * len(QUESTIONS)
    after = statistics_after(server, SMALL_MODEL, before, -(-rows // 4))
    assert after["requests"] - before["requests"] == -(-rows // 4)
    assert after["failures"] == before["failures"]


def test_a_stub_that_corrupts_arrays_is_refused_at_load(exported, tmp_path):
    """The wheel's stub was built for numpy 1: under this environment's numpy 2 it would hand
    the model corrupted arrays, so the model refuses to load, saying what to do."""
    assert int(np.__version__.split(".")[0]) >= 2, "this check needs a numpy 2 environment"
    started = []
    try:
        with pytest.raises(RuntimeError, match=r"numpy<2") as failed:
            started.append(TritonServer([exported["text"]], [TEXT_MODEL], tmp_path,
                                        Path(sys.prefix)))
    finally:
        for server in started:
            server.stop()
    assert "corrupts numpy" in str(failed.value)
