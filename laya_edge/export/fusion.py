"""onnxruntime-specific fusions of the exported graph: attention, GELU, rotary embedding.

onnxscript's ORT fusion rewriter turns the decomposed attention of the dynamo graph into
`Attention`/`MultiHeadAttention` and folds bias+GELU into one kernel (onnxruntime's own BERT
optimizer does not recognise this graph); `ort_rewrites` fuses what it leaves decomposed in
ModernBERT-style encoders. The residual+LayerNorm it also folds is split again
(see `split_skip_layer_norms`). The fused graph uses com.microsoft operators, so it runs on
onnxruntime only, which is what the bundle is for.
"""
from __future__ import annotations

import contextlib
import io
from pathlib import Path
from typing import Any, Dict, Set

from ..bundle_format import sidecar
from .graph import strip_node_metadata
from .logs import third_party_quiet


def fuse_for_ort(source: Path, target: Path, external: bool) -> Dict[str, int]:
    """Write the fused graph to `target`; return the fusions applied, by name (only counts > 0)."""
    import onnx
    import onnxscript
    from onnxscript.rewriter import ort_fusions

    from .ort_rewrites import rewrite_for_ort_kernels

    model = onnxscript.ir.load(str(source))
    # the constant folder's notes on ops it leaves alone, and the fusions' prints
    with third_party_quiet(), contextlib.redirect_stdout(io.StringIO()):
        fused, counts = ort_fusions.optimize_for_ort(model)
        packed = pack_attention_weights(fused)
        counts.update(rewrite_for_ort_kernels(fused))
    onnxscript.ir.save(fused, str(target),
                       external_data=sidecar(target.name) if external else None)
    # One more pass over the saved protobuf (the weights file stays as it is).
    saved = onnx.load(str(target), load_external_data=False)
    strip_node_metadata(saved)
    split = split_skip_layer_norms(saved)
    onnx.save_model(saved, str(target))
    applied = {name: int(count) for name, count in counts.items() if count}
    if packed:
        applied["packed_qkv_weights"] = packed
    if split:
        applied["skip_layer_normalization_split"] = split
    return applied


def pack_attention_weights(model: Any) -> int:
    """Store each `Attention`'s packed query/key/value weight as one initializer; return how
    many were packed.

    The rewriter leaves the packing as a Concat of the three weights, which every session would
    fold again at load, and it marks the equal split with `qkv_hidden_sizes`, which the int8
    quantiser refuses to quantise. Both are undone here: the Concat is folded once, and the
    attribute is dropped where the three sizes are equal, which is what `Attention` assumes
    without it.
    """
    from onnxscript import optimizer

    optimizer.fold_constants(model, should_fold=lambda node: True if node.op_type == "Concat"
                             else None)
    packed = 0
    for node in model.graph:
        if node.op_type != "Attention" or node.inputs[1] is None \
                or node.inputs[1].const_value is None:
            continue
        packed += 1
        sizes = node.attributes.get("qkv_hidden_sizes")
        if sizes is not None and len(set(sizes.as_ints())) == 1:
            del node.attributes["qkv_hidden_sizes"]
    return packed


# SkipLayerNormalization's epsilon when the attribute is absent (onnxruntime's operator schema).
SKIP_LAYER_NORM_EPSILON = 1e-12


def split_skip_layer_norms(model: Any) -> int:
    """Rewrite each SkipLayerNormalization of the ONNX `model` (in place) as Add (bias, then
    residual) and LayerNormalization; return how many.

    onnxruntime's CPU SkipLayerNormalization kernel is a scalar loop per row: on the MiniLM
    test checkpoint its 15 nodes took 4.4 ms of a 46 ms 1x1 call, the Adds and LayerNorms that
    replace them 1.6 ms (fp32 1x1 8-15% faster, int8 10-14%, scripts/bench.py's inputs).
    CPU sessions therefore leave onnxruntime's own SkipLayerNormFusion off
    (`session.CPU_DISABLED_OPTIMIZERS`); on CUDA it fuses them again at load, for its GPU kernel.
    A node whose mean or inverse-deviation outputs are read is left as it is.
    """
    from onnx import helper

    graph = model.graph
    read: Set[str] = {name for node in graph.node for name in node.input}
    read |= {output.name for output in graph.output}
    nodes, split = [], 0
    for node in graph.node:
        outputs = list(node.output) + [""] * (4 - len(node.output))
        if node.op_type != "SkipLayerNormalization" or ({outputs[1], outputs[2]} - {""}) & read:
            nodes.append(node)
            continue
        x, skip, gamma, beta, bias = (list(node.input) + [""] * 5)[:5]
        epsilon = next((a.f for a in node.attribute if a.name == "epsilon"),
                       SKIP_LAYER_NORM_EPSILON)
        total = outputs[3] or f"{node.name}_residual_sum"
        if bias:
            nodes.append(helper.make_node("Add", [x, bias], [f"{node.name}_biased"],
                                          name=f"{node.name}_bias"))
            x = f"{node.name}_biased"
        nodes.append(helper.make_node("Add", [x, skip], [total], name=f"{node.name}_residual"))
        norm_inputs = [total, gamma] + ([beta] if beta else [])
        nodes.append(helper.make_node("LayerNormalization", norm_inputs, [outputs[0]],
                                      name=f"{node.name}_norm", axis=-1, epsilon=epsilon))
        split += 1
    if split:
        del graph.node[:]
        graph.node.extend(nodes)
    return split
