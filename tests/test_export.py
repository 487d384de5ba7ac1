"""Issue 3: `python -m laya_edge.export` turns a Laya checkpoint into a verified ONNX bundle.

The bundles of the three small checkpoints come from the session fixtures in conftest.py
(default exporter, i.e. dynamo). Extra exports here use the TorchScript exporter, which takes
about a second on these models; refusals happen before the PyTorch model is built and cost
nothing.
"""
import datetime
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import warnings
from importlib import metadata
from pathlib import Path

import numpy as np
import pytest

os.environ["HF_HUB_OFFLINE"] = "1"          # nothing here may reach the network
os.environ["TRANSFORMERS_OFFLINE"] = "1"

import laya_edge  # noqa: E402
from laya_edge import bundle_format as fmt  # noqa: E402
from laya_edge.export import ExportOptions, Progress, VerificationError, export_bundle  # noqa: E402
from laya_edge.export import __main__ as cli  # noqa: E402
from laya_edge.export import checkpoint as ckpt  # noqa: E402
from laya_edge.export import candidates, graph_limits, pipeline, verify  # noqa: E402
from laya_edge.export.graph import DEFAULT_OPSET  # noqa: E402
from laya_edge.export.probes import probe_cases  # noqa: E402
from laya_edge.export.reference import Reference  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
KINDS = ("modernbert-tiny", "unigram-tiny", "minilm")
STAGES = ("download", "build", "export", "optimise", "verify", "fuse", "write")
PROG = "python -m laya_edge.export"
CONTRACT_INPUTS = [("input_ids", "int64", ["batch", "sequence"]),
                   ("attention_mask", "int64", ["batch", "sequence"]),
                   ("marker_pos", "int64", ["batch", "markers"]),
                   ("marker_mask", "bool", ["batch", "markers"]),
                   ("qtype", "int64", ["batch"])]
ORT_TYPES = {"int64": "tensor(int64)", "bool": "tensor(bool)", "float32": "tensor(float)"}
HUB_PATTERNS = ["rl_agent_config.json", "model.safetensors", "tokenizer/*", "encoder/*"]
COMMIT = "0123456789abcdef0123456789abcdef01234567"
# upstream rounds probabilities to 4 decimals: equal to 1e-4 up to one step of rounding
ROUNDED_TOL = 1e-4 + 1e-9

# Fresh inputs, deliberately unlike the probe set (probes.WORDS / TOPICS): other vocabulary,
# other question ids, batch sizes and option counts the trace never saw.
LONG_WORDS = ("harbour lantern orchard velvet compass meadow glacier thunder pepper violin "
              "marble canyon ribbon whistle saddle beacon quartz tundra ferry cobalt").split()
LONG_STATE = " ".join(LONG_WORDS[(i * 7) % len(LONG_WORDS)] + ("." if i % 11 == 10 else "")
                      for i in range(260))
FRESH_STATES = [
    "Hello, my parcel never arrived and nobody answers the phone.",
    LONG_STATE,
    {"customer": "Ada", "history": ["late", "late again"], "balance": -3.25, "vip": True},
    [{"role": "user", "content": "The app logs me out every five minutes."},
     {"role": "agent", "content": "Have you tried reinstalling it?"},
     {"role": "user", "content": "Twice. Still happens on the tablet."}],
]
FRESH_QUESTIONS = {
    "route": {"type": "choice", "instructions": "Where should this go?",
              "criteria": {"logistics": "lost or late parcels", "finance": "money matters",
                           "it": "broken software"}},
    "mood": {"type": "score", "instructions": "How upset is the writer?",
             "criteria": ["calm", "annoyed", "furious", "livid"]},
    "callback": {"type": "noul", "instructions": "Does the writer want a call back?"},
}
SINGLE_OPTION = {"solo": {"type": "choice", "instructions": "The only queue available",
                          "criteria": ["general"]}}
WIDE = {"queue": {"type": "choice", "instructions": "Pick a queue",
                  "criteria": [f"queue_{i}" for i in range(12)]}}


# --------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------

def sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def tree(root: Path) -> dict:
    """{relative path: sha256} of every file below root: a directory's full content."""
    return {p.relative_to(root).as_posix(): sha256(p)
            for p in sorted(Path(root).rglob("*")) if p.is_file()}


def read_manifest(bundle: Path) -> dict:
    return json.loads((bundle / fmt.MANIFEST).read_text(encoding="utf-8"))


def leftovers(out: Path) -> list:
    """Temporary build or retired directories the pipeline may have left beside `out`."""
    return sorted(p.name for p in out.parent.iterdir() if p.name.startswith(f".{out.name}."))


def config_of(directory: Path) -> dict:
    return json.loads((directory / fmt.CONFIG).read_text(encoding="utf-8"))


def local_window(checkpoint: Path) -> int:
    encoder = json.loads((checkpoint / "encoder" / "config.json").read_text(encoding="utf-8"))
    return int(encoder.get("local_attention", 128))


def torchscript_export(source, out, **options):
    return export_bundle(ExportOptions(source=str(source), out=Path(out), exporter="torchscript",
                                       **options), Progress(quiet=True))


def stderr_lines(text: str) -> list:
    return [line for line in text.splitlines() if line.strip()]


def scorer_weight_name(model) -> str:
    """The initializer holding the scorer's last Linear weight (d -> 1), whatever the exporter
    named it: the MatMul/Gemm feeding the node that adds `scorer.3.bias`."""
    inits = {init.name for init in model.graph.initializer}
    producers = {output: node for node in model.graph.node for output in node.output}
    node = next(n for n in model.graph.node if any(x.endswith("scorer.3.bias") for x in n.input))
    if node.op_type == "Add":
        other = next(x for x in node.input if not x.endswith("scorer.3.bias"))
        node = producers[other]
    assert node.op_type in ("MatMul", "Gemm"), node
    return next(x for x in node.input if x in inits and not x.endswith("bias"))


def perturbed_copy(graph: Path, directory: Path, factor: float) -> Path:
    """A copy of `graph` with the scorer's output weights multiplied by `factor`."""
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(graph))
    name = scorer_weight_name(model)
    for init in model.graph.initializer:
        if init.name == name:
            weights = numpy_helper.to_array(init)
            assert 1 in weights.shape and weights.size > 1, (name, weights.shape)
            init.CopyFrom(numpy_helper.from_array(weights * np.float32(factor), name))
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / fmt.GRAPH
    onnx.save_model(model, str(target))
    return target


def ort_session(graph: Path):
    import onnxruntime as ort

    return ort.InferenceSession(str(graph), providers=["CPUExecutionProvider"])


