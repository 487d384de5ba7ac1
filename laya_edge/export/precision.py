"""Reduced-precision variants of the fp32 graph: fp16 (accelerators) and int8 (CPU).

Each variant is a separate graph file in the bundle, verified against the PyTorch fp32 model
like the fp32 graph itself; a variant that misses its thresholds fails the export.
"""
from __future__ import annotations

import io
from contextlib import contextmanager, redirect_stdout
from pathlib import Path
from typing import Any, Dict, Iterator, List, Sequence, Set, Tuple

from ..bundle_format import sidecar
from .attention_masks import masks_as_index
from .logs import third_party_quiet

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


@contextmanager
def quiet_quantiser() -> Iterator[None]:
    """onnxruntime's quantisers print progress and log notices ("consider pre-processing") that
    the export's own progress lines already cover: silence both while one runs."""
    with third_party_quiet(), redirect_stdout(io.StringIO()):
        yield


def to_int8(source: Path, target: Path, per_channel: bool, reduce_range: bool, embeddings: bool,
            external: bool, keep_fp32: Sequence[str] = ()) -> List[str]:
    """Dynamic int8 quantisation of the weight matrix multiplications, fused attention
    projections included, except the nodes named in `keep_fp32`; with `embeddings`, the
    embedding tables too, for size, in blocks of each row (quantise_embedding_rows).
    `reduce_range` keeps weights to 7 bits, which avoids the saturating u8 x s8 multiply-add of
    CPUs without VNNI at a little resolution.

    onnxruntime's own Gather quantisation is not used for the tables: one scale per table, every
    table, so the small ones added to every position (token types, Laya's question-type
    embedding) are rounded too. On the 11000-ticket demo model that alone moved probabilities
    by 0.18, whichever weight multiplications stayed fp32.

    Attention padding masks are handed to the quantised attention as `mask_index`
    (attention_masks), which onnxruntime's `QAttention` keeps; an attention with some other
    bias stays fp32.
    """
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    model = onnx.load(str(source))
    tables = quantise_embedding_rows(model) if embeddings else {}
    masked, unmaskable = masks_as_index(model, keep_fp32)
    operators = ["MatMul", "Gemm", "Attention"]
    with quiet_quantiser():
        quantize_dynamic(model, str(target), weight_type=QuantType.QInt8,
                         per_channel=per_channel, reduce_range=reduce_range,
                         op_types_to_quantize=operators,
                         nodes_to_exclude=list(keep_fp32) + unmaskable,
                         extra_options={"MatMulConstBOnly": True},
                         use_external_data_format=external)
    masks = (f", {masked} attention padding mask(s) passed as mask_index" if masked else "") + (
        f", {len(unmaskable)} attention(s) with a non-mask bias kept fp32" if unmaskable else "")
    return [f"dynamic int8 quantisation of {', '.join(operators)} weights "
            f"({'per-channel' if per_channel else 'per-tensor'}"
            f"{', 7-bit range' if reduce_range else ''}){tables_text(tables)}{masks}"]


# Weight-only int8 schemes, (block length along each MatMul weight's input axis, symmetric,
# block length along each embedding row), tried in this order until one passes: smallest first.
# Asymmetric blocks add a zero point per block, halving the block doubles the scales. Measured
# on the 4500-ticket trained MiniLM demo model (max |dp| on the probe set; size of the graph
# files, 0.6 MB of them the exporter's node metadata, since dropped): (64, symmetric) 0.074,
# 28.6 MB; (64, asymmetric) 0.051, 28.8 MB; (32, asymmetric) 0.030, 29.9 MB; (128, asymmetric)
# 0.078. The 8000-ticket relabelled one is sharper: on the held-out probes (32, asymmetric) 0.074
# and (16, asymmetric) 0.031, 33.4 MB, both with embedding blocks of 32; the 11000-ticket one
# passes with (64, symmetric): 0.044, 29.8 MB. The last scheme halves the embedding blocks too,
# and is tried only where the embeddings are quantised: a 2026-12-07 demo model distilled from
# three seeds drifted 0.053 on the search probes with (16, asymmetric, 32) and passed with
# embedding blocks of 16 (0.044 there, 0.032 held out), 34.9 MB in all. The one-teacher demo
# model of 2026-12-07 passes only with embedding blocks of 8 (blocks of 16 drift 0.069 held
# out), which the float16 embedding scales keep within the demo's 35 MB.
WEIGHT_ONLY_SCHEMES = ((64, True, 32), (64, False, 32), (32, False, 32), (16, False, 32),
                       (32, False, 8), (16, False, 16))
