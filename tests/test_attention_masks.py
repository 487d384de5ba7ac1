"""Dynamic int8 keeps the attention padding mask (laya_edge/export/attention_masks.py).

onnxruntime's quantiser turns `Attention` into `QAttention`, which has no attention-bias input,
and used to drop the padding mask with it. These tests build one fused attention layer the way
the exporter's fused graphs give it its mask (`Where(mask, 0, most negative float)`), quantise it
with the exporter's own `to_int8`, and check what padding does to the answer.
"""
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from laya_edge.export.attention_masks import masks_as_index
from laya_edge.export.precision import to_int8

HIDDEN, HEADS, BATCH, LENGTH = 16, 2, 2, 6


def _layer(path: Path, mask_bias: bool = True) -> Path:
    """One fused attention layer over `x`, masked by `attention_mask` (or, with `mask_bias`
    off, given an arbitrary additive bias as a graph input)."""
    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array(rng.normal(0, 0.3, (HIDDEN, 3 * HIDDEN))
                                       .astype(np.float32), "qkv_weight"),
               numpy_helper.from_array(rng.normal(0, 0.1, 3 * HIDDEN).astype(np.float32),
                                       "qkv_bias"),
               numpy_helper.from_array(np.array(0.0, np.float32), "keep"),
               numpy_helper.from_array(np.array(np.finfo(np.float32).min, np.float32), "drop"),
               numpy_helper.from_array(np.array([1, 2], np.int64), "axes"),
               numpy_helper.from_array(np.array([1], np.int64), "one")]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", HIDDEN])]
    if mask_bias:
        inputs.append(helper.make_tensor_value_info("attention_mask", TensorProto.INT64,
                                                    ["batch", "seq"]))
        # (batch, 1, query, key), as the fused graphs' masks are: every query sees the same keys
        nodes = [helper.make_node("Cast", ["attention_mask"], ["mask_bool"], to=TensorProto.BOOL),
                 helper.make_node("Unsqueeze", ["mask_bool", "axes"], ["key_mask"]),
                 helper.make_node("Shape", ["attention_mask"], ["batch"], end=1),
                 helper.make_node("Shape", ["attention_mask"], ["seq"], start=1),
                 helper.make_node("Concat", ["batch", "one", "seq", "seq"], ["mask_shape"],
                                  axis=0),
                 helper.make_node("Expand", ["key_mask", "mask_shape"], ["mask"]),
                 helper.make_node("Where", ["mask", "keep", "drop"], ["bias"])]
        info = [helper.make_tensor_value_info("mask", TensorProto.BOOL,
                                              ["batch", 1, "seq", "seq"])]
    else:
        inputs.append(helper.make_tensor_value_info("bias", TensorProto.FLOAT,
                                                    ["batch", 1, "seq", "seq"]))
        nodes, info = [], []
    nodes.append(helper.make_node("Attention", ["x", "qkv_weight", "qkv_bias", "", "", "bias"],
                                  ["y"], name="attention", domain="com.microsoft",
                                  num_heads=HEADS))
    graph = helper.make_graph(nodes, "layer", inputs,
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              weights, value_info=info)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18),
                                                    helper.make_opsetid("com.microsoft", 1)])
    onnx.save(model, str(path))
    return path


def _run(path: Path, feeds: dict) -> np.ndarray:
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)[0]


def _padded_pair():
    """Two inputs that differ only at the second row's padding, with the same overall range,
    so per-tensor dynamic quantisation picks the same scale for both."""
    rng = np.random.default_rng(1)
    x = rng.uniform(-1, 1, (BATCH, LENGTH, HIDDEN)).astype(np.float32)
    x[0, 0, 0], x[0, 0, 1] = -1.0, 1.0
    mask = np.ones((BATCH, LENGTH), np.int64)
    mask[1, 3:] = 0
    other = x.copy()
    other[1, 3:] = rng.uniform(-0.9, 0.9, (LENGTH - 3, HIDDEN))
    return mask, x, other


def test_the_mask_as_mask_index_gives_the_fp32_layer_the_same_outputs(tmp_path):
    source = _layer(tmp_path / "layer.onnx")
    model = onnx.load(str(source))
    assert masks_as_index(model) == (1, [])
    attention = next(node for node in model.graph.node if node.op_type == "Attention")
    assert attention.input[3] and len(attention.input) == 4   # mask_index, no attention bias
    onnx.save(model, str(tmp_path / "rewritten.onnx"))
    mask, x, _ = _padded_pair()
    feeds = {"x": x, "attention_mask": mask}
    np.testing.assert_allclose(_run(tmp_path / "rewritten.onnx", feeds), _run(source, feeds),
                               atol=1e-5)


def test_quantised_attention_ignores_the_padding_as_fp32_does(tmp_path):
    source = _layer(tmp_path / "layer.onnx")
    target = tmp_path / "int8.onnx"
    optimisations = to_int8(source, target, False, False, False, False)
    assert [n.op_type for n in onnx.load(str(target)).graph.node].count("QAttention") == 1
    mask, x, other = _padded_pair()
    first = _run(target, {"x": x, "attention_mask": mask})
    second = _run(target, {"x": other, "attention_mask": mask})
    # Every query row may only read the three real tokens of its sequence: what the padding
    # holds changes nothing (the padded rows' own outputs are not compared).
    np.testing.assert_allclose(first[:, :3], second[:, :3], atol=1e-6)
    np.testing.assert_allclose(first[0], second[0], atol=1e-6)
    reference = _run(source, {"x": x, "attention_mask": mask})
    assert np.abs(first[:, :3] - reference[:, :3]).max() < 0.1
    assert "1 attention padding mask(s) passed as mask_index" in optimisations[0]


@pytest.mark.parametrize("reason", ["bias", "mask_index"])
def test_an_attention_whose_bias_is_not_a_mask_stays_fp32(tmp_path, reason):
    source = _layer(tmp_path / "layer.onnx", mask_bias=reason == "mask_index")
    if reason == "mask_index":   # a mask_index already there: the bias cannot move into it
        model = onnx.load(str(source))
        model.graph.node[-1].input[3] = "x_shape_unused"
        model.graph.node.insert(0, helper.make_node("Cast", ["attention_mask"],
                                                    ["x_shape_unused"], to=TensorProto.INT32))
        onnx.save(model, str(source))
    target = tmp_path / "int8.onnx"
    optimisations = to_int8(source, target, False, False, False, False)
    assert "1 attention(s) with a non-mask bias kept fp32" in optimisations[0]
    types = [node.op_type for node in onnx.load(str(target)).graph.node]
    assert "Attention" in types and "QAttention" not in types
