"""The int8 variant's mixed-precision search, held-out verification and speed check (issue 33).

The planted-outlier checkpoint is the generated ModernBERT-style one with one feature of one
layer's FFN input made huge (its norm weight x1000) and unused (the FFN's weights for it zero):
fp32 computes exactly what it did without that feature, but dynamic int8 quantises that FFN's
whole input with one scale, so every other feature rounds away. The search has to find that
node, and keep it fp32, by measurement.
"""
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from agent_support import edge_agent
from laya_edge import session as S
from laya_edge.bundle_format import read_manifest
from laya_edge.bundle_report import describe_bundle, summary_lines
from laya_edge.export import ExportOptions, Progress, export_bundle
from laya_edge.export import __main__ as cli
from laya_edge.export import int8_search, int8_variant, speed
from laya_edge.export.probes import held_out_cases, probe_cases
from laya_edge.export.verify import THRESHOLDS

OUTLIER_LAYER, OUTLIER_FEATURE = 1, 5
QUESTIONS = {"dept": {"type": "choice", "instructions": "Which team?",
                      "criteria": ["billing", "technical", "sales"]}}


@pytest.fixture(scope="module")
def outlier_bundle(checkpoints, tmp_path_factory):
    from safetensors.numpy import load_file, save_file

    root = tmp_path_factory.mktemp("outlier")
    checkpoint = Path(shutil.copytree(checkpoints["modernbert-tiny"], root / "checkpoint"))
    weights = load_file(str(checkpoint / "model.safetensors"))
    prefix = f"encoder.layers.{OUTLIER_LAYER}.mlp"
    weights[f"{prefix}_norm.weight"][OUTLIER_FEATURE] = 1000.0
    weights[f"{prefix}.Wi.weight"][:, OUTLIER_FEATURE] = 0.0
    save_file(weights, str(checkpoint / "model.safetensors"), metadata={"format": "pt"})
    out = root / "bundle"
    export_bundle(ExportOptions(source=str(checkpoint), out=out, exporter="torchscript",
                                precisions=("fp32", "int8"), allow_slow_int8=True),
                  Progress(quiet=True))
    return out


def _graph(path):
    import onnx

    return onnx.load(str(path))


def _planted_nodes(graph) -> list:
    """The weight multiplications whose weight has an all-zero input row: the planted one."""
    constants = {init.name: init for init in graph.graph.initializer}
    from onnx import numpy_helper

    found = []
    for node in graph.graph.node:
        if node.op_type == "MatMul" and len(node.input) > 1 and node.input[1] in constants:
            weight = numpy_helper.to_array(constants[node.input[1]])
            if weight.ndim == 2 and not weight[OUTLIER_FEATURE].any():
                found.append(node.name)
    return found


def test_the_search_keeps_the_planted_outlier_node_fp32(outlier_bundle):
    variant = read_manifest(outlier_bundle)["variants"]["int8"]
    search = variant["int8_search"]
    planted = _planted_nodes(_graph(outlier_bundle / "laya.onnx"))
    assert len(planted) == 1
    kept = [entry["node"] for entry in search["kept_fp32"]]
    # measured the most harmful alone, so kept first
    assert kept[0] == planted[0]
    assert search["kept_fp32"][0]["alone_max_abs_p"] > THRESHOLDS["int8"]["max_abs_p"]
    # the manifest's list is what the graph holds: those nodes are plain fp32 MatMuls, every
    # other quantisable one was quantised
    int8 = _graph(outlier_bundle / "laya.int8.onnx")
    plain = {node.name for node in int8.graph.node if node.op_type in int8_search.QUANTISABLE_OPS}
    assert set(kept) <= plain
    quantisable = {name for name, _ in int8_search.quantisable_nodes(outlier_bundle / "laya.onnx")}
    assert len(quantisable) == search["quantisable_nodes"]
    assert not (quantisable - set(kept)) & plain
    assert variant["optimisations"][-1] == (f"{len(kept)} of {len(quantisable)} weight "
                                            "multiplications kept fp32 (sensitivity search)")