# Embedding tables with fewer rows stay fp32: they weigh next to nothing, and some are added to
# every position (token types, Laya's question-type embedding). On a 3000-ticket demo model,
# quantising those too raised max |dp| from 0.035 to 0.049.
MIN_TABLE_ROWS = 256
# Each table row is quantised in blocks of this many values by default, one scale each (a row
# whose width is not a multiple is one block). On the 8000-ticket demo model with 16-value MatMul
# blocks, one scale per row gave held-out max |dp| 0.055 (over the bar), blocks of 32 0.031. On
# MiniLM's 30522 x 384 table the float16 scales cost 0.7 MB in blocks of 32, 2.9 MB in blocks of 8.
EMBEDDING_BLOCK = 32
# The largest table value whose block scale (value / 127) a float16 holds.
HALF_SCALE_LIMIT = 65504.0 * 127


def quantise_embedding_rows(model: Any, block: int = EMBEDDING_BLOCK) -> Dict[str, int]:
    """Store each embedding table (a float 2-D initializer of at least MIN_TABLE_ROWS rows, read
    only by Gathers on axis 0) as int8 with one scale per `block` values of a row,
    dequantised after the lookup; returns each table's block width, by name.

    Per row and block because values differ in scale: one scale for the whole table (what
    dynamic quantisation of Gather does) resolves the small rows coarsely, and one per row the
    small values beside a row's largest. The scales are stored as float16 (half_at_least): in
    blocks of 8 they would otherwise weigh half as much as the int8 rows; a table with values
    too large for a float16 scale stays fp32.
    """
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    graph = model.graph
    tables = {init.name: init for init in graph.initializer}
    readers: dict = {}
    for node in graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)

    arrays: Dict[str, Any] = {}  # each table's values, read once however many lookups read it

    def is_table(node: Any) -> bool:
        table = tables.get(node.input[0]) if node.op_type == "Gather" else None
        if not (table is not None and len(table.dims) == 2 and table.dims[0] >= MIN_TABLE_ROWS
                and table.data_type == TensorProto.FLOAT
                and all(reader.op_type == "Gather"
                        and all(a.i == 0 for a in reader.attribute if a.name == "axis")
                        for reader in readers[node.input[0]])):
            return False
        if table.name not in arrays:
            arrays[table.name] = numpy_helper.to_array(table)
        return bool(np.abs(arrays[table.name]).max() <= HALF_SCALE_LIMIT)

    nodes: List[Any] = []
    quantised: Dict[str, int] = {}
    for node in graph.node:
        if not is_table(node):
            nodes.append(node)
            continue
        name, ids, out = node.input[0], node.input[1], node.output[0]
        if name not in quantised:
            values = arrays[name]
            count, width = values.shape
            length = block if width % block == 0 else width
            blocks = values.reshape(count, width // length, length)
            scale = half_at_least(np.abs(blocks).max(axis=2, keepdims=True) / 127.0)
            scale[scale == 0] = 1.0
            rows = np.clip(np.round(blocks / scale.astype(np.float32)), -127, 127)
            graph.initializer.extend([
                numpy_helper.from_array(rows.astype(np.int8).reshape(count, width),
                                        f"{name}_rows_int8"),
                numpy_helper.from_array(scale, f"{name}_block_scales"),
                numpy_helper.from_array(np.array([-1, width // length, length], np.int64),
                                        f"{name}_blocked"),
                numpy_helper.from_array(np.array([-1, width // length, 1], np.int64),
                                        f"{name}_scales_blocked")])
            quantised[name] = length
        # flattened to (lookups, blocks, block) for the per-block scales, then back to the
        # lookup's own shape, so ids of any rank work
        label = node.name or out  # node names must be unique: an unnamed lookup lends its output
        nodes += [helper.make_node("Gather", [f"{name}_rows_int8", ids], [f"{out}_int8"],
                                   name=f"{label}_int8"),
                  helper.make_node("Cast", [f"{out}_int8"], [f"{out}_unscaled"],
                                   to=TensorProto.FLOAT, name=f"{label}_cast"),
                  helper.make_node("Reshape", [f"{out}_unscaled", f"{name}_blocked"],
                                   [f"{out}_blocks"], name=f"{label}_blocks"),
                  helper.make_node("Gather", [f"{name}_block_scales", ids],
                                   [f"{out}_half_scale"], name=f"{label}_scale"),
                  helper.make_node("Cast", [f"{out}_half_scale"], [f"{out}_scale"],
                                   to=TensorProto.FLOAT, name=f"{label}_scale_cast"),
                  helper.make_node("Reshape", [f"{out}_scale", f"{name}_scales_blocked"],
                                   [f"{out}_block_scale"], name=f"{label}_block_scale"),
                  helper.make_node("Mul", [f"{out}_blocks", f"{out}_block_scale"],
                                   [f"{out}_dequantised"], name=f"{label}_dequantise"),
                  helper.make_node("Shape", [f"{out}_int8"], [f"{out}_shape"],
                                   name=f"{label}_shape"),
                  helper.make_node("Reshape", [f"{out}_dequantised", f"{out}_shape"], [out],
                                   name=f"{label}_unblocked")]
    kept = [init for init in graph.initializer if init.name not in quantised]
    del graph.node[:]
    graph.node.extend(nodes)
    del graph.initializer[:]
    graph.initializer.extend(kept)
    return quantised


def half_at_least(values: Any) -> Any:
    """`values` (non-negative float32) as float16, each rounded up to the next float16 where
    rounding to nearest went below it: a scale stored at half size never shrinks, so no value it
    scales rounds past 127, and the rows are quantised with the very scale the graph holds."""
    import numpy as np

    half = values.astype(np.float16)
    below = half.astype(np.float32) < values
    half[below] = np.nextafter(half[below], np.float16(np.inf))
    return half


def tables_text(tables: Dict[str, int]) -> str:
    """What quantise_embedding_rows did, for an optimisations entry ("" when nothing)."""
    if not tables:
        return ""
    widths = " or ".join(map(str, sorted(set(tables.values()), reverse=True)))
    return f", {len(tables)} embedding table(s) with one scale per {widths} values of a row"


def to_int8_weight_only(source: Path, target: Path, embeddings: bool, external: bool,
                        block: int, symmetric: bool,
                        embedding_block: int = EMBEDDING_BLOCK) -> List[str]:
    """int8 weights with fp32 compute: MatMul weights in blocks of `block` (MatMulNBits, 8 bits,
    `symmetric` or with a zero point per block) and, with `embeddings`, embedding tables with
    scales per `embedding_block` values of a row (quantise_embedding_rows). Only weights are
    rounded, so activation outliers, which per-tensor dynamic quantisation of the activations
    resolves coarsely, cost nothing; it is the int8 fallback for models whose answers that
    moves too far."""
    import onnx
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    model = onnx.load(str(source))
    tables = quantise_embedding_rows(model, embedding_block) if embeddings else {}
    quantizer = MatMulNBitsQuantizer(model, bits=8, block_size=block, is_symmetric=symmetric,
                                     accuracy_level=1)
    with quiet_quantiser():
        quantizer.process()
    onnx.save_model(quantizer.model.model, str(target), save_as_external_data=external,
                    all_tensors_to_one_file=True, location=sidecar(target.name))
    return [f"weight-only int8: MatMul weights in {'symmetric' if symmetric else 'asymmetric'} "
            f"blocks of {block} (MatMulNBits, fp32 compute)"
            + tables_text(tables)]
