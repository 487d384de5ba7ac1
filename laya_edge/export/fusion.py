"""onnxruntime-specific fusions of the exported graph: attention, GELU and skip-layer-norm.

onnxscript's ORT fusion rewriter turns the decomposed attention of the dynamo graph into
`Attention`/`MultiHeadAttention` and folds bias+GELU and residual+LayerNorm into single kernels
(onnxruntime's own BERT optimizer does not recognise this graph). The fused graph uses
com.microsoft operators, so it runs on onnxruntime only, which is what the bundle is for.
"""
from __future__ import annotations

import contextlib
import io
import logging
from pathlib import Path
from typing import Any, Dict

from ..bundle import sidecar
from .graph import drop_node_metadata


def fuse_for_ort(source: Path, target: Path, external: bool) -> Dict[str, int]:
    """Write the fused graph to `target`; return the fusions applied, by name (only counts > 0)."""
    import onnxscript
    from onnxscript.rewriter import ort_fusions

    model = onnxscript.ir.load(str(source))
    quiet = logging.getLogger()
    level = quiet.level
    quiet.setLevel(logging.ERROR)  # the constant folder's notes on ops it leaves alone
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            fused, counts = ort_fusions.optimize_for_ort(model)
            packed = pack_attention_weights(fused)
    finally:
        quiet.setLevel(level)
    onnxscript.ir.save(fused, str(target),
                       external_data=sidecar(target.name) if external else None)
    drop_node_metadata(target)
    applied = {name: int(count) for name, count in counts.items() if count}
    if packed:
        applied["packed_qkv_weights"] = packed
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