def run_graph(session, batch):
    return session.run(list(fmt.GRAPH_OUTPUTS), {name: batch[name] for name in fmt.GRAPH_INPUTS})


def assert_graph_matches_reference(session, reference, states, questions):
    """Encode, collate and run `states` x `questions` through torch and onnxruntime."""
    rows = reference.encode(states, questions)
    batch = reference.collate(rows)
    want_logits, want_act = reference.forward(batch)
    got_logits, got_act = run_graph(session, batch)
    mask = batch["marker_mask"]
    assert got_logits.shape == want_logits.shape == mask.shape
    assert got_logits.dtype == np.float32 and got_act.dtype == np.float32
    assert float(np.abs(got_logits - want_logits)[mask].max()) <= 1e-4
    # padded marker slots are masked to -1e4 in both
    assert np.all(got_logits[~mask] == pytest.approx(-1e4))
    assert np.all(want_logits[~mask] == pytest.approx(-1e4))
    np.testing.assert_allclose(got_act, want_act, rtol=1e-4, atol=1e-3)
    return rows, batch


@pytest.fixture(scope="module")
def references(checkpoints):
    """The PyTorch reference (upstream laya.Agent) per kind, built on first use."""
    cache = {}

    def get(kind):
        if kind not in cache:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                cache[kind] = Reference(checkpoints[kind])
        return cache[kind]

    return get


@pytest.fixture(scope="module")
def probe_runs(references, checkpoints):
    """The generated probe set of modernbert-tiny, run through its PyTorch reference."""
    cases = probe_cases(int(config_of(checkpoints["modernbert-tiny"]).get("max_len", 512)))
    return verify.run_reference(references("modernbert-tiny"), cases)


@pytest.fixture
def tiny_copy(checkpoints, tmp_path):
    """A private copy of the modernbert-tiny checkpoint, free to be damaged."""
    target = tmp_path / "ckpt"
    shutil.copytree(checkpoints["modernbert-tiny"], target)
    return target


@pytest.fixture
def hub(monkeypatch, tmp_path):
    """A fake huggingface_hub.snapshot_download serving a local snapshot folder; returns
    (snapshot directory, list of recorded calls)."""
    import huggingface_hub

    snapshot = tmp_path / "hub" / "snapshots" / COMMIT
    snapshot.mkdir(parents=True)
    calls = []

    def snapshot_download(repo_id, **kwargs):
        calls.append((repo_id, kwargs))
        return str(snapshot)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    return snapshot, calls


# --------------------------------------------------------------------------------------------
# the bundle of every kind: layout and manifest
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", KINDS)
def test_bundle_layout_is_self_contained(bundles, checkpoints, kind):
    bundle, source = bundles[kind], checkpoints[kind]
    assert sorted(p.name for p in bundle.iterdir()) == sorted(
        [fmt.CONFIG, fmt.TOKENIZER_DIR, fmt.GRAPH, fmt.sidecar(fmt.GRAPH), fmt.MANIFEST])
    assert (bundle / fmt.CONFIG).read_bytes() == (source / fmt.CONFIG).read_bytes()
    expected = sorted(name for name in fmt.TOKENIZER_FILES
                      if (source / fmt.TOKENIZER_DIR / name).is_file())
    assert {"tokenizer.json", "tokenizer_config.json"} <= set(expected)
    assert sorted(p.name for p in (bundle / fmt.TOKENIZER_DIR).iterdir()) == expected
    for name in expected:
        copied, original = (bundle / fmt.TOKENIZER_DIR / name), (source / fmt.TOKENIZER_DIR / name)
        if name == "tokenizer.json":  # the same tokenizer, written without indentation
            assert json.loads(copied.read_text("utf-8")) == json.loads(original.read_text("utf-8"))
            assert "\n" not in copied.read_text("utf-8")
        else:
            assert copied.read_bytes() == original.read_bytes(), name
    assert not (bundle / ckpt.WEIGHTS).exists() and not (bundle / ckpt.ENCODER_DIR).exists()


@pytest.mark.parametrize("kind", KINDS)
def test_the_graph_carries_no_exporter_debug_metadata(bundles, kind):
    """The dynamo exporter's per-node stack traces and FX names are dropped from the bundle."""
    import onnx

    graph = onnx.load(str(bundles[kind] / fmt.GRAPH), load_external_data=False).graph
    assert read_manifest(bundles[kind])["graph"]["exporter"] == "dynamo"
    assert not [node.name for node in graph.node if node.metadata_props]


@pytest.mark.parametrize("kind", KINDS)
def test_manifest_source_and_special_tokens(bundles, checkpoints, references, kind):
    manifest = read_manifest(bundles[kind])
    source = checkpoints[kind]
    assert manifest["format"] == fmt.FORMAT == "laya-edge-bundle"
    assert manifest["format_version"] == fmt.FORMAT_VERSION == 1
    datetime.datetime.fromisoformat(manifest["created"])

    recorded = manifest["source"]
    assert recorded["path"] == str(source.resolve())
    assert recorded["subfolder"] is None and recorded["recipe"] is None
    assert "repo" not in recorded
    on_disk = {rel: {"sha256": sha256(source / rel), "bytes": (source / rel).stat().st_size}
               for rel in tree(source)}
    assert recorded["files"] == on_disk
    assert {fmt.CONFIG, ckpt.WEIGHTS, "tokenizer/tokenizer.json", "encoder/config.json"} <= set(
        on_disk)

    # special tokens as upstream's own tokenizer (transformers) sees them, ids as the
    # tokenizers library resolves them from the bundle's tokenizer.json
    from tokenizers import Tokenizer

    upstream = references(kind).agent.tok
    fast = Tokenizer.from_file(str(bundles[kind] / fmt.TOKENIZER_DIR / "tokenizer.json"))
    assert sorted(manifest["special_tokens"]) == ["cls", "mask", "pad", "sep"]
    for role, entry in manifest["special_tokens"].items():
        assert entry == {"text": getattr(upstream, f"{role}_token"),
                         "id": getattr(upstream, f"{role}_token_id")}, role
        assert fast.token_to_id(entry["text"]) == entry["id"], role
    mask = manifest["special_tokens"]["mask"]["text"]
    assert manifest["mask_token"] == upstream.mask_token == mask


