"""Rewrites, for onnxruntime's kernels, of what onnxscript's ORT fusions leave decomposed.

ModernBERT-style encoders come out of those fusions with two patterns the CPU runs slowly:
- the rotary embedding as a dozen elementwise nodes per query and key (transpose, slice, neg,
  concat, mul, add): onnxscript fuses it only when cos/sin are computed the way Llama computes
  them (a MatMul of positions and frequencies), and this export multiplies them instead;
- the gated MLP's input projection as one MatMul whose output a Split copies into halves.
On the ModernBERT-base-shaped benchmark checkpoint (12 of scripts/bench.py's 1x1 rows, kernel
times from onnxruntime's profiler, two rounds) a run took 538 ms; with RotaryEmbedding 510 ms;
with the MLP projection split too 498 ms. Both compute the same fp32 products; the rotation's
kernel only rounds in another order (outputs within 1e-5, tests/test_ort_rewrites.py).
"""
from __future__ import annotations

from typing import Any, Dict, Optional

import numpy as np
from onnxscript import ir
from onnxscript.rewriter import pattern

# Transposes between the encoder's [batch, sequence, heads, head size] and the
# [batch, heads, sequence, head size] layout its rotation works on.
HEADS_FIRST = [0, 2, 1, 3]


def constant_int(value: Any) -> Optional[int]:
    """The integer a one-element constant holds (an initializer or folded constant), else None."""
    tensor = value.const_value if value is not None else None
    if tensor is None:
        return None
    array = tensor.numpy()
    return int(array.reshape(-1)[0]) if array.size == 1 else None


def rotate_half(op: Any, heads: Any, freqs: Any, first: Any, second: Any, unsqueeze: Any) -> Any:
    """`x * cos + rotate_half(x) * sin` of `heads` ([batch, sequence, heads, size]) transposed
    heads-first, with cos/sin of `Concat(freqs, freqs)` and rotate_half = `[-x2, x1]`. `first`
    and `second` are the two Slices' (starts, ends, axes, steps)."""
    x = op.Transpose(heads, perm=HEADS_FIRST)
    angles = op.Concat(freqs, freqs, axis=-1)
    cos = op.Unsqueeze(op.Cos(angles), unsqueeze)
    sin = op.Unsqueeze(op.Sin(angles), unsqueeze)
    x1 = op.Slice(x, *first)
    x2 = op.Slice(x, *second)
    return op.Add(op.Mul(x, cos), op.Mul(op.Concat(op.Neg(x2), x1, axis=-1), sin))


def rotates_halves(heads: Any, freqs: Any, bound: Dict[str, Any]) -> pattern.MatchResult:
    """Whether the match is the form `RotaryEmbedding` computes (not interleaved, whole head):
    the slices are the two halves of the head axis, cos/sin gain the head axis, and the angles
    are one row per sequence position shared by the batch ([1, sequence, size / 2]), so they
    can serve as its cache indexed by position. `bound` holds the pattern's variables: each
    Slice's starts, ends, axes and steps (`s1`, `e1`, `a1`, `p1`; `s2`...) and `unsqueeze`."""
    result = pattern.MatchResult()
    shape, angles = heads.shape, freqs.shape
    if shape is None or len(shape) != 4 or not all(isinstance(d, int) for d in shape[2:]):
        return result.fail("the heads' count and size are not known", heads)
    if shape[3] % 2:
        return result.fail("the head size is odd", heads)
    half = shape[3] // 2
    if angles is None or len(angles) != 3 or angles[0] != 1 or angles[1] != shape[1] \
            or angles[2] != half:
        return result.fail("the angles are not one row per position", freqs)
    bounds = (("1", 0, lambda stop: stop == half), ("2", half, lambda stop: stop >= 2 * half))
    for part, start, stop_ok in bounds:
        starts, ends, axes, steps = (bound[name + part] for name in "seap")
        stop = constant_int(ends)
        if (constant_int(starts) != start or stop is None or not stop_ok(stop)
                or constant_int(axes) not in (3, -1) or constant_int(steps) != 1):
            return result.fail("the slices are not the two halves of the head")
    if constant_int(bound["unsqueeze"]) != 1:
        return result.fail("cos/sin do not gain the head axis")
    return result


