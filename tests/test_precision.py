"""Precision variants and execution-provider selection (issue 6), on the CPU.

GPU behaviour (CUDA/TensorRT sessions) cannot run here; what can be checked without a GPU is:
the variants' verification and thresholds, the planning of device/precision/providers, the
provider options built for CUDA and TensorRT, the fallbacks and their warnings, and that the
IO-binding run path gives the plain run's answers.
"""
import importlib.metadata
import json
import shutil
import warnings

import numpy as np
import pytest

import laya_edge
from laya_edge import session as S
from laya_edge.device_run import run
from laya_edge.bundle_format import read_manifest
from laya_edge.export import ExportOptions, Progress, VerificationError, export_bundle
from laya_edge.export import __main__ as cli
from laya_edge.export.precision import decision_head_nodes, parse_precisions, parse_ship
from laya_edge.export.verify import THRESHOLDS

QUESTIONS = {
    "dept": {"type": "choice", "instructions": "Which team should handle this?",
             "criteria": ["billing", "technical", "sales", "legal"]},
    "urgent": {"type": "noul", "instructions": "The customer needs help today."},
    "severity": {"type": "score", "instructions": "How severe is it?",
                 "criteria": ["minor", "annoying", "blocking"]},
}
STATES = ["I was charged twice for my subscription, please refund one payment.",
          "The app crashes every time I open the settings page on Android.",
          "Can we get a volume discount for 50 seats?", "Your contract breaches GDPR."]