@pytest.mark.parametrize("kind", KINDS)
def test_manifest_graph_contract_opset_and_versions(bundles, checkpoints, kind):
    import onnx

    bundle = bundles[kind]
    manifest = read_manifest(bundle)
    graph = manifest["graph"]
    config = config_of(checkpoints[kind])
    n_act = len(config.get("act_costs", {})) + 1

    assert [(i["name"], i["dtype"], i["shape"]) for i in graph["inputs"]] == [
        (name, dtype, list(shape)) for name, dtype, shape in CONTRACT_INPUTS]
    assert [(o["name"], o["dtype"], o["shape"]) for o in graph["outputs"]] == [
        ("logits", "float32", ["batch", "markers"]), ("act_logits", "float32", ["batch", n_act])]
    # ... and the manifest describes the graph that is really there
    session = ort_session(bundle / fmt.GRAPH)
    assert [(i.name, i.type, len(i.shape)) for i in session.get_inputs()] == [
        (name, ORT_TYPES[dtype], len(shape)) for name, dtype, shape in CONTRACT_INPUTS]
    assert [(o.name, o.type) for o in session.get_outputs()] == [
        ("logits", "tensor(float)"), ("act_logits", "tensor(float)")]

    ranges = graph["shape_ranges"]
    assert sorted(ranges) == ["batch", "markers", "sequence"]
    for axis, values in ranges.items():
        assert sorted(values) == ["max", "min", "opt"], axis
        assert 1 <= values["min"] <= values["opt"] <= values["max"], axis
    assert ranges["markers"]["min"] == fmt.MIN_MARKERS == 2
    encoder = json.loads((checkpoints[kind] / "encoder" / "config.json").read_text())
    assert ranges["sequence"]["max"] == min(int(config.get("max_len", 512)),
                                            int(encoder["max_position_embeddings"]))
    assert ranges["batch"] == graph_limits.DEFAULT_SHAPES["batch"]

    model = onnx.load(str(bundle / fmt.GRAPH), load_external_data=False)
    opsets = {entry.domain or "ai.onnx": entry.version for entry in model.opset_import}
    assert graph["opset"] == DEFAULT_OPSET == 18
    assert graph["opset_imports"] == opsets and opsets["ai.onnx"] == 18

    assert graph["exporter"] == "dynamo", graph.get("exporter_failures")
    assert "exporter_failures" not in graph and graph["exporter_reason"]
    assert graph["external_data"] is True and graph["parameter_bytes"] > 0
    assert graph["forward"] == "readout"
    versions = manifest["versions"]
    assert versions["laya_edge"] == laya_edge.__version__
    for package in ("torch", "onnx", "onnxscript", "onnxruntime", "laya", "transformers",
                    "tokenizers"):
        assert versions[package] == metadata.version(package), package
    assert versions["laya"] == "0.4.15"


@pytest.mark.parametrize("kind", KINDS)
def test_manifest_hashes_every_file_and_reports_verification(bundles, checkpoints, kind):
    bundle = bundles[kind]
    manifest = read_manifest(bundle)
    on_disk = [name for name in fmt.files_under(bundle) if name != fmt.MANIFEST]
    assert sorted(manifest["files"]) == sorted(on_disk)
    for name, entry in manifest["files"].items():
        data = (bundle / name).read_bytes()
        expected = {"sha256": sha256(bundle / name), "bytes": len(data)}
        if len(data) > fmt.BLOCK_BYTES:  # checked block by block, on every core, at load
            expected.update(block_bytes=fmt.BLOCK_BYTES, blocks=[
                hashlib.sha256(data[i:i + fmt.BLOCK_BYTES]).hexdigest()
                for i in range(0, len(data), fmt.BLOCK_BYTES)])
        assert entry == expected, name
    if kind == "minilm":
        assert len(manifest["files"][fmt.sidecar(fmt.GRAPH)]["blocks"]) > 1

    assert sorted(manifest["variants"]) == ["fp32"]
    fp32 = manifest["variants"]["fp32"]
    assert fp32["precision"] == "fp32" and fp32["files"] == [fmt.GRAPH, fmt.sidecar(fmt.GRAPH)]
    assert pipeline.READOUT in fp32["optimisations"]
    fusions = [line for line in fp32["optimisations"] if line.startswith("onnxscript ORT")]
    import onnx

    ops = {node.op_type for node in onnx.load(str(bundle / fmt.GRAPH),
                                              load_external_data=False).graph.node}
    if kind == "minilm":  # a BERT encoder: its attention is fused, and the fused graph verified
        assert len(fusions) == 1 and "attention x6" in fusions[0]
        # residual+LayerNorm is split again for onnxruntime's faster CPU kernels
        split = re.search(r"skip_layer_normalization_split x(\d+)", fusions[0])
        assert split and int(split.group(1)) > 0
        assert "SkipLayerNormalization" not in ops and "LayerNormalization" in ops
        assert manifest["graph"]["opset_imports"].get("com.microsoft") == 1
    if kind == "modernbert-tiny":  # rotary embedding and gated projections rewritten for ORT
        assert len(fusions) == 1 and re.search(r"rotary_embedding_ort x\d", fusions[0])
        assert re.search(r"glu_matmul_split x\d", fusions[0])
        assert "RotaryEmbedding" in ops and "Split" not in ops
    report = fp32["verification"]
    assert report["skipped"] is False and report["passed"] is True
    assert report["argmax_agreement"] == 1.0 and report["disagreements"] == []
    assert 0.0 <= report["max_abs_p"] <= 1e-4
    assert report["p99_abs_p"] <= report["max_abs_p"]
    assert report["max_abs_logits"] <= 1e-3 and report["max_abs_act_logits"] <= 1e-2
    assert report["thresholds"] == {"argmax_agreement": 1.0, "max_abs_p": 1e-4}
    assert report["provider"] == "CPUExecutionProvider"
    cases = probe_cases(int(config_of(checkpoints[kind]).get("max_len", 512)))
    assert report["cases"] == len(cases)
    assert report["rows"] == sum(len(c.states) * len(c.questions) for c in cases)
    assert report["worst"]["case"] in {c.name for c in cases}


