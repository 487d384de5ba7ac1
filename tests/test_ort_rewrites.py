"""The exporter's rewrites of decomposed rotary embeddings and gated projections."""
from __future__ import annotations

import collections

import numpy as np
import onnx
from onnxscript import ir
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from laya_edge.export.ort_rewrites import rewrite_for_ort_kernels
from laya_edge.session import CPU

HEADS, SIZE = 2, 4
HIDDEN = HEADS * SIZE
LAST = np.iinfo(np.int64).max


def ints(name, values):
    return numpy_helper.from_array(np.array(values, dtype=np.int64), name)


def encoder_like_graph(halves=(SIZE // 2, SIZE // 2), split=None, angles_known=True):
    """The rotation of a [batch, sequence, heads, size] tensor as the dynamo export writes it
    (positions 0..S-1 times frequencies, cos/sin of the doubled angles, rotate_half), its
    sequence length read by a Shape of the rotated tensor, and a gated projection of the result
    (MatMul then an even Split, or `split` sizes). With `angles_known` the graph records the
    angles' shape, [1, sequence, size / 2], as the exporter's graphs do."""
    rng = np.random.default_rng(7)
    first, _ = halves
    initializers = [
        numpy_helper.from_array((1.0 / 10000 ** (np.arange(SIZE // 2) / (SIZE // 2)))
                                .astype(np.float32), "inv_freq"),
        numpy_helper.from_array(rng.normal(size=(HIDDEN, 12)).astype(np.float32), "w_gated"),
        ints("heads_shape", [0, 0, HEADS, SIZE]), ints("flat_shape", [0, 0, -1]),
        ints("zero", 0), ints("one", 1), ints("positions_axes", [0, 2]), ints("head_axis", [1]),
        ints("start", [0]), ints("middle", [first]), ints("last", [LAST]), ints("axis3", [3]),
        ints("step", [1])]
    nodes = [
        helper.make_node("Reshape", ["x", "heads_shape"], ["heads"]),
        helper.make_node("Shape", ["x"], ["length_1d"], start=1, end=2),
        helper.make_node("Squeeze", ["length_1d"], ["length"]),
        helper.make_node("Range", ["zero", "length", "one"], ["positions"]),
        helper.make_node("Unsqueeze", ["positions", "positions_axes"], ["positions_3d"]),
        helper.make_node("Cast", ["positions_3d"], ["positions_f"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["positions_f", "inv_freq"], ["freqs"]),
        helper.make_node("Concat", ["freqs", "freqs"], ["angles"], axis=-1),
        helper.make_node("Cos", ["angles"], ["cos"]), helper.make_node("Sin", ["angles"], ["sin"]),
        helper.make_node("Unsqueeze", ["cos", "head_axis"], ["cos_4d"]),
        helper.make_node("Unsqueeze", ["sin", "head_axis"], ["sin_4d"]),
        helper.make_node("Transpose", ["heads"], ["t"], perm=[0, 2, 1, 3]),
        helper.make_node("Slice", ["t", "start", "middle", "axis3", "step"], ["x1"]),
        helper.make_node("Slice", ["t", "middle", "last", "axis3", "step"], ["x2"]),
        helper.make_node("Neg", ["x2"], ["minus_x2"]),
        helper.make_node("Concat", ["minus_x2", "x1"], ["turned"], axis=-1),
        helper.make_node("Mul", ["t", "cos_4d"], ["t_cos"]),
        helper.make_node("Mul", ["turned", "sin_4d"], ["turned_sin"]),
        helper.make_node("Add", ["t_cos", "turned_sin"], ["rotated"]),
        helper.make_node("Shape", ["rotated"], ["rotated_length"], start=2, end=3),
        helper.make_node("Transpose", ["rotated"], ["rotated_back"], perm=[0, 2, 1, 3]),
        helper.make_node("Reshape", ["rotated_back", "flat_shape"], ["flat"]),
        helper.make_node("MatMul", ["flat", "w_gated"], ["projected"]),
        helper.make_node("Split", ["projected"] + (["split"] if split else []),
                         ["value", "gate"], axis=2, **({} if split else {"num_outputs": 2})),
        helper.make_node("Mul", ["value", "gate"], ["gated"]) if not split else
        helper.make_node("Concat", ["value", "gate"], ["gated"], axis=-1)]
    if split:
        initializers.append(ints("split", split))
    graph = helper.make_graph(
        nodes, "encoder_like",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "sequence", HIDDEN])],
        [helper.make_tensor_value_info("gated", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("rotated_length", TensorProto.INT64, None)],
        initializers,
        value_info=[helper.make_tensor_value_info(
            "freqs", TensorProto.FLOAT, [1, "sequence", SIZE // 2])] if angles_known else [])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def rewritten(model):
    """(the rewritten ONNX model, the rewrite counts)."""
    graph = ir.from_proto(model)
    counts = rewrite_for_ort_kernels(graph)
    return ir.to_proto(graph), counts


def run(model, x):
    session = ort.InferenceSession(model.SerializeToString(), providers=[CPU])
    return session.run(["gated", "rotated_length"], {"x": x})


def op_counts(model):
    return collections.Counter(node.op_type for node in model.graph.node)


@pytest.fixture
def states():
    return np.random.default_rng(8).normal(size=(3, 11, HIDDEN)).astype(np.float32) * 2


def test_rotation_and_gated_projection_are_rewritten_with_the_same_outputs(states):
    model = encoder_like_graph()
    fused, counts = rewritten(model)
    assert counts == {"rotary_embedding_ort": 1, "rotary_shape_read": 1, "glu_matmul_split": 1}
    ops = op_counts(fused)
    assert ops["RotaryEmbedding"] == 1 and ops["MatMul"] == 2
    # nothing of the decomposed rotation or the split is left to compute
    assert not {"Neg", "Transpose", "Split", "Slice"} & set(ops)
    before, after = run(model, states), run(fused, states)
    np.testing.assert_allclose(after[0], before[0], rtol=1e-5, atol=1e-5)
    assert after[1].tolist() == before[1].tolist() == [11]


@pytest.mark.parametrize("form", [{"halves": (1, 3)}, {"angles_known": False}],
                         ids=["unequal-parts", "angles-of-unknown-shape"])
def test_rotation_not_of_the_kernels_form_is_left_decomposed(states, form):
    model = encoder_like_graph(**form)
    fused, counts = rewritten(model)
    assert "rotary_embedding_ort" not in counts and "RotaryEmbedding" not in op_counts(fused)
    np.testing.assert_allclose(run(fused, states)[0], run(model, states)[0], rtol=1e-6)


def test_uneven_split_of_a_projection_is_left_as_it_is(states):
    model = encoder_like_graph(split=[4, 8])
    fused, counts = rewritten(model)
    assert "glu_matmul_split" not in counts and op_counts(fused)["Split"] == 1
    # (the rotation is still rewritten: RotaryEmbedding rounds differently in the last bits)
    np.testing.assert_allclose(run(fused, states)[0], run(model, states)[0], rtol=1e-5,
                               atol=1e-5)
