"""Attention masks that survive dynamic int8 quantisation.

The fused graph gives each `Attention` its padding mask as an additive `attention_bias` (0 where a
token may be attended, the most negative float where not). onnxruntime's dynamic quantiser turns
`Attention` into `QAttention`, which has no `attention_bias` input, and drops it without a word:
every quantised attention layer then attends to the padding as well, so a row's answer depends
on the longer rows it is batched with. On a trained demo-family model each attention layer
quantised alone moved probabilities by 0.30 to 0.93 that way, and by 0.05 to 0.15 with its mask
kept (docs/export.md, "int8").

`QAttention` does take `mask_index`, and a 3-D `mask_index` (batch, query, key; 1 = attend) says
what a mask-only bias says: fp32 `Attention` gives the same outputs either way (max |dp| 8e-6 on
the demo model's probes). So before quantising, each bias that is such a mask is handed over as
`mask_index`; an attention whose bias is anything else cannot be quantised without losing it and
stays fp32.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

# A bias value at or below this masks its position out (exp of it underflows to 0 in softmax).
MASKED_AT_MOST = -1e4


class _Graph:
    """What the mask test looks up in a model, indexed once: producers, scalars, shapes."""

    def __init__(self, model: Any):
        self.producers = {name: node for node in model.graph.node for name in node.output}
        self.initializers = {tensor.name: tensor for tensor in model.graph.initializer}
        self.shapes = {info.name: info.type.tensor_type.shape
                       for info in list(model.graph.value_info) + list(model.graph.input)}

    def scalar(self, name: str) -> Optional[float]:
        from onnx import numpy_helper

        tensor = self.initializers.get(name)
        if tensor is None:
            return None
        values = numpy_helper.to_array(tensor)
        return float(values.reshape(())) if values.size == 1 else None


def _mask_condition(graph: _Graph, bias: str) -> Optional[str]:
    """The boolean tensor (batch, 1, query, key) behind `bias` when `bias` is
    `Where(condition, 0, very negative)`; None when it is anything else."""
    producer = graph.producers.get(bias)
    if producer is None or producer.op_type != "Where":
        return None
    condition, keep, drop = producer.input
    kept, dropped = graph.scalar(keep), graph.scalar(drop)
    if kept != 0.0 or dropped is None or dropped > MASKED_AT_MOST:
        return None
    shape = graph.shapes.get(condition)
    if shape is None or len(shape.dim) != 4 or shape.dim[1].dim_value != 1:
        return None  # a mask per head, or one of unknown shape: not expressible as mask_index
    return condition


def masks_as_index(model: Any, skip: Sequence[str] = ()) -> Tuple[int, List[str]]:
    """Give every `Attention` of `model` (an onnx ModelProto, changed in place) not named in
    `skip` its mask-only `attention_bias` as a 3-D int32 `mask_index` instead. Returns how many
    were rewritten and the names of those whose bias is not a mask, which must stay fp32."""
    from onnx import TensorProto, helper, numpy_helper

    graph = _Graph(model)
    rewritten, unmaskable = 0, []
    masks: Dict[str, str] = {}
    built: List[Any] = []
    first = 0  # where the mask nodes go: before the first attention that reads them
    for index, node in enumerate(model.graph.node):
        if (node.op_type != "Attention" or node.name in skip or len(node.input) < 6
                or not node.input[5]):
            continue
        condition = None if node.input[3] else _mask_condition(graph, node.input[5])
        if condition is None:
            unmaskable.append(node.name)
            continue
        if not masks:
            first = index
        if condition not in masks:
            prefix = f"{condition}_as_mask_index"
            built += [
                helper.make_node("Shape", [node.input[0]], [f"{prefix}_hidden_shape"],
                                 end=2),
                helper.make_node("Shape", [condition], [f"{prefix}_key_length"], start=3),
                helper.make_node("Concat", [f"{prefix}_hidden_shape", f"{prefix}_key_length"],
                                 [f"{prefix}_shape"], axis=0),
                helper.make_node("Squeeze", [condition, "attention_masks_axis"],
                                 [f"{prefix}_squeezed"]),
                helper.make_node("Expand", [f"{prefix}_squeezed", f"{prefix}_shape"],
                                 [f"{prefix}_full"]),
                helper.make_node("Cast", [f"{prefix}_full"], [prefix], to=TensorProto.INT32),
            ]
            masks[condition] = prefix
        inputs = list(node.input)
        inputs[3], inputs[5] = masks[condition], ""
        while inputs[-1] == "":
            inputs.pop()
        del node.input[:]
        node.input.extend(inputs)
        rewritten += 1
    if built:
        model.graph.initializer.append(
            numpy_helper.from_array(np.array([1], np.int64), "attention_masks_axis"))
        nodes = list(model.graph.node)
        del model.graph.node[:]
        model.graph.node.extend(nodes[:first] + built + nodes[first:])
    return rewritten, unmaskable