# --------------------------------------------------------------------------------------------
# onnxruntime alone reproduces PyTorch, and upstream's ONNXAgent can load the bundle
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", KINDS)
def test_onnxruntime_reproduces_pytorch_logits_on_fresh_inputs(bundles, checkpoints, references,
                                                               kind):
    reference = references(kind)
    session = ort_session(bundles[kind] / fmt.GRAPH)

    rows, batch = assert_graph_matches_reference(session, reference, FRESH_STATES, FRESH_QUESTIONS)
    lengths = [len(row["ids"]) for row in rows]
    assert len(rows) == len(FRESH_STATES) * len(FRESH_QUESTIONS) == 12
    assert max(lengths) > local_window(checkpoints[kind])    # past the local-attention window
    assert min(lengths) < max(lengths) and not batch["attention_mask"].all()   # padded rows
    assert batch["marker_pos"].shape[1] == 4                  # widest question has 4 options

    # every row a single option: the marker axis is padded from 1 to 2
    rows, batch = assert_graph_matches_reference(session, reference, FRESH_STATES[:3],
                                                 SINGLE_OPTION)
    assert [len(row["markers"]) for row in rows] == [1, 1, 1]
    assert batch["marker_pos"].shape == (3, 2) and not batch["marker_mask"][:, 1].any()

    # one row, twelve options: batch 1, another marker width
    rows, batch = assert_graph_matches_reference(session, reference, FRESH_STATES[:1], WIDE)
    assert batch["marker_pos"].shape == (1, 12)


def assert_same_answers(want: dict, got: dict) -> None:
    assert list(got) == list(want)
    for qid, expected in want.items():
        answer = got[qid]
        assert answer["type"] == expected["type"], qid
        if "choice" in expected:
            assert answer["choice"] == expected["choice"], qid
        if "probabilities" in expected:
            assert list(answer["probabilities"]) == list(expected["probabilities"]), qid
            for label, p in expected["probabilities"].items():
                assert abs(answer["probabilities"][label] - p) <= ROUNDED_TOL, (qid, label)
        assert answer.get("legend") == expected.get("legend"), qid
        for key in ("score", "noul", "confidence", "answer_confidence"):
            assert (key in answer) == (key in expected), (qid, key)
            if key in expected:
                assert abs(answer[key] - expected[key]) <= ROUNDED_TOL, (qid, key)
        assert abs(answer["action"]["act_probability"]
                   - expected["action"]["act_probability"]) <= ROUNDED_TOL, qid


@pytest.mark.parametrize("kind", KINDS)
def test_upstream_onnx_agent_loads_the_bundle_and_answers_like_torch(bundles, checkpoints,
                                                                     tmp_path, kind):
    import laya
    from laya.onnx_agent import ONNXAgent

    # a moved copy: the bundle must not lean on anything outside itself
    moved = tmp_path / "moved-bundle"
    shutil.copytree(bundles[kind], moved)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)     # clamped temperatures
        torch_agent = laya.load(str(checkpoints[kind]), device="cpu")
        onnx_agent = ONNXAgent(str(moved), onnx_path=str(moved / fmt.GRAPH))
    questions = dict(FRESH_QUESTIONS, **SINGLE_OPTION, **WIDE)
    for state in FRESH_STATES:
        want = torch_agent.system_one(state, questions)
        got = onnx_agent.system_one(state, questions)
        assert got["model"] == "laya-rl-agent-onnx" and want["model"] == "laya-rl-agent"
        assert got["usage"] == want["usage"]
        assert_same_answers(want["answers"], got["answers"])


# --------------------------------------------------------------------------------------------
# verification is honest: a perturbed graph fails it
# --------------------------------------------------------------------------------------------

def test_unperturbed_graph_passes_verification(bundles, references, probe_runs):
    report = verify.verify_graph(bundles["modernbert-tiny"] / fmt.GRAPH, probe_runs,
                                 references("modernbert-tiny"))
    verify.require_pass(report, bundles["modernbert-tiny"] / fmt.GRAPH)
    assert report["passed"] is True and report["argmax_agreement"] == 1.0
    assert report["rows"] == sum(len(run.rows) for run in probe_runs)


def test_negated_scorer_fails_verification_on_argmax(bundles, references, probe_runs, tmp_path):
    bad = perturbed_copy(bundles["modernbert-tiny"] / fmt.GRAPH, tmp_path / "bad", -1.0)
    report = verify.verify_graph(bad, probe_runs, references("modernbert-tiny"))
    assert report["passed"] is False
    assert report["argmax_agreement"] < 1.0 and report["disagreements"]
    assert report["max_abs_p"] > 1e-4
    first = report["disagreements"][0]
    assert first["reference"] != first["graph"]
    with pytest.raises(VerificationError) as raised:
        verify.require_pass(report, bad)
    message = str(raised.value)
    assert "verification of laya.onnx (fp32) against the PyTorch model failed" in message
    assert f"argmax agreement {report['argmax_agreement']:.4f} < 1.0" in message
    assert (f"case {first['case']!r} question {first['question']!r}: torch chose option "
            f"{first['reference']}, the graph option {first['graph']}") in message
    assert "max |dp|" in message
    assert raised.value.report is report


class _Reference:
    @staticmethod
    def temperature(qtype, options):
        return 1.0


def _verify_fixed(monkeypatch, reference_logits, graph_logits, precision):
    """verify_graph on one probe case whose reference and graph logits are given, one row each."""
    import onnxruntime

    class FixedSession:
        def __init__(self, *args, **kwargs):
            pass

        def run(self, names, feeds):
            return np.array(graph_logits, np.float32), np.zeros((len(graph_logits), 2), np.float32)

    monkeypatch.setattr(onnxruntime, "InferenceSession", FixedSession)
    rows = [{"markers": [1, 2], "qtype": 0, "qid": f"q{i}", "qtype_name": "choice"}
            for i in range(len(reference_logits))]
    run = verify.ProbeRun(verify.ProbeCase("fixed", [], {}), rows,
                          {name: np.zeros(1) for name in fmt.GRAPH_INPUTS},
                          np.array(reference_logits, np.float32),
                          np.zeros((len(reference_logits), 2), np.float32))
    return verify.verify_graph(Path("fixed.onnx"), [run], _Reference(), precision)


def test_reduced_precision_may_swap_near_ties_but_no_clear_decision(monkeypatch):
    """Row q0 is decided by a wide margin, row q1 is a near tie (p 0.506 vs 0.494) that the
    graph swaps, moving each probability by 0.012, within int8's 0.05."""
    clear, tie, swapped = [2.0, 0.0], [0.025, 0.0], [0.0, 0.025]
    report = _verify_fixed(monkeypatch, [clear, tie], [clear, swapped], "int8")
    assert report["argmax_agreement"] == 0.5 and report["tie_margin"] == 0.1
    assert report["decisive_rows"] == 1 and report["decisive_agreement"] == 1.0
    assert report["passed"] is True and report["disagreements"][0]["question"] == "q1"
    # fp32 holds every row to the bar: the same swap fails it
    strict = _verify_fixed(monkeypatch, [clear, tie], [clear, swapped], "fp32")
    assert strict["decisive_rows"] == 2 and strict["passed"] is False
    # a swapped clear decision fails int8 and is the disagreement the message names first
    flipped = _verify_fixed(monkeypatch, [tie, clear], [swapped, [0.0, 2.0]], "int8")
    assert flipped["decisive_agreement"] == 0.0 and flipped["passed"] is False
    assert [d["question"] for d in flipped["disagreements"]] == ["q1", "q0"]
    with pytest.raises(VerificationError) as raised:
        verify.require_pass(flipped, Path("laya.int8.onnx"))
    assert ("argmax agreement 0.0000 where torch's top two options are more than 0.1 apart "
            "< 0.99 (first: case 'fixed' question 'q1'") in str(raised.value)