def test_the_chosen_count_is_the_fewest_accepted(outlier_bundle):
    search = read_manifest(outlier_bundle)["variants"]["int8"]["int8_search"]
    curve = {point["kept_fp32"]: point for point in search["curve"]}
    chosen = len(search["kept_fp32"])
    assert curve[chosen]["accepted"] and not curve[0]["accepted"]
    assert not any(point["accepted"] for count, point in curve.items() if count < chosen)
    # the count was bisected down to one above a count that was not accepted
    assert chosen - 1 in curve and not curve[chosen - 1]["accepted"]
    limit = int8_variant.SEARCH_HEADROOM * THRESHOLDS["int8"]["max_abs_p"]
    assert curve[chosen]["max_abs_p"] <= limit < curve[chosen - 1]["max_abs_p"] or \
        curve[chosen - 1]["decisive_agreement"] < THRESHOLDS["int8"]["argmax_agreement"]


def test_the_published_report_is_on_held_out_probes(outlier_bundle):
    report = read_manifest(outlier_bundle)["variants"]["int8"]["verification"]
    assert report["probes"] == "held-out" and report["passed"] is True
    assert report["search"]["passed"] is True
    assert report["max_abs_p"] <= THRESHOLDS["int8"]["max_abs_p"]
    assert all(flip["case"].startswith("held-out-") for flip in report["disagreements"])
    assert report["worst"]["case"].startswith("held-out-")


def test_held_out_probes_share_no_state_with_the_search_probes():
    for max_len in (128, 512):
        search, held = probe_cases(max_len, 0), held_out_cases(max_len, 0)
        assert [case.name for case in held] == [f"held-out-{case.name}" for case in search]
        seen = {json.dumps(state, sort_keys=True) for case in search for state in case.states}
        fresh = [json.dumps(state, sort_keys=True) for case in held for state in case.states]
        assert fresh and not seen & set(fresh)


def test_the_speed_is_measured_and_recorded(outlier_bundle):
    timing = read_manifest(outlier_bundle)["variants"]["int8"]["speed"]
    assert timing["rounds"] == speed.ROUNDS
    assert timing["speedup"] > 0 and timing["fp32_ms_per_round"] > 0
    assert timing["ms_per_round"] > 0 and set(timing["cpu"]) == {"model", "avx2", "vnni", "amx"}


def _slow(*_args, **_kwargs):
    return {"speedup": 0.8, "rounds": 1, "fp32_ms_per_round": 1.0, "ms_per_round": 1.25,
            "cpu": speed.cpu_description()}


