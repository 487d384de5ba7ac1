"""The exporter's rewrite of SkipLayerNormalization into Add and LayerNormalization."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from laya_edge.export.fusion import split_skip_layer_norms
from laya_edge.session import CPU, disabled_optimizers_for

HIDDEN = 8


def skip_layer_norm_graph(path):
    """Two SkipLayerNormalizations: one with a bias whose residual sum is read downstream, one
    without a bias or beta whose mean output is a graph output (so it must stay fused)."""
    rng = np.random.default_rng(3)
    weights = {name: rng.normal(size=HIDDEN).astype(np.float32) * scale + offset
               for name, scale, offset in (("gamma", 0.2, 1.0), ("beta", 0.1, 0.0),
                                           ("bias", 0.5, 0.0))}
    nodes = [
        helper.make_node("SkipLayerNormalization", ["x", "skip", "gamma", "beta", "bias"],
                         ["normed", "", "", "summed"], domain="com.microsoft", epsilon=1e-5,
                         name="first"),
        helper.make_node("SkipLayerNormalization", ["normed", "summed", "gamma"],
                         ["out", "mean"], domain="com.microsoft", name="kept"),
        helper.make_node("Mul", ["summed", "out"], ["mixed"], name="reader"),
    ]
    tensor = ["batch", "sequence", HIDDEN]
    graph = helper.make_graph(
        nodes, "sln",
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, tensor) for name in ("x", "skip")],
        [helper.make_tensor_value_info("mixed", TensorProto.FLOAT, tensor),
         helper.make_tensor_value_info("mean", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(value, name) for name, value in weights.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18),
                                                    helper.make_opsetid("com.microsoft", 1)])
    onnx.save_model(model, str(path))


def split_file(path):
    """`split_skip_layer_norms` on the graph file at `path`, saved back; how many it split."""
    model = onnx.load(str(path))
    split = split_skip_layer_norms(model)
    onnx.save_model(model, str(path))
    return split


def outputs(path, feeds):
    session = ort.InferenceSession(str(path), providers=[CPU], **disabled_optimizers_for([CPU]))
    return session.run(["mixed", "mean"], feeds)


def test_split_keeps_the_outputs_and_leaves_nodes_whose_statistics_are_read(tmp_path):
    path = tmp_path / "sln.onnx"
    skip_layer_norm_graph(path)
    rng = np.random.default_rng(4)
    feeds = {name: rng.normal(size=(2, 5, HIDDEN)).astype(np.float32) * 3 for name in ("x", "skip")}
    before = outputs(path, feeds)

    assert split_file(path) == 1
    ops = [node.op_type for node in onnx.load(str(path)).graph.node]
    assert ops.count("SkipLayerNormalization") == 1 and ops.count("LayerNormalization") == 1
    after = outputs(path, feeds)
    for split, fused in zip(after, before):
        np.testing.assert_allclose(split, fused, rtol=1e-5, atol=1e-5)
    assert split_file(path) == 0          # nothing left to split


def optimised_ops(path, tmp_path, **kwargs):
    """The operators of the graph onnxruntime runs after its own optimisations."""
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.optimized_model_filepath = str(tmp_path / "optimised.onnx")
    ort.InferenceSession(str(path), options, providers=[CPU], **kwargs)
    return {node.op_type for node in onnx.load(options.optimized_model_filepath).graph.node}


def test_cpu_sessions_do_not_fuse_the_split_nodes_again(tmp_path):
    path = tmp_path / "sln.onnx"
    skip_layer_norm_graph(path)
    split_file(path)
    split = onnx.load(str(path))    # the split node alone: Add, Add, LayerNormalization
    nodes = [node for node in split.graph.node if node.name.startswith("first")]
    assert [node.op_type for node in nodes] == ["Add", "Add", "LayerNormalization"]
    del split.graph.node[:]
    split.graph.node.extend(nodes + [helper.make_node("Relu", ["normed"], ["mixed"])])
    del split.graph.output[1:]
    onnx.save_model(split, str(path))

    assert "SkipLayerNormalization" in optimised_ops(path, tmp_path)   # what a default session does
    ops = optimised_ops(path, tmp_path, **disabled_optimizers_for([CPU]))
    assert "SkipLayerNormalization" not in ops and "LayerNormalization" in ops
    assert disabled_optimizers_for(["CUDAExecutionProvider", CPU]) == {}