def test_rescaled_scorer_keeps_argmax_but_fails_on_probabilities(bundles, references, probe_runs,
                                                                 tmp_path):
    # logits = s * w.h + b with b shared by every option: argmax unchanged, softmax not
    bad = perturbed_copy(bundles["modernbert-tiny"] / fmt.GRAPH, tmp_path / "bad", 1.5)
    report = verify.verify_graph(bad, probe_runs, references("modernbert-tiny"))
    assert report["passed"] is False
    assert report["argmax_agreement"] == 1.0 and report["disagreements"] == []
    assert report["max_abs_p"] > 1e-4
    with pytest.raises(VerificationError) as raised:
        verify.require_pass(report, bad)
    message = str(raised.value)
    worst = report["worst"]
    assert f"max |dp| {report['max_abs_p']:.3g} > 0.0001" in message
    assert f"case {worst['case']!r} question {worst['question']!r}" in message
    assert "argmax agreement" not in message


def test_export_exits_3_and_writes_nothing_when_verification_fails(checkpoints, monkeypatch,
                                                                   tmp_path, capsys):
    real_verify = verify.verify_graph
    seen = []

    def verify_tampered_graph(graph, runs, reference, precision="fp32"):
        seen.append(graph)
        return real_verify(perturbed_copy(graph, tmp_path / "tampered", -1.0), runs, reference,
                           precision)

    monkeypatch.setattr(candidates, "verify_graph", verify_tampered_graph)
    out = tmp_path / "out" / "bundle"
    code = cli.main([str(checkpoints["modernbert-tiny"]), "--out", str(out),
                     "--exporter", "torchscript", "--quiet", "--json"])
    captured = capsys.readouterr()
    assert code == 3 and len(seen) == 1
    lines = stderr_lines(captured.err)
    assert len(lines) == 1
    assert lines[0].startswith(f"{PROG}: error: verification of laya.onnx (fp32) against the "
                               "PyTorch model failed: argmax agreement")
    summary = json.loads(captured.out)
    assert summary["ok"] is False and summary["verification"]["passed"] is False
    assert not out.exists() and leftovers(out) == []


# --------------------------------------------------------------------------------------------
# command line
# --------------------------------------------------------------------------------------------

