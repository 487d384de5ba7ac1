"""Reduced-precision variants of the fp32 graph: fp16 (accelerators) and int8 (CPU).

Each variant is a separate graph file in the bundle, verified against the PyTorch fp32 model
like the fp32 graph itself; a variant that misses its thresholds fails the export.
"""
from __future__ import annotations

import io
import logging
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any, List, Set, Tuple

from ..bundle import sidecar

VARIANT_FILES = {"fp16": "laya.fp16.onnx", "int8": "laya.int8.onnx"}
PRECISIONS = ("fp32", "fp16", "int8")
# Kept in fp32 in the fp16 graph: normalisation and softmax statistics overflow or lose the
# small differences the decision rests on.
FP16_KEEP_OPS = ["LayerNormalization", "SimplifiedLayerNormalization", "Softmax", "TopK"]


def parse_precisions(text: str) -> Tuple[str, ...]:
    """`"fp16,int8"` -> `("fp32", "fp16", "int8")`: fp32 is always kept as the reference."""
    wanted = [part.strip().lower() for part in text.split(",") if part.strip()]
    unknown = [part for part in wanted if part not in PRECISIONS]
    if unknown:
        raise ValueError(f"unknown precision {unknown[0]!r}; choose from {list(PRECISIONS)}")
    return tuple(p for p in PRECISIONS if p == "fp32" or p in wanted)


def parse_ship(text: str, built: Tuple[str, ...]) -> Tuple[str, ...]:
    """`--ship int8` -> `("int8",)`: the built variants whose graphs go into the bundle.

    fp32 is still exported and verified (it is what the reduced variants are made from); leaving
    it out only keeps a device-sized bundle small.
    """
    wanted = [part.strip().lower() for part in text.split(",") if part.strip()]
    if not wanted:
        raise ValueError("name at least one variant to ship")
    missing = [part for part in wanted if part not in built]
    if missing:
        raise ValueError(f"{missing[0]!r} is not among the variants built ({list(built)}); add it "
                         "to --precision")
    return tuple(p for p in built if p in wanted)


def decision_head_nodes(model: Any) -> Set[str]:
    """Nodes computing on the question type: the decision head (head layers, scorer, act head).

    Found by data flow from the `qtype` input; shape computations are not followed, as the
    encoder reads the batch size from any input.
    """
    consumers: dict = {}
    for node in model.graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    head: Set[str] = set()
    pending = ["qtype"]
    while pending:
        for node in consumers.get(pending.pop(), []):
            if node.op_type not in ("Shape", "Size") and node.name not in head:
                head.add(node.name)
                pending.extend(node.output)
    return head


def to_fp16(source: Path, target: Path, external: bool) -> List[str]:
    """fp16 weights and compute, with fp32 inputs/outputs and fp32 normalisation and head."""
    import onnx
    from onnxruntime.transformers.float16 import convert_float_to_float16

    model = onnx.load(str(source))
    converted = convert_float_to_float16(model, keep_io_types=True, op_block_list=FP16_KEEP_OPS,
                                         node_block_list=sorted(decision_head_nodes(model)))
    onnx.save_model(converted, str(target), save_as_external_data=external,
                    all_tensors_to_one_file=True, location=sidecar(target.name))
    return ["fp16 conversion (onnxruntime.transformers.float16, keep_io_types), "
            f"fp32 kept for {', '.join(FP16_KEEP_OPS)} and the decision head"]


def to_int8(source: Path, target: Path, per_channel: bool, reduce_range: bool, embeddings: bool,
            external: bool) -> List[str]:
    """Dynamic int8 quantisation of the weight matrix multiplications, fused attention
    projections included (and optionally the embedding table, for size). `reduce_range` keeps
    weights to 7 bits, which avoids the saturating u8 x s8 multiply-add of CPUs without VNNI at a
    little resolution."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    operators = ["MatMul", "Gemm", "Attention"] + (["Gather"] if embeddings else [])
    quiet = logging.getLogger()
    level = quiet.level
    quiet.setLevel(logging.ERROR)  # the quantizer's "consider pre-processing" notice
    try:
        with redirect_stdout(io.StringIO()):
            quantize_dynamic(str(source), str(target), weight_type=QuantType.QInt8,
                             per_channel=per_channel, reduce_range=reduce_range,
                             op_types_to_quantize=operators,
                             extra_options={"MatMulConstBOnly": True},
                             use_external_data_format=external)
    finally:
        quiet.setLevel(level)
    return [f"dynamic int8 quantisation of {', '.join(operators)} weights "
            f"({'per-channel' if per_channel else 'per-tensor'}"
            f"{', 7-bit range' if reduce_range else ''})"]
