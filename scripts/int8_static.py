#!/usr/bin/env python3
"""Static QDQ int8 against dynamic int8 on one checkpoint: drift and speed, fully quantised.

The exporter's int8 candidates are dynamic (docs/export.md, "int8"). Static QDQ fixes each
activation's range ahead of time from calibration data, which can skip the per-call range
measurement and clip rare outliers; this script measures whether either helps. On the
checkpoint's fused fp32 graph it builds, all with per-channel 7-bit weights:

- ``dynamic``: the exporter's dynamic int8 of every weight multiplication (`to_int8`);
- ``static, min-max``: onnxruntime's `quantize_static` on the weight `MatMul`s, u8 activation
  ranges the min and max seen on the search probes' batches;
- ``static, percentile P``: the same with each range cut to the (100 - P)th and Pth percentiles
  of the values seen, clipping the rarest.

The static graphs leave each `MatMul`'s output in float (onnxruntime fuses the pair into
`MatMulIntegerToFloat`, as dynamic int8 does), and their attention and `Gemm` nodes are then
quantised dynamically, as in the dynamic graph, so the graphs differ only in how the
multiplications' activation ranges are found. Each is verified on the search and the held-out
probes and timed against fp32 (the exporter's interleaved timing).

    python scripts/int8_static.py CHECKPOINT --work DIR [--percentile 99.99]

Writes DIR/int8-static.json and prints a Markdown table; state the CPU with the figures.
"""
from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from int8_tradeoff import (MEASURED_COLUMNS, fp32_bundle, markdown_table,  # noqa: E402
                           measured_cells, probe_runs, publish)

PER_CHANNEL, REDUCE_RANGE = True, True


def log(message: str) -> None:
    print(f"[int8-static] {message}", file=sys.stderr, flush=True)


def weight_matmul_inputs(model: Any) -> List[str]:
    """The activation input of every `MatMul` whose weight is a constant, in graph order."""
    constants = {init.name for init in model.graph.initializer}
    seen: List[str] = []
    for node in model.graph.node:
        if (node.op_type == "MatMul" and node.input[1] in constants
                and node.input[0] not in seen):
            seen.append(node.input[0])
    return seen