def test_help_documents_every_option():
    done = subprocess.run([sys.executable, "-m", "laya_edge.export", "--help"], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stderr == ""
    text = done.stdout
    assert text.startswith(f"usage: {PROG}")
    parser = cli.build_parser()
    documented = 0
    for action in parser._actions:
        assert action.help, action.dest
        if action.option_strings:
            for option in action.option_strings:
                assert re.search(rf"(^|[\s,\[]){re.escape(option)}\b", text), option
        else:
            assert action.dest in text
        documented += 1
    assert documented >= 15     # every option of the issue is there
    for option in ("--out", "--subfolder", "--revision", "--token", "--recipe", "--force",
                   "--skip-verify", "--quiet", "--json", "--exporter"):
        assert option in text


@pytest.mark.parametrize("argv, reason", [
    (["ckpt", "--out", "OUT", "--bogus"], "unrecognized arguments: --bogus"),
    (["ckpt"], "--out is required unless --recipe is given"),
    (["ckpt", "--out", "OUT", "--exporter", "tflite"], "argument --exporter: invalid choice"),
    (["ckpt", "--out", "OUT", "--opset", "eighteen"], "argument --opset: invalid int value"),
    (["ckpt", "--out", "OUT", "--external-data", "--no-external-data"], "not allowed with"),
    (["--out", "OUT"], "SOURCE is required unless --recipe names a repo"),
])
def test_bad_arguments_exit_2_with_one_line(argv, reason, tmp_path, capsys):
    out = tmp_path / "bundle"
    argv = [str(out) if arg == "OUT" else arg for arg in argv]
    with pytest.raises(SystemExit) as raised:
        cli.main(argv)
    captured = capsys.readouterr()
    assert raised.value.code == 2
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{PROG}: error: ") and reason in lines[0]
    assert not out.exists() and leftovers(out) == []


def test_bad_arguments_in_a_real_process():
    done = subprocess.run([sys.executable, "-m", "laya_edge.export", "x", "--out", "y",
                           "--exporter", "tflite"], cwd=REPO, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 2 and done.stdout == ""
    assert len(done.stderr.splitlines()) == 1 and "invalid choice: 'tflite'" in done.stderr


@pytest.mark.parametrize("quiet", [True, False])
def test_missing_local_path_exits_1_with_one_line(tmp_path, capsys, quiet):
    missing, out = tmp_path / "no" / "such" / "checkpoint", tmp_path / "bundle"
    code = cli.main([str(missing), "--out", str(out), "--json"] + (["--quiet"] if quiet else []))
    captured = capsys.readouterr()
    assert code == 1
    expected = (f"{PROG}: error: FileNotFoundError: Local model path not found: "
                f"{str(missing)!r}.")
    errors = [line for line in stderr_lines(captured.err)
              if not line.startswith("[laya_edge.export]")]     # stage progress, unless quiet
    assert errors == [expected]
    if quiet:
        assert stderr_lines(captured.err) == [expected]
    assert json.loads(captured.out) == {"ok": False, "error": expected.split("error: ", 1)[1]}
    assert not out.exists() and leftovers(out) == []


def test_json_summary_is_the_only_stdout_and_stages_are_logged(checkpoints, tmp_path, capsys):
    out = tmp_path / "bundle"
    code = cli.main([str(checkpoints["modernbert-tiny"]), "--out", str(out),
                     "--exporter", "torchscript", "--json"])
    captured = capsys.readouterr()
    assert code == 0
    lines = captured.out.splitlines()
    assert len(lines) == 1
    summary = json.loads(lines[0])
    assert summary["ok"] is True and summary["out"] == str(out)
    assert summary["format_version"] == 1 and summary["exporter"] == "torchscript"
    assert summary["verification"]["passed"] is True
    assert summary["verification"] == read_manifest(out)["variants"]["fp32"]["verification"]
    assert list(summary["stages"]) == list(STAGES)
    assert sum("ORT fusions" in line for line in
               read_manifest(out)["variants"]["fp32"]["optimisations"]) == 1
    assert all(seconds >= 0 for seconds in summary["stages"].values())
    assert summary["bytes"] == sum(e["bytes"] for e in read_manifest(out)["files"].values())
    for stage in STAGES:      # progress: every stage with its duration, on stderr
        assert re.search(rf"^\[laya_edge\.export\] {stage}: done in \d+\.\d\ds$", captured.err,
                         re.M), stage


def test_quiet_json_run_prints_only_the_summary(checkpoints, tmp_path):
    """A real process with the default (dynamo) exporter: torch, onnxscript and transformers
    chatter must not reach stderr under --quiet, nor stdout under --json."""
    out = tmp_path / "bundle"
    done = subprocess.run([sys.executable, "-m", "laya_edge.export",
                           str(checkpoints["modernbert-tiny"]), "--out", str(out),
                           "--quiet", "--json"], cwd=REPO, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    lines = done.stdout.splitlines()
    assert len(lines) == 1
    summary = json.loads(lines[0])
    assert summary["ok"] is True and summary["exporter"] == "dynamo"
    assert summary["verification"]["passed"] is True
    assert read_manifest(out)["graph"]["exporter"] == "dynamo"


# --------------------------------------------------------------------------------------------
# clear refusals, before anything is built or written
# --------------------------------------------------------------------------------------------

def _edit_config(directory: Path, change) -> None:
    config = config_of(directory)
    change(config)
    (directory / fmt.CONFIG).write_text(json.dumps(config), encoding="utf-8")


def _add_adapter_weights(directory: Path) -> None:
    from safetensors.numpy import load_file, save_file

    tensors = load_file(str(directory / ckpt.WEIGHTS))
    tensors["encoder.layers.0.attn.adapter.down.weight"] = np.zeros((4, 64), dtype=np.float16)
    save_file(tensors, str(directory / ckpt.WEIGHTS))


REFUSALS = {
    "no-config": (lambda d: (d / fmt.CONFIG).unlink(), FileNotFoundError,
                  "Incompatible model: {label!r} does not contain 'rl_agent_config.json'."),
    "no-weights": (lambda d: (d / ckpt.WEIGHTS).unlink(), FileNotFoundError,
                   "Incompatible model: 'model.safetensors' not found in {label!r}."),
    "parallel-layout": (lambda d: _edit_config(d, lambda c: c.update(option_layout="parallel")),
                        ValueError, "option_layout='parallel' is not supported by the ONNX "
                                    "runtime; load this checkpoint with laya.Agent"),
    "adapter-config": (lambda d: _edit_config(d, lambda c: c.update(
        residual_adapters={"rank": 8, "layers": [0, 1]})), ValueError,
        "carries residual adapters (residual_adapters)"),
    "adapter-weights": (_add_adapter_weights, ValueError,
                        "carries residual adapters (encoder.layers.0.attn.adapter.down.weight)"),
    "no-tokenizer-json": (lambda d: (d / fmt.TOKENIZER_DIR / "tokenizer.json").unlink(),
                          FileNotFoundError, "has no 'tokenizer/tokenizer.json'"),
    "no-head-layers": (lambda d: _edit_config(d, lambda c: c.pop("head_layers")), ValueError,
                       "Incompatible model config for {label!r}: missing configuration keys "
                       "['head_layers']. Ensure this is a valid RL Agent decision model."),
}


@pytest.fixture
def no_reference(monkeypatch):
    """Fail the test if the PyTorch model gets built: refusals must come first."""
    def built(*args, **kwargs):
        raise AssertionError("the PyTorch reference was built before the refusal")

    monkeypatch.setattr(Reference, "__init__", built)


@pytest.mark.parametrize("problem", sorted(REFUSALS))
def test_unexportable_checkpoints_are_refused_before_anything_is_written(problem, tiny_copy,
                                                                        tmp_path, no_reference):
    damage, error, message = REFUSALS[problem]
    damage(tiny_copy)
    out = tmp_path / "bundle"
    label = str(tiny_copy)
    with pytest.raises(error) as raised:
        torchscript_export(tiny_copy, out)
    assert message.format(label=label) in str(raised.value)
    assert not out.exists() and leftovers(out) == []


def test_refusal_through_the_cli_exits_1_with_one_line(tiny_copy, tmp_path, capsys, no_reference):
    _edit_config(tiny_copy, lambda c: c.update(option_layout="parallel"))
    out = tmp_path / "bundle"
    code = cli.main([str(tiny_copy), "--out", str(out), "--quiet"])
    captured = capsys.readouterr()
    assert code == 1 and captured.out == ""
    assert stderr_lines(captured.err) == [
        f"{PROG}: error: ValueError: option_layout='parallel' is not supported by the ONNX "
        "runtime; load this checkpoint with laya.Agent"]
    assert not out.exists() and leftovers(out) == []


# --------------------------------------------------------------------------------------------
# atomic output
# --------------------------------------------------------------------------------------------

def test_non_empty_out_is_refused_without_force(checkpoints, tmp_path, no_reference):
    out = tmp_path / "bundle"
    (out / "sub").mkdir(parents=True)
    (out / "notes.txt").write_text("keep me")
    (out / "sub" / "data.bin").write_bytes(b"\x00\x01")
    before = tree(out)
    with pytest.raises(FileExistsError, match="is not empty; pass --force to replace it"):
        torchscript_export(checkpoints["modernbert-tiny"], out)
    assert tree(out) == before and leftovers(out) == []

    a_file = tmp_path / "file"
    a_file.write_text("not a directory")
    with pytest.raises(FileExistsError, match="exists and is not a directory"):
        torchscript_export(checkpoints["modernbert-tiny"], a_file, force=True)
    assert a_file.read_text() == "not a directory"


def test_force_replaces_a_non_empty_out(checkpoints, tmp_path):
    out = tmp_path / "bundle"
    (out / "old").mkdir(parents=True)
    (out / "notes.txt").write_text("replace me")
    summary = torchscript_export(checkpoints["modernbert-tiny"], out, force=True)
    assert summary["verification"]["passed"] is True
    assert sorted(p.name for p in out.iterdir()) == sorted(
        [fmt.CONFIG, fmt.TOKENIZER_DIR, fmt.GRAPH, fmt.sidecar(fmt.GRAPH), fmt.MANIFEST])
    assert read_manifest(out)["graph"]["exporter"] == "torchscript"
    assert leftovers(out) == []
    # readable by a service user: the weights' writer makes its file 0600, the bundle does not
    assert oct(out.stat().st_mode & 0o777) == oct(0o755)
    assert {oct(p.stat().st_mode & 0o777) for p in out.rglob("*")} == {oct(0o755), oct(0o644)}


@pytest.mark.parametrize("failure", [RuntimeError, KeyboardInterrupt])
def test_failure_after_the_build_started_keeps_the_previous_bundle(bundles, checkpoints,
                                                                   monkeypatch, tmp_path, failure):
    out = tmp_path / "bundle"
    shutil.copytree(bundles["modernbert-tiny"], out)
    before = tree(out)
    seen = []

    def verify_then_fail(graph, runs, reference, precision="fp32"):
        # the graph is already written, in a temporary directory beside --out
        seen.append(graph)
        assert graph.is_file() and graph.parent.parent == out.parent
        assert re.fullmatch(r"\.bundle\..+\.partial", graph.parent.name)
        raise failure("onnxruntime fell over")

    monkeypatch.setattr(candidates, "verify_graph", verify_then_fail)
    with pytest.raises(failure, match="onnxruntime fell over"):
        torchscript_export(checkpoints["modernbert-tiny"], out, force=True)
    assert len(seen) == 1
    assert tree(out) == before and leftovers(out) == []


# --------------------------------------------------------------------------------------------
# --skip-verify, external data
# --------------------------------------------------------------------------------------------

def test_skip_verify_is_recorded(checkpoints, monkeypatch, tmp_path, capsys):
    def must_not_run(*args, **kwargs):
        raise AssertionError("verification ran despite --skip-verify")

    monkeypatch.setattr(candidates, "verify_graph", must_not_run)
    out = tmp_path / "bundle"
    code = cli.main([str(checkpoints["modernbert-tiny"]), "--out", str(out), "--skip-verify",
                     "--exporter", "torchscript", "--quiet", "--json"])
    captured = capsys.readouterr()
    assert code == 0 and captured.err == ""
    summary = json.loads(captured.out)
    assert summary["verification"] == {"skipped": True, "passed": None, "precision": "fp32"}
    assert "verify" not in summary["stages"]
    report = read_manifest(out)["variants"]["fp32"]["verification"]
    assert report == {"skipped": True, "passed": None, "precision": "fp32"}


@pytest.mark.parametrize("kind", KINDS)
def test_weights_live_in_the_graphs_sidecar(bundles, kind):
    """External data by default: the graph names its sidecar by file name, so both travel
    together and onnxruntime maps the weights instead of copying them out of the protobuf."""
    import onnx

    bundle = bundles[kind]
    model = onnx.load(str(bundle / fmt.GRAPH), load_external_data=False)
    locations = {entry.value for init in model.graph.initializer
                 if init.data_location == onnx.TensorProto.EXTERNAL
                 for entry in init.external_data if entry.key == "location"}
    assert locations == {fmt.sidecar(fmt.GRAPH)}
    weights = read_manifest(bundle)["graph"]["parameter_bytes"]
    assert (bundle / fmt.sidecar(fmt.GRAPH)).stat().st_size >= 0.8 * weights


def test_no_external_data_keeps_the_weights_inside_the_graph(checkpoints, references, tmp_path):
    import onnx

    out = tmp_path / "bundle"
    out.mkdir()          # an existing empty --out needs no --force
    summary = torchscript_export(checkpoints["modernbert-tiny"], out, external_data=False)
    assert not (out / fmt.sidecar(fmt.GRAPH)).exists()
    manifest = read_manifest(out)
    assert summary["exporter"] == manifest["graph"]["exporter"] == "torchscript"
    assert manifest["graph"]["exporter_reason"] == "requested"
    assert manifest["graph"]["external_data"] is False
    fp32 = manifest["variants"]["fp32"]
    assert fp32["files"] == [fmt.GRAPH]
    assert fp32["verification"]["passed"] is True and fp32["verification"]["skipped"] is False
    assert fp32["verification"]["max_abs_p"] <= 1e-4

    model = onnx.load(str(out / fmt.GRAPH), load_external_data=False)
    assert not [init.name for init in model.graph.initializer
                if init.data_location == onnx.TensorProto.EXTERNAL]
    session = ort_session(out / fmt.GRAPH)
    assert_graph_matches_reference(session, references("modernbert-tiny"), FRESH_STATES,
                                   FRESH_QUESTIONS)


# --------------------------------------------------------------------------------------------
# hub sources and recipes
# --------------------------------------------------------------------------------------------

def test_hub_source_downloads_only_the_checkpoint_files(checkpoints, hub, tmp_path, capsys):
    snapshot, calls = hub
    shutil.copytree(checkpoints["modernbert-tiny"], snapshot / "decisions")
    (snapshot / "README.md").write_text("another checkpoint lives at the root")
    out = tmp_path / "bundle"
    code = cli.main(["acme/laya-tiny", "--subfolder", "decisions", "--revision", "v1.2",
                     "--token", "hf_secret_token", "--out", str(out), "--exporter", "torchscript",
                     "--skip-verify", "--quiet"])
    assert code == 0, capsys.readouterr().err
    assert len(calls) == 1
    repo_id, kwargs = calls[0]
    assert repo_id == "acme/laya-tiny"
    assert kwargs["revision"] == "v1.2" and kwargs["token"] == "hf_secret_token"
    assert sorted(kwargs["allow_patterns"]) == sorted(f"decisions/{p}" for p in HUB_PATTERNS)

    text = (out / fmt.MANIFEST).read_text(encoding="utf-8")
    assert "hf_secret_token" not in text
    source = json.loads(text)["source"]
    assert {key: source[key] for key in ("repo", "subfolder", "revision", "commit")} == {
        "repo": "acme/laya-tiny", "subfolder": "decisions", "revision": "v1.2", "commit": COMMIT}
    assert "path" not in source
    assert source["files"] == {rel: {"sha256": digest,
                                     "bytes": (snapshot / "decisions" / rel).stat().st_size}
                               for rel, digest in tree(snapshot / "decisions").items()}
    assert (out / fmt.CONFIG).read_bytes() == (snapshot / "decisions" / fmt.CONFIG).read_bytes()


def test_hub_token_falls_back_to_hf_token_and_missing_subfolder_is_named(checkpoints, hub,
                                                                         monkeypatch):
    snapshot, calls = hub
    shutil.copytree(checkpoints["modernbert-tiny"], snapshot / "decisions")
    monkeypatch.setenv("HF_TOKEN", "hf_from_env")
    found = ckpt.locate("acme/laya-tiny", subfolder="decisions")
    assert found.directory == snapshot / "decisions"
    assert calls[-1][1]["token"] == "hf_from_env" and calls[-1][1]["revision"] is None
    monkeypatch.delenv("HF_TOKEN")
    ckpt.locate("acme/laya-tiny")
    assert calls[-1][1]["token"] is None
    assert sorted(calls[-1][1]["allow_patterns"]) == sorted(HUB_PATTERNS)
    with pytest.raises(FileNotFoundError,
                       match=re.escape("Subfolder 'nope' not found in 'acme/laya-tiny'.")):
        ckpt.locate("acme/laya-tiny", subfolder="nope")


RECIPES = {"english.json": (None, 512, 192),
           "multilingual.json": ("multilingual", 1024, 256),
           "typed-decisions.json": ("typed-decisions", 1024, 256)}


def test_the_published_recipes_exist():
    assert sorted(p.name for p in (REPO / "export").glob("*.json")) == sorted(RECIPES)


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_recipe_is_valid(name):
    recipe = pipeline.read_recipe(REPO / "export" / name)
    subfolder, max_len, head_max_len = RECIPES[name]
    assert recipe["repo"] == "convaiinnovations/laya"
    assert recipe["subfolder"] == subfolder
    assert recipe["budgets"] == {"max_len": max_len, "head_max_len": head_max_len}
    ranges = recipe["shape_ranges"]
    assert sorted(ranges) == ["batch", "markers", "sequence"]
    for axis, values in ranges.items():
        assert sorted(values) == ["max", "min", "opt"], axis
        assert all(isinstance(v, int) for v in values.values()), axis
        assert 1 <= values["min"] <= values["opt"] <= values["max"], axis
    assert ranges["markers"]["min"] >= fmt.MIN_MARKERS
    assert ranges["sequence"]["max"] == max_len
    assert recipe["opset"] == DEFAULT_OPSET
    assert isinstance(recipe.get("description", ""), str)


def test_recipe_fills_options_and_arguments_override_it(tmp_path):
    parser = cli.build_parser()
    path = REPO / "export" / "multilingual.json"
    recipe = json.loads(path.read_text())

    options = cli.options_from_args(parser.parse_args(["--recipe", str(path), "--out", "o"]),
                                    parser)
    assert options.source == "convaiinnovations/laya" and options.subfolder == "multilingual"
    assert options.revision is None and options.opset == 18
    assert options.shape_ranges == recipe["shape_ranges"] and options.recipe == "multilingual.json"

    options = cli.options_from_args(parser.parse_args([
        "other/laya-fork", "--recipe", str(path), "--out", "o", "--subfolder", "typed-decisions",
        "--revision", "abc123", "--opset", "17", "--token", "t"]), parser)
    assert (options.source, options.subfolder, options.revision, options.opset, options.token) == (
        "other/laya-fork", "typed-decisions", "abc123", 17, "t")
    assert options.shape_ranges == recipe["shape_ranges"]

    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"subfolder": "x"}))
    with pytest.raises(ValueError, match="must be a JSON object with at least 'repo'"):
        pipeline.read_recipe(bad)