class RotaryToOrt(pattern.RewriteRuleClassBase):
    """The rotation of a query or key, flattened back to [batch, sequence, hidden] for
    attention, becomes com.microsoft.RotaryEmbedding on the flattened input. Its cos/sin cache
    is cos/sin of the graph's own angle rows (one per position, 0 to sequence - 1), so the
    values are those the graph computed. The nodes are left for dead-code elimination: the
    angles feed every layer, and the Shape rule below takes the rotation's other reader."""

    def __init__(self) -> None:
        super().__init__("rotary_embedding_ort", remove_nodes=False)

    def pattern(self, op, heads, freqs, s1, e1, a1, p1, s2, e2, a2, p2, unsqueeze, shape):
        rotated = rotate_half(op, heads, freqs, (s1, e1, a1, p1), (s2, e2, a2, p2), unsqueeze)
        return op.Reshape(op.Transpose(rotated, perm=HEADS_FIRST), shape)

    def check(self, op, heads, freqs, **bound):
        return rotates_halves(heads, freqs, bound)

    def rewrite(self, op, heads, freqs, shape, **_):
        count, size = heads.shape[2], heads.shape[3]
        rows = op.Reshape(freqs, op.Constant(value_ints=[-1, size // 2]))
        flat = op.Reshape(heads, op.Constant(value_ints=[0, 0, -1]))
        rotated = op.RotaryEmbedding(flat, op.Constant(value_ints=[0]), op.Cos(rows),
                                     op.Sin(rows), interleaved=0, num_heads=count,
                                     _domain="com.microsoft")
        return op.Reshape(rotated, shape)


class RotaryShape(pattern.RewriteRuleClassBase):
    """A Shape read of one dimension of the heads-first rotation (the exporter reads the
    sequence length there for the attention mask) reads the same dimension of the input, so
    nothing keeps the decomposed rotation alive."""

    def __init__(self) -> None:
        super().__init__("rotary_shape", remove_nodes=False)

    def pattern(self, op, heads, freqs, s1, e1, a1, p1, s2, e2, a2, p2, unsqueeze):
        rotated = rotate_half(op, heads, freqs, (s1, e1, a1, p1), (s2, e2, a2, p2), unsqueeze)
        return op.Shape(rotated, _outputs=["dims"])

    def check(self, op, heads, freqs, dims, **bound):
        result = rotates_halves(heads, freqs, bound)
        if not result:
            return result
        start, end = (dims.producer().attributes.get(name) for name in ("start", "end"))
        if start is None or end is None or not 0 <= start.as_int() < 4 \
                or end.as_int() != start.as_int() + 1:
            return result.fail("not a read of one dimension")
        return result

    def rewrite(self, op, heads, dims, **_):
        axis = HEADS_FIRST[dims.producer().attributes["start"].as_int()]
        return op.Shape(heads, start=axis, end=axis + 1)


class SplitGatedProjection(pattern.RewriteRuleClassBase):
    """MatMul by a constant weight whose output is split into two equal halves along its last
    axis becomes two MatMuls by the weight's halves: the same products, without the copy."""

    def __init__(self) -> None:
        super().__init__("glu_matmul_split")
        self.halves: Dict[str, Any] = {}

    def pattern(self, op, x, weight):
        return op.Split(op.MatMul(x, weight), _allow_other_attributes=True,
                        _outputs=["first", "second"])

    def check(self, op, x, weight, first, **_):
        result = pattern.MatchResult()
        value = weight.const_value
        if value is None or len(value.shape) != 2 or value.shape[1] % 2:
            return result.fail("not a constant weight of even width", weight)
        split = first.producer()
        rank = len(x.shape) if x.shape is not None else None
        axis = split.attributes.get("axis")
        axis = axis.as_int() if axis is not None else 0
        sizes_given = len(split.inputs) != 1 or "split" in split.attributes  # (opset < 13)
        if sizes_given or rank is None or axis not in (-1, rank - 1):
            return result.fail("not an even split of the last axis", split)
        return result

    def rewrite(self, op, x, weight, **_):
        if weight.name not in self.halves:
            values = weight.const_value.numpy()
            width = values.shape[1] // 2
            self.halves[weight.name] = [
                op.initializer(ir.tensor(np.ascontiguousarray(part), name=name), name=name)
                for part, name in ((values[:, :width], f"{weight.name}_first_half"),
                                   (values[:, width:], f"{weight.name}_second_half"))]
        first, second = self.halves[weight.name]
        return op.MatMul(x, first), op.MatMul(x, second)


def rewrite_for_ort_kernels(model: ir.Model) -> Dict[str, int]:
    """Apply the rewrites to `model` in place; return how many of each (only counts > 0)."""
    from onnxscript import optimizer
    from onnxscript.ir.passes.common import ShapeInferencePass

    ShapeInferencePass()(model)
    counts = {name: pattern.RewriteRuleSet([rule.rule()]).apply_to_model(model)
              for name, rule in (("rotary_embedding_ort", RotaryToOrt),
                                 ("rotary_shape_read", RotaryShape),
                                 ("glu_matmul_split", SplitGatedProjection))}
    optimizer.remove_unused_nodes(model)
    return {name: count for name, count in counts.items() if count}