def quiet_load(path, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return laya_edge.load(str(path), **kwargs)


@pytest.fixture(scope="module")
def fp16_bundle(checkpoints, tmp_path_factory):
    """MiniLM (a real pretrained encoder) with an fp16 variant."""
    out = tmp_path_factory.mktemp("fp16") / "minilm"
    export_bundle(ExportOptions(source=str(checkpoints["minilm"]), out=out,
                                exporter="torchscript", precisions=("fp32", "fp16")),
                  Progress(quiet=True))
    return out


# -- export ------------------------------------------------------------------------------------

def test_parse_precisions_keeps_fp32_as_the_reference():
    assert parse_precisions("int8") == ("fp32", "int8")
    assert parse_precisions("fp16, int8,fp32") == ("fp32", "fp16", "int8")
    with pytest.raises(ValueError, match="unknown precision 'bf16'"):
        parse_precisions("fp16,bf16")


def test_parse_ship_names_built_variants_only():
    assert parse_ship("int8", ("fp32", "int8")) == ("int8",)
    assert parse_ship("int8, fp32", ("fp32", "int8")) == ("fp32", "int8")
    with pytest.raises(ValueError, match="'fp16' is not among the variants built"):
        parse_ship("fp16", ("fp32", "int8"))
    with pytest.raises(ValueError, match="at least one variant"):
        parse_ship(" , ", ("fp32",))


def test_ship_without_building_the_variant_is_a_usage_error(capsys, tmp_path):
    with pytest.raises(SystemExit) as raised:
        cli.main(["ckpt", "--out", str(tmp_path / "o"), "--ship", "int8"])
    err = capsys.readouterr().err.splitlines()
    assert raised.value.code == 2 and "--ship" in err[-1] and "add it to --precision" in err[-1]


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_a_bundle_shipping_only_a_reduced_variant(checkpoints, bundles, tmp_path):
    """--ship fp16: the fp32 graph is verified, then left out of the bundle and its manifest."""
    from laya_edge import ONNXAgent

    out = tmp_path / "fp16-only"
    summary = export_bundle(ExportOptions(source=str(checkpoints["modernbert-tiny"]), out=out,
                                          exporter="torchscript", precisions=("fp32", "fp16"),
                                          ship=("fp16",)),
                            Progress(quiet=True))
    manifest = json.loads((out / "laya_edge.json").read_text())
    assert list(manifest["variants"]) == ["fp16"] and list(summary["variants"]) == ["fp16"]
    assert not (out / "laya.onnx").exists() and "laya.onnx" not in manifest["files"]
    assert summary["verification"]["passed"]        # fp32 was still verified
    agent = ONNXAgent(str(out))
    assert agent.runtime_info()["precision"] == "fp16"
    fp32 = ONNXAgent(str(bundles["modernbert-tiny"]))
    state, questions = "My card was charged twice", {
        "urgent": {"type": "noul", "instructions": "Is this urgent?"}}
    ours = agent.system_one(state, questions)["answers"]["urgent"]["noul"]
    assert ours == pytest.approx(fp32.system_one(state, questions)["answers"]["urgent"]["noul"],
                                 abs=THRESHOLDS["fp16"]["max_abs_p"])
    with pytest.raises(ValueError, match=r"no fp32 variant \(it has \['fp16'\]\); re-export "
                                         "it without --ship"):
        ONNXAgent(str(out), precision="fp32")


def test_bad_precision_argument_is_one_line(capsys, tmp_path):
    with pytest.raises(SystemExit) as raised:
        cli.main(["ckpt", "--out", str(tmp_path / "o"), "--precision", "fp8"])
    err = capsys.readouterr().err.splitlines()
    assert raised.value.code == 2 and len(err) == 1 and "--precision" in err[0]


def test_fp16_variant_is_verified_and_listed(fp16_bundle):
    manifest = read_manifest(fp16_bundle)
    variant = manifest["variants"]["fp16"]
    assert variant["files"] == ["laya.fp16.onnx", "laya.fp16.onnx.data"]
    assert variant["bytes"] == sum((fp16_bundle / name).stat().st_size
                                   for name in variant["files"])
    assert variant["bytes"] < 0.6 * manifest["variants"]["fp32"]["bytes"]
    report = variant["verification"]
    assert report["precision"] == "fp16" and report["passed"] is True
    assert report["skipped"] is False and report["thresholds"] == THRESHOLDS["fp16"]
    assert report["argmax_agreement"] >= 0.995 and report["max_abs_p"] <= 0.05
    assert "laya.fp16.onnx" in manifest["files"]
    assert any("keep_io_types" in step for step in variant["optimisations"])


def test_fp16_graph_keeps_fp32_inputs_outputs_and_decision_head(fp16_bundle):
    import onnx

    graph = onnx.load(str(fp16_bundle / "laya.fp16.onnx"))
    types = {v.name: v.type.tensor_type.elem_type for v in list(graph.graph.input)
             + list(graph.graph.output)}
    assert types["logits"] == types["act_logits"] == onnx.TensorProto.FLOAT
    assert types["input_ids"] == onnx.TensorProto.INT64
    assert any(init.data_type == onnx.TensorProto.FLOAT16 for init in graph.graph.initializer)
    fp32 = onnx.load(str(fp16_bundle / "laya.onnx"))
    head = decision_head_nodes(fp32)
    assert head and len(head) < len(fp32.graph.node)
    assert all(node.op_type not in ("Shape", "Size") for node in fp32.graph.node
               if node.name in head)


def test_fp16_answers_agree_with_upstream_torch(fp16_bundle, checkpoints):
    import laya

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch_agent = laya.load(str(checkpoints["minilm"]), device="cpu")
    agent = quiet_load(fp16_bundle, precision="fp16")
    assert agent.runtime_info()["precision"] == "fp16"
    ours = agent.predict_batch(STATES, QUESTIONS)
    theirs = torch_agent.predict_batch(STATES, QUESTIONS)
    agree = worst = 0
    total = 0
    for mine, ref in zip(ours, theirs):
        for qid, answer in mine["answers"].items():
            expected = ref["answers"][qid]
            total += 1
            if answer["type"] == "choice":
                agree += answer["choice"] == expected["choice"]
                worst = max(worst, *(abs(answer["probabilities"][k] - v)
                                     for k, v in expected["probabilities"].items()))
            elif answer["type"] == "noul":
                agree += (answer["noul"] > 0.5) == (expected["noul"] > 0.5)
                worst = max(worst, abs(answer["noul"] - expected["noul"]))
            else:
                agree += max(answer["probabilities"], key=answer["probabilities"].get) == \
                    max(expected["probabilities"], key=expected["probabilities"].get)
                worst = max(worst, *(abs(answer["probabilities"][k] - v)
                                     for k, v in expected["probabilities"].items()))
    assert agree == total and worst <= THRESHOLDS["fp16"]["max_abs_p"]


def _record_weight_only_schemes(monkeypatch) -> list:
    """Make the pipeline's weight-only builds record their (MatMul block, symmetric, embedding
    block) scheme, the embedding block None where the embeddings stay fp32."""
    from laya_edge.export import int8_variant

    real, schemes = int8_variant.to_int8_weight_only, []

    def recorded(source, target, embeddings, external, block, symmetric, embedding_block):
        schemes.append((block, symmetric, embedding_block if embeddings else None))
        return real(source, target, embeddings, external, block, symmetric, embedding_block)

    monkeypatch.setattr(int8_variant, "to_int8_weight_only", recorded)
    return schemes


def _search_finds_nothing(monkeypatch) -> list:
    """Make the int8 search find no mixed graph (it is tested on its own in
    test_int8_search.py, and costs minutes on MiniLM); record that it ran."""
    from laya_edge.export import int8_search

    calls = []

    def nothing(nodes, *_args):
        calls.append(len(nodes))
        return int8_search.SearchOutcome(None, [], {}, [], len(nodes))

    monkeypatch.setattr(int8_search, "search_mixed_int8", nothing)
    return calls


@pytest.mark.parametrize("embeddings", [False, True])
def test_a_variant_missing_its_thresholds_fails_the_export(checkpoints, tmp_path, monkeypatch,
                                                           embeddings):
    """int8 of the random-head ModernBERT-style test checkpoint misses the bar, dynamic and
    every weight-only scheme alike (and here the mixed-precision search finds nothing): the
    export tries them all, refuses the variant, says where it diverged, and writes nothing.
    The schemes that only shrink the embedding blocks are tried where the embeddings are
    quantised, and nowhere else, where they would rebuild a graph tried before."""
    from laya_edge.export.precision import WEIGHT_ONLY_SCHEMES

    schemes = _record_weight_only_schemes(monkeypatch)
    searched = _search_finds_nothing(monkeypatch)
    out = tmp_path / "int8"
    with pytest.raises(VerificationError) as failed:
        export_bundle(ExportOptions(source=str(checkpoints["modernbert-tiny"]), out=out,
                                    exporter="torchscript", precisions=("fp32", "int8"),
                                    int8_embeddings=embeddings),
                      Progress(quiet=True))
    message = str(failed.value)
    assert "laya.int8.onnx (int8)" in message and "case '" in message
    report = failed.value.report
    assert report["precision"] == "int8" and report["passed"] is False
    assert report["argmax_agreement"] < 0.99 or report["max_abs_p"] > 0.05
    assert not out.exists() and not list(tmp_path.glob(".int8.*"))
    assert len(searched) == 1
    if embeddings:
        assert schemes == list(WEIGHT_ONLY_SCHEMES)
    else:
        matmul_schemes = list(dict.fromkeys(scheme[:2] for scheme in WEIGHT_ONLY_SCHEMES))
        assert schemes == [scheme + (None,) for scheme in matmul_schemes]
        assert len(schemes) < len(WEIGHT_ONLY_SCHEMES)


@pytest.mark.parametrize("block", [32, 16, 8])
def test_embedding_tables_are_quantised_in_blocks_of_each_row(block):
    """Each block of `block` values of an embedding row keeps its own int8 scale, so a
    row of small values, and small values beside a row's large ones, are resolved as finely as
    large ones; a row whose width is not a multiple of the block is one block; small tables, and
    tables something other than a lookup reads, stay fp32. Lookups of any rank work. The scales
    are float16, never below the exact scale (no value clips) and at most one float16 step
    above it, and the rows are rounded with the stored scale."""
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    from laya_edge.export.precision import MIN_TABLE_ROWS, quantise_embedding_rows

    rng = np.random.default_rng(0)
    rows_in = MIN_TABLE_ROWS + 44
    magnitudes = 10.0 ** rng.uniform(-3, 1, size=(rows_in, 2))
    magnitudes[5] = 0.0
    table = (rng.normal(size=(rows_in, 2, block)) * magnitudes[:, :, None]).reshape(
        rows_in, 2 * block).astype(np.float32)
    narrow = (rng.normal(size=(rows_in, 4)) * magnitudes[:, :1]).astype(np.float32)
    small = rng.normal(size=(3, 4)).astype(np.float32)
    shared = rng.normal(size=(rows_in, rows_in)).astype(np.float32)
    outputs = [("rows", [None, None, 2 * block]), ("narrowed", [None, 4]),
               ("typed", [None, 4]), ("picked", [None, rows_in]), ("out", [None, rows_in])]
    graph = helper.make_graph(
        [helper.make_node("Gather", ["table", "pairs"], ["rows"]),
         helper.make_node("Gather", ["narrow", "ids"], ["narrowed"]),
         helper.make_node("Gather", ["small", "kinds"], ["typed"]),
         helper.make_node("Gather", ["shared", "ids"], ["picked"]),
         helper.make_node("MatMul", ["picked", "shared"], ["out"])], "tables",
        [helper.make_tensor_value_info("pairs", TensorProto.INT64, [None, 2])]
        + [helper.make_tensor_value_info(name, TensorProto.INT64, [None])
           for name in ("ids", "kinds")],
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)
         for name, shape in outputs],
        [numpy_helper.from_array(array, name) for name, array in
         (("table", table), ("narrow", narrow), ("small", small), ("shared", shared))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    assert quantise_embedding_rows(model, block) == {"table": block, "narrow": 4}
    initializers = {init.name: init for init in model.graph.initializer}
    assert not {"table", "narrow"} & set(initializers) and {"small", "shared"} <= set(initializers)
    assert initializers["table_rows_int8"].data_type == TensorProto.INT8
    stored = numpy_helper.to_array(initializers["table_block_scales"])
    assert stored.dtype == np.float16 and stored.shape == (rows_in, 2, 1)
    exact = np.abs(table.reshape(rows_in, 2, block)).max(axis=2, keepdims=True) / 127
    exact[5] = 1.0  # an all-zero block keeps scale 1
    one_step = np.maximum(exact * 2.0 ** -10, 2.0 ** -24)  # float16's spacing, subnormals too
    assert (stored >= exact).all() and (stored.astype(np.float64) - exact <= one_step).all()
    assert (stored > exact.astype(np.float16)).any()  # rounding to nearest would have gone below
    onnx.checker.check_model(model)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    looked_up = np.array([0, 1, 2, 3, 4, 5, rows_in - 1, 3])
    kinds = np.array([2, 0, 1])
    rows, narrowed, typed, picked = session.run(
        ["rows", "narrowed", "typed", "picked"],
        {"pairs": looked_up.reshape(4, 2), "ids": looked_up, "kinds": kinds})
    assert rows.shape == (4, 2, 2 * block)
    rows = rows.reshape(len(looked_up), 2, block)
    expected = table[looked_up].reshape(len(looked_up), 2, block)
    step = stored[looked_up].astype(np.float32)
    step[np.abs(expected).max(axis=2, keepdims=True) == 0] = 0.0
    assert (np.abs(rows - expected) <= step / 2 + 1e-7).all()
    # the smaller block of each row: one scale for the whole row would round it coarser
    quieter = np.argmin(magnitudes[looked_up], axis=1)
    row_step = np.abs(expected).max(axis=(1, 2)) / 127
    errors = np.abs(rows - expected)[np.arange(len(looked_up)), quieter].max(axis=1)
    assert (step[np.arange(len(looked_up)), quieter, 0] < row_step / 10).any()
    assert (errors <= step[np.arange(len(looked_up)), quieter, 0] / 2 + 1e-7).all()
    assert not rows[5].any()
    narrow_step = numpy_helper.to_array(initializers["narrow_block_scales"])[looked_up, 0]
    assert (np.abs(narrowed - narrow[looked_up]) <= narrow_step / 2 + 1e-7).all()
    assert np.array_equal(typed, small[kinds]) and np.array_equal(picked, shared[looked_up])


def test_an_embedding_table_too_large_for_float16_scales_stays_fp32():
    """A table holding a value whose block scale float16 cannot hold (over 65504 x 127) is left
    in fp32 rather than stored with an infinite scale that would zero its rows; a table within
    the limit beside it is still quantised."""
    from onnx import TensorProto, helper, numpy_helper

    from laya_edge.export.precision import HALF_SCALE_LIMIT, MIN_TABLE_ROWS, quantise_embedding_rows

    rng = np.random.default_rng(2)
    huge = rng.normal(size=(MIN_TABLE_ROWS, 8)).astype(np.float32)
    huge[3, 5] = 2 * HALF_SCALE_LIMIT
    fine = rng.normal(size=(MIN_TABLE_ROWS, 8)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Gather", [name, "ids"], [f"{name}_rows"]) for name in ("huge", "fine")],
        "tables", [helper.make_tensor_value_info("ids", TensorProto.INT64, [None])],
        [helper.make_tensor_value_info(f"{name}_rows", TensorProto.FLOAT, [None, 8])
         for name in ("huge", "fine")],
        [numpy_helper.from_array(huge, "huge"), numpy_helper.from_array(fine, "fine")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    assert quantise_embedding_rows(model, 8) == {"fine": 8}
    initializers = {init.name: init for init in model.graph.initializer}
    assert np.array_equal(numpy_helper.to_array(initializers["huge"]), huge)
    assert "fine" not in initializers and "fine_rows_int8" in initializers


def test_dynamic_int8_rounds_embedding_tables_by_row_blocks_and_leaves_small_tables_exact(
        tmp_path):
    """With embeddings, the dynamic int8 graph stores the lookup table as the weight-only one
    does (int8 rows, one scale per block of a row), not with onnxruntime's one scale per table
    for every table: a row of small values keeps its resolution, a small table added at every
    position (like Laya's question-type embedding) stays exact, and the weight multiplication
    is still quantised dynamically."""
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    from laya_edge.export.precision import EMBEDDING_BLOCK, MIN_TABLE_ROWS, to_int8

    rng = np.random.default_rng(1)
    width = 2 * EMBEDDING_BLOCK
    magnitudes = 10.0 ** rng.uniform(-3, 1, size=(MIN_TABLE_ROWS, 1))
    table = (rng.normal(size=(MIN_TABLE_ROWS, width)) * magnitudes).astype(np.float32)
    small = rng.normal(size=(3, width)).astype(np.float32)
    weight = rng.normal(size=(width, 8)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Gather", ["table", "ids"], ["looked_up"]),
         helper.make_node("Gather", ["small", "kinds"], ["typed"]),
         helper.make_node("Add", ["looked_up", "typed"], ["embedded"]),
         helper.make_node("MatMul", ["embedded", "weight"], ["out"])], "embed",
        [helper.make_tensor_value_info(name, TensorProto.INT64, [None])
         for name in ("ids", "kinds")],
        [helper.make_tensor_value_info("embedded", TensorProto.FLOAT, [None, width]),
         helper.make_tensor_value_info("out", TensorProto.FLOAT, [None, 8])],
        [numpy_helper.from_array(array, name) for name, array in
         (("table", table), ("small", small), ("weight", weight))])
    source, target = tmp_path / "fp32.onnx", tmp_path / "int8.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                ir_version=8), str(source))
    optimisations = to_int8(source, target, False, False, True, False)
    assert optimisations[0].endswith(
        f", 1 embedding table(s) with one scale per {EMBEDDING_BLOCK} values of a row")
    model = onnx.load(str(target))
    initializers = {init.name: init for init in model.graph.initializer}
    assert initializers["table_rows_int8"].data_type == TensorProto.INT8
    assert np.array_equal(numpy_helper.to_array(initializers["small"]), small)
    assert {"DynamicQuantizeMatMul", "MatMulInteger"} & {n.op_type for n in model.graph.node}
    session = ort.InferenceSession(str(target), providers=["CPUExecutionProvider"])
    ids = np.argsort(magnitudes[:, 0])[:8]  # the quietest rows
    kinds = np.array([0, 1, 2, 0, 1, 2, 0, 1])
    embedded = session.run(["embedded"], {"ids": ids, "kinds": kinds})[0]
    blocks = table[ids].reshape(len(ids), -1, EMBEDDING_BLOCK)
    step = np.repeat(np.abs(blocks).max(axis=2) / 127, EMBEDDING_BLOCK, axis=1)
    assert (np.abs(embedded - small[kinds] - table[ids]) <= step / 2 + 1e-6).all()
    assert step.max() < np.abs(table).max() / 127 / 100  # one scale per table: 100x coarser


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_int8_falls_back_to_weight_only_when_dynamic_quantisation_misses(checkpoints, tmp_path,
                                                                         monkeypatch):
    """The fully quantised dynamic graph of the generated MiniLM checkpoint misses the int8
    bar (MiniLM's activation outliers; one of the dynamic settings here, each MiniLM build
    costing a quarter of a minute), and here the search finds no mixed graph; the weight-only
    schemes are tried smallest first until one passes, and that graph ships (it is not faster
    than fp32, hence allow_slow_int8) and answers."""
    import onnx

    from laya_edge.export import int8_variant, speed
    from laya_edge.export.precision import WEIGHT_ONLY_SCHEMES

    monkeypatch.setattr(int8_variant, "SETTINGS", int8_variant.SETTINGS[:1])
    schemes = _record_weight_only_schemes(monkeypatch)
    searched = _search_finds_nothing(monkeypatch)
    timed = []

    def untimed(baseline, candidate, batches):
        """Timing MiniLM's probe batches costs minutes; it is tested in test_int8_search.py."""
        timed.append(candidate)
        return {"speedup": 0.0, "rounds": 0, "cpu": speed.cpu_description()}

    monkeypatch.setattr(speed, "speedup_over", untimed)
    out = tmp_path / "int8"
    export_bundle(ExportOptions(source=str(checkpoints["minilm"]), out=out,
                                exporter="torchscript", precisions=("fp32", "int8"),
                                int8_embeddings=True, ship=("int8",), allow_slow_int8=True),
                  Progress(quiet=True))
    assert len(searched) == 1 and len(timed) == 1  # only the chosen graph is timed
    variant = read_manifest(out)["variants"]["int8"]
    assert variant["verification"]["passed"] is True
    assert variant["optimisations"][-1].startswith("weight-only int8")
    assert "embedding table(s) with one scale per 32 values of a row" in \
        variant["optimisations"][-1]
    assert schemes and schemes == list(WEIGHT_ONLY_SCHEMES[:len(schemes)])
    block, symmetric, _embedding_block = schemes[-1]
    assert (f"{'symmetric' if symmetric else 'asymmetric'} blocks of {block}"
            in variant["optimisations"][-1])
    graph = onnx.load(str(out / "laya.int8.onnx"), load_external_data=False).graph
    ops = {node.op_type for node in graph.node}
    assert "MatMulNBits" in ops and not ops & {"DynamicQuantizeMatMul", "MatMulInteger"}
    assert not [name for name in (p.name for p in out.iterdir()) if "attempt" in name]
    agent = quiet_load(out)
    assert agent.runtime_info()["precision"] == "int8"
    assert list(agent.system_one(STATES[0], QUESTIONS)["answers"]) == list(QUESTIONS)


def test_the_weight_only_fallback_is_not_tried_when_a_dynamic_graph_passes(
        checkpoints, tmp_path, monkeypatch):
    from laya_edge.export import int8_variant

    def never(*_args):
        raise AssertionError("the weight-only fallback ran although a dynamic graph passed")

    monkeypatch.setattr(int8_variant, "to_int8_weight_only", never)
    monkeypatch.setattr(int8_variant, "SETTINGS", int8_variant.SETTINGS[:1])
    searched = _search_finds_nothing(monkeypatch)
    monkeypatch.setitem(THRESHOLDS, "int8", {"argmax_agreement": 0.0, "max_abs_p": 1.0})
    out = tmp_path / "int8"
    export_bundle(ExportOptions(source=str(checkpoints["modernbert-tiny"]), out=out,
                                exporter="torchscript", precisions=("fp32", "int8"),
                                allow_slow_int8=True), Progress(quiet=True))
    assert not searched
    optimisations = read_manifest(out)["variants"]["int8"]["optimisations"]
    assert optimisations[-1].startswith("dynamic int8 quantisation")


def test_skip_verify_records_unverified_variants(checkpoints, tmp_path):
    out = tmp_path / "int8"
    summary = export_bundle(ExportOptions(source=str(checkpoints["modernbert-tiny"]), out=out,
                                          exporter="torchscript", skip_verify=True,
                                          precisions=("fp32", "int8")), Progress(quiet=True))
    assert summary["variants"]["int8"]["verification"] == {"skipped": True, "passed": None,
                                                           "precision": "int8"}
    names = sorted(p.name for p in out.iterdir())
    assert "laya.int8.onnx" in names and not [n for n in names if "attempt" in n]
    agent = quiet_load(out)
    info = agent.runtime_info()
    assert info["precision"] == "int8" and info["available_variants"] == ["fp32", "int8"]
    assert "precision=auto on cpu: int8" in info["reasons"][1]
    assert agent.system_one(STATES[0], QUESTIONS)["answers"]["dept"]["type"] == "choice"


def test_skip_verify_with_weight_only_int8_builds_the_weight_only_graph(checkpoints, tmp_path):
    import onnx

    out = tmp_path / "int8"
    export_bundle(ExportOptions(source=str(checkpoints["modernbert-tiny"]), out=out,
                                exporter="torchscript", skip_verify=True, int8_weight_only=True,
                                precisions=("fp32", "int8")), Progress(quiet=True))
    variant = read_manifest(out)["variants"]["int8"]
    assert variant["verification"]["skipped"] is True
    assert variant["optimisations"][-1].startswith("weight-only int8")
    ops = {node.op_type for node in
           onnx.load(str(out / "laya.int8.onnx"), load_external_data=False).graph.node}
    assert "MatMulNBits" in ops and not ops & {"DynamicQuantizeMatMul", "MatMulInteger"}
    assert quiet_load(out, precision="int8").system_one(
        STATES[0], QUESTIONS)["answers"]["dept"]["type"] == "choice"


def test_int8_is_quantised_from_the_fused_graph(checkpoints, tmp_path):
    """MiniLM's attention fuses, and the int8 variant quantises the fused graph: the packed
    attention weights become int8 too (QAttention), and the graph finds its own sidecar."""
    import onnx

    out = tmp_path / "int8"
    export_bundle(ExportOptions(source=str(checkpoints["minilm"]), out=out, skip_verify=True,
                                precisions=("fp32", "int8")), Progress(quiet=True))
    variant = read_manifest(out)["variants"]["int8"]
    assert variant["files"] == ["laya.int8.onnx", "laya.int8.onnx.data"]
    assert any(line.startswith("onnxscript ORT fusions") and "packed_qkv_weights x6" in line
               for line in variant["optimisations"])
    graph = onnx.load(str(out / "laya.int8.onnx"))
    operators = [node.op_type for node in graph.graph.node]
    assert operators.count("QAttention") == 6 and "Attention" not in operators
    assert quiet_load(out, precision="int8").system_one(STATES[0], QUESTIONS)["answers"]


# -- planning ---------------------------------------------------------------------------------

VARIANTS = {"fp32": "laya.onnx", "fp16": "laya.fp16.onnx", "int8": "laya.int8.onnx"}
RANGES = {"batch": {"min": 1, "opt": 8, "max": 64}, "sequence": {"min": 4, "opt": 256, "max": 512},
          "markers": {"min": 2, "opt": 4, "max": 64}}


@pytest.mark.parametrize("available, device, precision, expected", [
    ([S.CPU], None, None, ("cpu", "int8", [S.CPU])),
    ([S.CUDA, S.CPU], "auto", "auto", ("cuda", "fp16", [S.CUDA, S.CPU])),
    ([S.CUDA, S.CPU], "cpu", None, ("cpu", "int8", [S.CPU])),
    ([S.CUDA, S.CPU], "cuda:1", "fp32", ("cuda", "fp32", [S.CUDA, S.CPU])),
    ([S.TENSORRT, S.CUDA, S.CPU], None, None, ("cuda", "fp16", [S.CUDA, S.CPU])),
    ([S.TENSORRT, S.CUDA, S.CPU], "tensorrt", None, ("tensorrt", "fp16",
                                                      [S.TENSORRT, S.CUDA, S.CPU])),
])
def test_plan_picks_device_variant_and_providers(available, device, precision, expected):
    chosen = S.plan(device, precision, available, VARIANTS, "abc", RANGES)
    names = [p[0] if isinstance(p, tuple) else p for p in chosen.providers]
    assert (chosen.device, chosen.precision, names) == expected
    assert chosen.reasons and all(isinstance(r, str) for r in chosen.reasons)
    # TensorRT reduces precision itself: it is fed the fp32 graph
    assert chosen.graph == (VARIANTS["fp32"] if chosen.device == "tensorrt"
                            else VARIANTS[chosen.precision])


def test_auto_precision_falls_back_to_fp32_without_the_preferred_variant():
    chosen = S.plan(None, None, [S.CPU], {"fp32": "laya.onnx"})
    assert chosen.precision == "fp32"
    assert chosen.reasons[1] == "precision=auto on cpu: fp32 (the bundle has no int8 variant)"


def test_plan_for_a_bundle_without_fp32():
    int8_only = {"int8": "laya.int8.onnx"}
    assert S.plan(None, None, [S.CPU], int8_only).precision == "int8"
    chosen = S.plan("cuda", None, [S.CUDA, S.CPU], int8_only)
    assert (chosen.device, chosen.precision) == ("cuda", "int8")
    assert "the bundle has no fp16 variant" in chosen.reasons[1]
    with pytest.raises(ValueError, match="builds its engine from the fp32 graph, which this "
                                         r"bundle does not ship \(it has \['int8'\]\)"):
        S.plan("tensorrt", None, [S.TENSORRT, S.CUDA, S.CPU], int8_only)


def test_missing_variant_and_bad_values_are_clear_errors():
    with pytest.raises(ValueError, match=r"no fp16 variant \(it has \['fp32'\]\).*--precision "
                                         r"fp32,fp16"):
        S.plan("cpu", "fp16", [S.CPU], {"fp32": "laya.onnx"})
    with pytest.raises(ValueError, match="precision must be one of"):
        S.plan("cpu", "bf16", [S.CPU], VARIANTS)
    for bad in ("gpu", "cuda:x", "cpu:1", "tensorrt:-1"):
        with pytest.raises(ValueError, match="device must be"):
            S.parse_device(bad)
    assert S.parse_device("CUDA:2") == ("cuda", 2) and S.parse_device(None) == ("auto", 0)


def test_unavailable_device_warns_once_and_falls_back(monkeypatch):
    monkeypatch.setattr(S, "dual_install", lambda: False)
    with pytest.warns(RuntimeWarning) as caught:
        chosen = S.plan("tensorrt", None, [S.CUDA, S.CPU], VARIANTS)
    assert len(caught) == 1 and "TensorrtExecutionProvider" in str(caught[0].message)
    assert chosen.device == "cuda"
    with pytest.warns(RuntimeWarning, match="CUDAExecutionProvider, which this onnxruntime "
                                            "does not offer; running on cpu"):
        assert S.plan("cuda", None, [S.CPU], VARIANTS).device == "cpu"


def test_dual_install_is_detected_and_explained(monkeypatch):
    class Dist:
        def __init__(self, name):
            self.metadata = {"Name": name}

    monkeypatch.setattr(importlib.metadata, "distributions",
                        lambda: [Dist("onnxruntime"), Dist("onnxruntime-gpu"), Dist("numpy")])
    assert S.dual_install() is True
    with pytest.warns(RuntimeWarning, match="both onnxruntime and onnxruntime-gpu are installed"):
        S.plan("cuda", None, [S.CPU], VARIANTS)
    monkeypatch.setattr(importlib.metadata, "distributions", lambda: [Dist("onnxruntime")])
    assert S.dual_install() is False


def test_explicit_providers_are_used_as_given():
    chosen = S.plan("cpu", "fp32", [S.CPU], VARIANTS, providers=["CPUExecutionProvider"],
                    provider_options=[{"arena_extend_strategy": "kSameAsRequested"}])
    assert chosen.providers == [("CPUExecutionProvider",
                                 {"arena_extend_strategy": "kSameAsRequested"})]
    assert chosen.reasons[0] == "providers=: used as given; device cpu (their first provider)"


def test_cuda_and_tensorrt_provider_options(monkeypatch, tmp_path):
    monkeypatch.setattr(S, "gpu_name", lambda index: "NVIDIA H200")
    monkeypatch.setattr(S, "tensorrt_version", lambda: "10.9.0")
    chosen = S.plan("tensorrt:1", "fp16", [S.TENSORRT, S.CUDA, S.CPU], VARIANTS, "f" * 64,
                    RANGES, trt_cache_root=str(tmp_path))
    (trt, options), (cuda, cuda_options), cpu = chosen.providers
    assert (trt, cuda, cpu) == (S.TENSORRT, S.CUDA, S.CPU)
    assert cuda_options == {"device_id": 1}
    assert options["device_id"] == 1 and options["trt_fp16_enable"] is True
    assert options["trt_engine_cache_enable"] is True and options["trt_timing_cache_enable"] is True
    cache = S.tensorrt_cache_dir("f" * 64, "NVIDIA H200", "10.9.0", str(tmp_path))
    assert options["trt_engine_cache_path"] == options["trt_timing_cache_path"] == str(cache)
    assert cache.parent == tmp_path
    # engines are keyed by graph, GPU model and TensorRT version
    assert len({S.tensorrt_cache_dir(*key, str(tmp_path)) for key in (
        ("f" * 64, "NVIDIA H200", "10.9.0"), ("e" * 64, "NVIDIA H200", "10.9.0"),
        ("f" * 64, "NVIDIA L4", "10.9.0"), ("f" * 64, "NVIDIA H200", "10.8.0"))}) == 4
    assert options["trt_profile_min_shapes"] == (
        "input_ids:1x4,attention_mask:1x4,marker_pos:1x2,marker_mask:1x2,qtype:1")
    assert options["trt_profile_opt_shapes"] == (
        "input_ids:8x256,attention_mask:8x256,marker_pos:8x4,marker_mask:8x4,qtype:8")
    assert options["trt_profile_max_shapes"] == (
        "input_ids:64x512,attention_mask:64x512,marker_pos:64x64,marker_mask:64x64,qtype:64")
    fp32 = S.plan("tensorrt", "fp32", [S.TENSORRT, S.CPU], VARIANTS, "f" * 64, RANGES)
    assert fp32.providers[0][1]["trt_fp16_enable"] is False


def test_a_failing_accelerator_falls_back_with_one_warning(monkeypatch, bundles):
    import onnxruntime as ort

    real = ort.InferenceSession
    attempts = []

    def session(path, sess_options=None, providers=None, **kwargs):
        attempts.append((providers, kwargs))
        if providers != [S.CPU]:
            raise RuntimeError("CUDA driver version is insufficient")
        return real(path, sess_options=sess_options, providers=providers, **kwargs)

    monkeypatch.setattr(ort, "InferenceSession", session)
    monkeypatch.setattr(ort, "get_available_providers", lambda: [S.CUDA, S.CPU])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        agent = laya_edge.load(str(bundles["minilm"]), device="cuda:1")
    messages = [str(w.message) for w in caught if "falling back" in str(w.message)]
    assert messages == ["laya ONNX: CUDAExecutionProvider failed to initialise (RuntimeError: "
                        "CUDA driver version is insufficient); falling back to "
                        "CPUExecutionProvider (fp32)."]
    info = agent.runtime_info()
    assert info["device"] == "cpu" and info["providers"] == [S.CPU]
    assert info["device_id"] == 1
    assert any("CUDAExecutionProvider failed to initialise" in reason
               for reason in info["reasons"])
    # onnxruntime's own fallback (CUDA without the options, printing to stdout) is off; the CPU
    # session leaves SkipLayerNormFusion off, the CUDA one would have kept it
    assert attempts[0] == ([(S.CUDA, {"device_id": 1}), S.CPU], {"enable_fallback": 0})
    assert attempts[-1] == ([S.CPU], {"enable_fallback": 0,
                                      "disabled_optimizers": ["SkipLayerNormFusion"]})


@pytest.mark.parametrize("device, skipped", [
    ("tensorrt", [S.TENSORRT, S.CUDA]), ("cuda", [S.CUDA])])
def test_the_fallback_chain_on_real_sessions(fp16_bundle, monkeypatch, tmp_path, device, skipped):
    """As if this CPU onnxruntime offered CUDA and TensorRT: each accelerator session comes up
    without its provider (onnxruntime leaves out what it cannot run), so the chain walks on to
    the CPU with one warning per step. The CPU runs the fp32 graph, not the fp16 one planned
    for the GPU, answers as a CPU fp32 agent does, and runtime_info says what runs."""
    import onnxruntime as ort

    monkeypatch.setattr(ort, "get_available_providers", lambda: [S.TENSORRT, S.CUDA, S.CPU])
    cache_root = tmp_path / "not" / "yet" / "there"
    monkeypatch.setenv("LAYA_EDGE_TRT_CACHE", str(cache_root))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        agent = laya_edge.load(str(fp16_bundle), device=device)
    ours = [str(w.message) for w in caught if str(w.message).startswith("laya ONNX:")]
    assert [message.split()[2] for message in ours] == skipped
    assert all("was not enabled by onnxruntime" in message for message in ours)
    assert ours[-1].endswith("falling back to CPUExecutionProvider (fp32).")
    info = agent.runtime_info()
    assert (info["device"], info["precision"], info["providers"]) == ("cpu", "fp32", [S.CPU])
    assert info["graph"].endswith("laya.onnx")
    # TensorRT creates only the last directory of its cache path: the tree was made first
    assert cache_root.is_dir() == (device == "tensorrt")
    reference = quiet_load(fp16_bundle, device="cpu", precision="fp32")
    assert agent.predict_batch(STATES, QUESTIONS) == reference.predict_batch(STATES, QUESTIONS)


def test_runtime_info_on_this_machine(bundles):
    info = quiet_load(bundles["modernbert-tiny"], device="cpu").runtime_info()
    assert info["device"] == "cpu" and info["precision"] == "fp32"
    assert info["providers"] == [S.CPU] and info["graph"].endswith("laya.onnx")
    assert info["available_variants"] == ["fp32"]
    assert isinstance(info["onnxruntime_dual_install"], bool)
    json.dumps(info)  # serialisable, for logs and health endpoints


def test_io_binding_run_gives_the_plain_run_answers(bundles):
    agent = quiet_load(bundles["modernbert-tiny"])
    from laya_edge.encode import collate, encode_rows
    from laya_edge.questions import parse_questions

    parsed = parse_questions(QUESTIONS)
    heads = {qid: agent.encoder.head(q, agent.head_max_len) for qid, q in parsed.items()}
    rows = [row for rows in encode_rows(agent.encoder, STATES, parsed, heads, agent.max_len,
                                        agent.head_max_len) for row in rows]
    batch = collate(rows, agent.encoder.pad.id)
    plain = run(agent.session, batch)
    # inputs copied to the device as OrtValues, outputs bound there: on the CPU device here
    bound = run(agent.session, batch, ("cpu", 0))
    for a, b in zip(plain, bound):
        np.testing.assert_array_equal(a, b)


def test_router_passes_device_and_precision_to_the_agents_it_builds(monkeypatch, tmp_path):
    import laya_edge.onnx_agent as onnx_agent

    built = []

    class StandIn:
        def __init__(self, repo, **kwargs):
            built.append(kwargs)

    monkeypatch.setattr(onnx_agent, "ONNXAgent", StandIn)
    laya_edge.Router(models={"english": str(tmp_path)}, device="cuda:0",
                     precision="fp16").load("english")
    laya_edge.Router(models={"english": str(tmp_path)}).load("english")
    assert built == [{"device": "cuda:0", "token": None, "subfolder": None, "precision": "fp16"},
                     {"device": None, "token": None, "subfolder": None}]


def test_manifest_variant_files_are_integrity_checked(fp16_bundle, tmp_path):
    copy = tmp_path / "bundle"
    shutil.copytree(fp16_bundle, copy)
    graph = copy / "laya.fp16.onnx"
    original = graph.read_bytes()
    graph.write_bytes(original[:-1] + bytes([original[-1] ^ 1]))
    with pytest.raises(ValueError, match="SHA-256 mismatch for 'laya.fp16.onnx'"):
        quiet_load(copy, precision="fp16")
    # only the graph about to be parsed is checked: the fp32 one still loads
    assert quiet_load(copy, precision="fp32").runtime_info()["precision"] == "fp32"
    graph.write_bytes(original)
    assert quiet_load(copy, precision="fp16").runtime_info()["precision"] == "fp16"