@pytest.mark.parametrize("content, reason", [
    (None, "FileNotFoundError: "),
    ("{not json", "JSONDecodeError: "),
    ('{"subfolder": "x"}', "ValueError: recipe "),
])
def test_unreadable_recipe_exits_1_with_one_line(content, reason, tmp_path, capsys):
    recipe = tmp_path / "recipe.json"
    if content is not None:
        recipe.write_text(content)
    out = tmp_path / "bundle"
    code = cli.main(["--recipe", str(recipe), "--out", str(out)])
    captured = capsys.readouterr()
    assert code == 1 and captured.out == ""
    lines = stderr_lines(captured.err)
    assert len(lines) == 1 and lines[0].startswith(f"{PROG}: error: {reason}")
    assert not out.exists()


def test_recipe_end_to_end_with_a_mocked_hub(checkpoints, hub, tmp_path, capsys):
    snapshot, calls = hub
    shutil.copytree(checkpoints["unigram-tiny"], snapshot / "multilingual")
    recipe_path = REPO / "export" / "multilingual.json"
    recipe = json.loads(recipe_path.read_text())
    out = tmp_path / "bundle"
    code = cli.main(["--recipe", str(recipe_path), "--revision", "r1", "--out", str(out),
                     "--exporter", "torchscript", "--skip-verify", "--quiet"])
    assert code == 0, capsys.readouterr().err
    repo_id, kwargs = calls[0]
    assert repo_id == recipe["repo"] and kwargs["revision"] == "r1"
    assert sorted(kwargs["allow_patterns"]) == sorted(f"multilingual/{p}" for p in HUB_PATTERNS)
    manifest = read_manifest(out)
    assert manifest["source"]["repo"] == "convaiinnovations/laya"
    assert manifest["source"]["subfolder"] == "multilingual"
    assert manifest["source"]["recipe"] == "multilingual.json"
    assert manifest["graph"]["shape_ranges"] == recipe["shape_ranges"]
    assert manifest["graph"]["opset"] == recipe["opset"]