def graph_feeds(batches: Sequence[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """The graph's inputs of each probe batch (a batch holds more than the graph reads)."""
    from laya_edge.bundle_format import GRAPH_INPUTS

    return [{name: batch[name] for name in GRAPH_INPUTS} for batch in batches]


def activation_ranges(graph: Path, work: Path, feeds: Sequence[Dict[str, Any]],
                      percentile: float) -> Dict[str, Tuple[float, float]]:
    """`{tensor: (low, high)}`: the (100 - percentile)th and percentile-th values each weight
    `MatMul`'s activation input takes on `feeds`, run through the fp32 graph."""
    import onnx

    from laya_edge.export.verify import cpu_session

    model = onnx.load(str(graph))
    names = weight_matmul_inputs(model)
    model.graph.output.extend(onnx.helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT,
                                                                 None) for name in names)
    probe = work / "activations" / "laya.onnx"
    probe.parent.mkdir(parents=True, exist_ok=True)
    onnx.save_model(model, str(probe), save_as_external_data=True,
                    all_tensors_to_one_file=True, location="laya.onnx.data")
    session = cpu_session(probe)
    values: Dict[str, List[np.ndarray]] = {name: [] for name in names}
    for feed in feeds:
        outputs = session.run(names, feed)
        for name, value in zip(names, outputs):
            values[name].append(value.ravel())
    shutil.rmtree(probe.parent)
    ranges = {}
    for name, parts in values.items():
        seen = np.concatenate(parts)
        low, high = np.percentile(seen, [100.0 - percentile, percentile])
        ranges[name] = (float(low), float(high))
    return ranges


class _Feeds:
    """onnxruntime's calibration data reader over the graph feeds of probe batches."""

    def __init__(self, feeds: Sequence[Dict[str, Any]]) -> None:
        self._feeds = iter(feeds)

    def get_next(self) -> Optional[Dict[str, Any]]:
        return next(self._feeds, None)


def to_static_int8(graph: Path, target: Path, feeds: Sequence[Dict[str, Any]],
                   external: bool,
                   ranges: Optional[Dict[str, Tuple[float, float]]] = None) -> None:
    """Static QDQ of the weight `MatMul`s (min-max calibration on `feeds`, or `ranges` where
    given), outputs left in float; then the exporter's dynamic int8 of what is left (attention,
    `Gemm`: a `MatMul` behind a dequantisation no longer has a constant weight)."""
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, \
        quantize_static

    from laya_edge.export.precision import quiet_quantiser, to_int8

    static = target.with_name("static.onnx")
    overrides = {name: [{"rmin": np.float32(low), "rmax": np.float32(high)}]
                 for name, (low, high) in (ranges or {}).items()}
    with quiet_quantiser():
        quantize_static(str(graph), str(static), _Feeds(feeds),
                        quant_format=QuantFormat.QDQ, op_types_to_quantize=["MatMul"],
                        per_channel=PER_CHANNEL, reduce_range=REDUCE_RANGE,
                        activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
                        calibrate_method=CalibrationMethod.MinMax,
                        use_external_data_format=external,
                        extra_options={"MatMulConstBOnly": True,
                                       "OpTypesToExcludeOutputQuantization": ["MatMul"],
                                       "TensorQuantOverrides": overrides})
    to_int8(static, target, PER_CHANNEL, REDUCE_RANGE, False, external)
    for leftover in (static, static.with_name("static.onnx.data")):
        leftover.unlink(missing_ok=True)


def measure(checkpoint: Path, work: Path, percentile: float) -> Dict[str, Any]:
    from laya_edge.bundle_format import GRAPH, read_manifest
    from laya_edge.export import speed
    from laya_edge.export.candidates import attempt_path, discard, verified
    from laya_edge.export.precision import to_int8

    bundle = fp32_bundle(checkpoint, work / "fp32")
    graph = bundle / GRAPH
    external = bool(read_manifest(bundle)["graph"].get("external_data"))
    reference, search_runs, held_runs = probe_runs(checkpoint)
    calibration = graph_feeds([run.batch for run in search_runs])
    scratch = work / "attempts"
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    log(f"activation ranges at the {percentile}th percentile")
    clipped = activation_ranges(graph, scratch, calibration, percentile)
    builders: List[Tuple[str, Callable[[Path], Any]]] = [
        ("dynamic", lambda target: to_int8(graph, target, PER_CHANNEL, REDUCE_RANGE, False,
                                           external)),
        ("static, min-max", lambda target: to_static_int8(graph, target, calibration,
                                                          external)),
        (f"static, percentile {percentile:g}",
         lambda target: to_static_int8(graph, target, calibration, external, clipped))]
    batches = speed.timing_batches(search_runs)
    rows = []
    for label, build in builders:
        candidate = attempt_path(scratch, "laya.int8.onnx")
        build(candidate)
        searched = verified(candidate, "int8", search_runs, reference, False)
        held = verified(candidate, "int8", held_runs, reference, False)
        timing = speed.speedup_over(graph, candidate, batches)
        rows.append({"graph": label, "ops": _op_counts(candidate),
                     "search": {k: searched[k] for k in ("decisive_agreement", "max_abs_p")},
                     "held_out": {k: held[k] for k in ("decisive_agreement", "max_abs_p",
                                                       "passed")},
                     "speedup": timing["speedup"]})
        log(f"{label}: held-out agreement {held['decisive_agreement']:.3f}, max |dp| "
            f"{held['max_abs_p']:.3f}, {timing['speedup']:.2f}x fp32")
        discard(candidate)
    shutil.rmtree(scratch, ignore_errors=True)
    return {"checkpoint": str(checkpoint), "percentile": percentile,
            "weights": {"per_channel": PER_CHANNEL, "reduce_range": REDUCE_RANGE},
            "cpu": speed.cpu_description(), "rows": rows}


def _op_counts(graph: Path) -> Dict[str, int]:
    """How many of each quantisation operator the graph holds (what the row measured)."""
    import onnx

    model = onnx.load(str(graph), load_external_data=False)
    counted = ("QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "MatMulInteger",
               "QAttention", "MatMul")
    return {op: sum(node.op_type == op for node in model.graph.node) for op in counted}


def table(result: Dict[str, Any]) -> str:
    return markdown_table(("graph",) + MEASURED_COLUMNS,
                          [[row["graph"]] + measured_cells(row) for row in result["rows"]])


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint", type=Path)
    parser.add_argument("--work", type=Path, required=True,
                        help="scratch directory; the fp32 bundle is kept there for reruns")
    parser.add_argument("--percentile", type=float, default=99.99,
                        help="the clipped ranges' upper percentile (default 99.99)")
    args = parser.parse_args(argv)
    if not 50.0 < args.percentile <= 100.0:
        parser.error("argument --percentile: must be above 50 and at most 100")
    from laya_edge.export.logs import progress_on_stderr

    with progress_on_stderr("laya_edge.export", "laya_edge.export"):
        result = measure(args.checkpoint, args.work, args.percentile)
    publish(result, args.work / "int8-static.json")
    print(table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