def test_a_slow_int8_is_refused_unless_allowed(checkpoints, tmp_path, monkeypatch, capsys):
    """Thresholds relaxed so the first dynamic graph passes (no search needed here); the timing
    says it is slower than fp32: the export fails with what to do, and writes nothing."""
    monkeypatch.setitem(THRESHOLDS, "int8", {"argmax_agreement": 0.0, "max_abs_p": 1.0})
    monkeypatch.setattr(speed, "speedup_over", _slow)
    out = tmp_path / "slow"
    with pytest.raises(int8_variant.SlowVariantError, match="0.80x fp32.*--allow-slow-int8"):
        export_bundle(ExportOptions(source=str(checkpoints["modernbert-tiny"]), out=out,
                                    exporter="torchscript", precisions=("fp32", "int8")),
                      Progress(quiet=True))
    assert not out.exists() and not list(tmp_path.iterdir())
    status = cli.main([str(checkpoints["modernbert-tiny"]), "--out", str(out), "--quiet",
                       "--exporter", "torchscript", "--precision", "int8"])
    assert status == 1 and "--allow-slow-int8" in capsys.readouterr().err
    assert cli.main([str(checkpoints["modernbert-tiny"]), "--out", str(out), "--quiet",
                     "--exporter", "torchscript", "--precision", "int8", "--json",
                     "--allow-slow-int8"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["variants"]["int8"]["speed"]["speedup"] == 0.8
    assert read_manifest(out)["variants"]["int8"]["speed"]["speedup"] == 0.8
    agent = edge_agent(out)
    info = agent.runtime_info()
    assert info["precision"] == "fp32"
    assert "int8 variant was timed slower than fp32" in " ".join(info["reasons"])
    assert edge_agent(out, precision="int8").runtime_info()["precision"] == "int8"
    described = describe_bundle(out)
    assert described["variants"]["int8"]["speedup_vs_fp32"] == 0.8
    assert described["would_run"]["precision"] == "fp32"
    assert any("0.80x fp32 at export" in line for line in summary_lines(described))
    assert agent.system_one("charged twice", QUESTIONS)["answers"]["dept"]["type"] == "choice"


def test_weight_only_int8_skips_dynamic_quantisation_and_is_not_refused_for_speed(
        checkpoints, tmp_path, monkeypatch, capsys):
    """Asked for weight-only int8 (for size), the export builds no dynamic graph even where one
    would pass (thresholds relaxed as above), verifies the weight-only one, records its timing
    and ships it although it is slower than fp32."""
    import onnx

    monkeypatch.setitem(THRESHOLDS, "int8", {"argmax_agreement": 0.0, "max_abs_p": 1.0})
    monkeypatch.setattr(speed, "speedup_over", _slow)

    def never(*_args, **_kwargs):
        raise AssertionError("dynamic int8 was built although weight-only was asked for")

    monkeypatch.setattr(int8_variant, "to_int8", never)
    out = tmp_path / "weight-only"
    assert cli.main([str(checkpoints["modernbert-tiny"]), "--out", str(out), "--quiet",
                     "--exporter", "torchscript", "--precision", "int8", "--json",
                     "--int8-weight-only"]) == 0
    assert json.loads(capsys.readouterr().out)["variants"]["int8"]["speed"]["speedup"] == 0.8
    variant = read_manifest(out)["variants"]["int8"]
    assert variant["optimisations"][-1].startswith("weight-only int8")
    assert variant["verification"]["probes"] == "held-out"
    assert variant["speed"]["speedup"] == 0.8 and "int8_search" not in variant
    ops = {node.op_type for node in
           onnx.load(str(out / "laya.int8.onnx"), load_external_data=False).graph.node}
    assert "MatMulNBits" in ops and not ops & {"DynamicQuantizeMatMul", "MatMulInteger"}


def test_auto_precision_passes_over_a_slow_int8_only_on_the_cpu(tmp_path):
    variants = {"fp32": tmp_path / "laya.onnx", "int8": tmp_path / "laya.int8.onnx",
                "fp16": tmp_path / "laya.fp16.onnx"}
    fast = S.plan("cpu", None, [S.CPU], variants)
    slow = S.plan("cpu", None, [S.CPU], variants, slower_than_fp32=frozenset({"int8"}))
    assert (fast.precision, slow.precision) == ("int8", "fp32")
    only_int8 = S.plan("cpu", None, [S.CPU], {"int8": variants["int8"]},
                       slower_than_fp32=frozenset({"int8"}))
    assert only_int8.precision == "int8"  # nothing else to run
    gpu = S.plan("cuda", None, [S.CUDA, S.CPU], variants, slower_than_fp32=frozenset({"int8"}))
    assert gpu.precision == "fp16" and gpu.fallback.precision == "fp32"


def test_slower_than_fp32_reads_the_manifest_timing():
    from laya_edge.bundle_format import slower_than_fp32

    manifest = {"variants": {"fp32": {}, "int8": {"speed": {"speedup": 1.0}},
                             "fp16": {"speed": {"speedup": 1.7}}}}
    assert slower_than_fp32(manifest) == {"int8"}
    manifest["variants"]["int8"]["speed"]["speedup"] = 1.3
    assert slower_than_fp32(manifest) == frozenset()
    assert slower_than_fp32(None) == slower_than_fp32({"variants": {"int8": {}}}) == frozenset()


def test_the_count_schedule_keeps_one_node_quantised():
    assert int8_search._counts_to_try(1) == []
    for total in (2, 3, 28, 100):
        counts = int8_search._counts_to_try(total)
        assert counts[0] == 1 and counts[-1] == total - 1
        assert np.all(np.diff(counts) > 0) and len(counts) <= total.bit_length() + 1


def test_the_search_keeps_the_fewest_most_harmful_nodes_and_cleans_up(tmp_path):
    """The search's logic on a stand-in graph whose drift is the sum of what each quantised
    node adds: three harmful nodes among ten, the third too small to fail the bar alone but
    enough to miss the headroom."""
    harm = {f"n{i}": 0.001 for i in range(10)} | {"n3": 0.2, "n7": 0.1, "n1": 0.03}
    nodes = [(name, "MatMul") for name in harm]

    def build(target, keep_fp32):
        target.write_text(json.dumps(sorted(set(harm) - set(keep_fp32))))
        return [f"{len(keep_fp32)} kept"]

    def evaluate(graph):
        drift = sum(harm[name] for name in json.loads(graph.read_text()))
        return {"max_abs_p": drift, "decisive_agreement": 1.0, "passed": drift <= 0.05}

    outcome = int8_search.search_mixed_int8(nodes, tmp_path, "graph.onnx", build, evaluate,
                                            lambda report: report["max_abs_p"] <= 0.025,
                                            lambda _message: None)
    assert [entry["node"] for entry in outcome.kept_fp32] == ["n3", "n7", "n1"]
    assert outcome.kept_fp32[0]["alone_max_abs_p"] == 0.2
    assert outcome.optimisations == ["3 kept"] and outcome.report["max_abs_p"] < 0.025
    assert [point["kept_fp32"] for point in outcome.curve] == sorted(
        point["kept_fp32"] for point in outcome.curve)
    assert [p["accepted"] for p in outcome.curve if p["kept_fp32"] in (2, 3)] == [False, True]
    assert list(tmp_path.iterdir()) == [outcome.graph.parent]  # every other attempt removed
    assert outcome.record()["quantisable_nodes"] == 10


def test_big_graphs_are_measured_in_runs_of_consecutive_nodes(tmp_path):
    """Past NODES_MEASURED_ALONE nodes, one build per run of consecutive nodes, not per node: the
    harmful node's run is ranked first as a whole, and the count search still stops inside it."""
    total = int8_search.NODES_MEASURED_ALONE + 52
    harm = {f"n{i:03d}": 0.0001 for i in range(total)} | {"n057": 0.2}
    nodes = [(name, "MatMul") for name in harm]
    builds = []

    def build(target, keep_fp32):
        builds.append(len(keep_fp32))
        target.write_text(json.dumps(sorted(set(harm) - set(keep_fp32))))
        return []

    def evaluate(graph):
        drift = sum(harm[name] for name in json.loads(graph.read_text()))
        return {"max_abs_p": drift, "decisive_agreement": 1.0, "passed": drift <= 0.05}

    length = int8_search.run_length(total)
    assert length > 1 and int8_search.run_length(int8_search.NODES_MEASURED_ALONE) == 1
    outcome = int8_search.search_mixed_int8(nodes, tmp_path, "graph.onnx", build, evaluate,
                                            lambda report: report["max_abs_p"] <= 0.025,
                                            lambda _message: None)
    runs = -(-total // length)
    assert builds[:runs] == [total - length] * (runs - 1) + [total - (total - 1) % length - 1]
    assert len(builds) < runs + total.bit_length() * 2  # never one build per node
    run_start = 57 - 57 % length
    kept = [entry["node"] for entry in outcome.kept_fp32]
    assert kept == [f"n{i:03d}" for i in range(run_start, 58)]  # graph order up to the culprit
    assert {entry["measured_with"] for entry in outcome.kept_fp32} == {length}
    assert outcome.kept_fp32[0]["alone_max_abs_p"] == pytest.approx(0.2 + 0.0001 * (length - 1))
    assert outcome.record()["run_length"] == length and "run of" in outcome.record()["method"]