def test_recipe_defaults_out_to_the_directory_the_router_reads(tmp_path, monkeypatch):
    monkeypatch.setenv("LAYA_EDGE_MODELS", str(tmp_path / "models"))
    path = REPO / "export" / "typed-decisions.json"
    parser = cli.build_parser()
    options = cli.options_from_args(parser.parse_args(["--recipe", str(path)]), parser)
    assert options.out == tmp_path / "models" / "typed-decisions"
    from laya_edge.bundle_format import default_bundle_dir
    assert default_bundle_dir("typed-decisions") == options.out


def test_no_fuse_and_no_readout_export_the_models_own_forward(checkpoints, tmp_path, capsys):
    """The plain graph a straight torch.onnx export gives: standard ONNX operators only, every
    position of the last head layer computed; still verified like any graph."""
    out = tmp_path / "bundle"
    code = cli.main([str(checkpoints["minilm"]), "--out", str(out), "--no-fuse", "--no-readout",
                     "--exporter", "torchscript", "--json"])
    summary = json.loads(capsys.readouterr().out)
    assert code == 0 and "fuse" not in summary["stages"]
    manifest = read_manifest(out)
    optimisations = manifest["variants"]["fp32"]["optimisations"]
    assert not any("ORT fusions" in line for line in optimisations)
    assert pipeline.READOUT not in optimisations and manifest["graph"]["forward"] == "model"
    assert "com.microsoft" not in manifest["graph"]["opset_imports"]
    assert summary["verification"]["passed"] is True
