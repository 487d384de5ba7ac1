"""scripts/int8_static.py, the static QDQ measurement behind docs/export.md ("int8"): its static
graphs quantise the input of every weight multiplication, with the ranges it calibrated, so
the figures it prints compare what they claim to compare."""
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from modules import load_file

ROOT = Path(__file__).resolve().parents[1]
int8_static = load_file(ROOT / "scripts" / "int8_static.py", "int8_static")
KIND = "modernbert-tiny"


@pytest.fixture(scope="module")
def calibration(checkpoints, bundles):
    """The fp32 graph, and the search probes' feeds the script calibrates on."""
    _, search_runs, _ = int8_static.probe_runs(checkpoints[KIND])
    return bundles[KIND] / "laya.onnx", int8_static.graph_feeds([run.batch for run in search_runs])


def _quantize_scales(graph: Path):
    """`{activation: scale}` of each QuantizeLinear in `graph`, and the graph itself."""
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(graph))
    constants = {init.name: numpy_helper.to_array(init) for init in model.graph.initializer}
    return {node.input[0]: float(constants[node.input[1]]) for node in model.graph.node
            if node.op_type == "QuantizeLinear"}, model


def test_every_weight_multiplication_reads_a_quantised_input(calibration, tmp_path):
    import onnx

    graph, feeds = calibration
    target = tmp_path / "static" / "laya.int8.onnx"
    target.parent.mkdir()
    int8_static.to_static_int8(graph, target, feeds, external=False)
    scales, model = _quantize_scales(target)
    fp32_inputs = int8_static.weight_matmul_inputs(onnx.load(str(graph)))
    assert fp32_inputs and sorted(scales) == sorted(fp32_inputs)
    produced_by = {out: node.op_type for node in model.graph.node for out in node.output}
    weights = [node for node in model.graph.node if node.op_type == "MatMul"
               and produced_by.get(node.input[1]) == "DequantizeLinear"]
    assert len(weights) >= len(fp32_inputs)
    # no float weight multiplication is left: the rest went to the dynamic pass
    assert int8_static.weight_matmul_inputs(model) == []
    assert sorted(path.name for path in target.parent.iterdir()) == ["laya.int8.onnx"]


def test_percentile_ranges_clip_inside_min_max_and_set_the_scales(calibration, tmp_path):
    graph, feeds = calibration
    full = int8_static.activation_ranges(graph, tmp_path, feeds, 100.0)
    clipped = int8_static.activation_ranges(graph, tmp_path, feeds, 99.0)
    assert sorted(full) == sorted(clipped)
    for name, (low, high) in clipped.items():
        assert full[name][0] <= low <= high <= full[name][1]
    assert any(clipped[name] != full[name] for name in full)
    target = tmp_path / "clipped" / "laya.int8.onnx"
    target.parent.mkdir()
    int8_static.to_static_int8(graph, target, feeds, external=False, ranges=clipped)
    scales, _ = _quantize_scales(target)
    for name, (low, high) in clipped.items():  # u8, asymmetric, the range widened to hold 0
        expected = (max(high, 0.0) - min(low, 0.0)) / 255.0
        assert scales[name] == pytest.approx(expected, rel=1e-5)


def test_the_script_measures_the_three_graphs(checkpoints, bundles, tmp_path, capsys):
    work = tmp_path / "work"
    shutil.copytree(bundles[KIND], work / "fp32")  # the script exports only where none is
    assert int8_static.main([str(checkpoints[KIND]), "--work", str(work),
                             "--percentile", "99.9"]) == 0
    result = json.loads((work / "int8-static.json").read_text())
    rows = {row["graph"]: row for row in result["rows"]}
    assert list(rows) == ["dynamic", "static, min-max", "static, percentile 99.9"]
    assert rows["dynamic"]["ops"]["QuantizeLinear"] == 0
    assert rows["dynamic"]["ops"]["DynamicQuantizeLinear"] > 0
    for label in ("static, min-max", "static, percentile 99.9"):
        assert rows[label]["ops"]["QuantizeLinear"] > 0
    for row in rows.values():
        held = row["held_out"]
        assert 0.0 <= held["decisive_agreement"] <= 1.0 and np.isfinite(held["max_abs_p"])
        assert row["speedup"] > 0
    printed = capsys.readouterr().out
    assert all(f"| {label} | {row['held_out']['decisive_agreement']:.3f} |" in printed
               for label, row in rows.items())
    assert not (work / "attempts").exists()
    with pytest.raises(SystemExit):
        int8_static.main([str(checkpoints[KIND]), "--work", str(work), "--percentile", "40"])
