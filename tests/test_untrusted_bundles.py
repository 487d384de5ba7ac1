"""Bundles are input from elsewhere. A bundle rewritten consistently (files and manifest hashes
both changed, as an attacker would) is refused with a clear error before any inference when it
points outside itself or holds a file that does not parse; and nothing in the load path can run
code from a bundle. (Flipped bytes, unlisted files, a newer format version and pinned digests are
in test_agent_runtime.py.)"""
import ast
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

import laya_edge
from laya_edge.bundle_format import sha256_file

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")
RUNTIME = sorted(p for p in (ROOT / "laya_edge").glob("*.py"))


@pytest.fixture
def bundle_copy(bundles, tmp_path):
    copy = tmp_path / "bundle"
    shutil.copytree(bundles["modernbert-tiny"], copy)
    return copy


def rehash(bundle, relative):
    """Make the manifest agree with the file again, as a forger would."""
    manifest_path = bundle / "laya_edge.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["files"][relative] = {"sha256": sha256_file(bundle / relative),
                                   "bytes": (bundle / relative).stat().st_size}
    manifest_path.write_text(json.dumps(manifest))


@pytest.mark.parametrize("escape", ["../elsewhere/laya.onnx", "/etc/passwd", "C:/x/laya.onnx"])
def test_a_manifest_path_outside_the_bundle_is_refused(bundle_copy, escape):
    manifest_path = bundle_copy / "laya_edge.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["variants"]["fp32"]["files"] = [escape]
    manifest_path.write_text(json.dumps(manifest))
    with pytest.raises(ValueError, match="absolute or escapes the bundle directory"):
        laya_edge.load(str(bundle_copy))


@pytest.mark.parametrize("location", ["../outside.bin", "/tmp/outside.bin"])
def test_external_data_outside_the_bundle_is_refused(bundle_copy, tmp_path, location):
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    secret = tmp_path / "outside.bin"
    np.ones((2, 2), np.float32).tofile(secret)
    weight = numpy_helper.from_array(np.ones((2, 2), np.float32), "w")
    weight.ClearField("raw_data")
    weight.data_location = TensorProto.EXTERNAL
    for key, value in (("location", location.replace("/tmp/outside.bin", str(secret))),
                       ("offset", "0"), ("length", "16")):
        entry = weight.external_data.add()
        entry.key, entry.value = key, value
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 2])],
                              [weight])
    onnx.save(helper.make_model(graph), str(bundle_copy / "laya.onnx"))
    rehash(bundle_copy, "laya.onnx")
    with pytest.raises(Exception, match="External data path") as raised:
        laya_edge.load(str(bundle_copy))
    message = str(raised.value).lower()
    assert "escapes model directory" in message or "absolute path not allowed" in message


@pytest.mark.parametrize("content", [b"{not json", b'{"version": "1.0"}', b"\x00\xff" * 50])
def test_a_tokenizer_that_does_not_parse_is_a_clear_error(bundle_copy, content):
    (bundle_copy / "tokenizer" / "tokenizer.json").write_bytes(content)
    rehash(bundle_copy, "tokenizer/tokenizer.json")
    with pytest.raises(ValueError, match="is not a tokenizer file the `tokenizers` library can "
                                         "read") as raised:
        laya_edge.load(str(bundle_copy))
    assert "tokenizer.json" in str(raised.value)


def test_a_graph_that_does_not_parse_is_a_clear_error(bundle_copy):
    (bundle_copy / "laya.onnx").write_bytes(b"not a protobuf" * 10)
    rehash(bundle_copy, "laya.onnx")
    with pytest.raises(Exception, match="laya.onnx|protobuf|Protobuf"):
        laya_edge.load(str(bundle_copy))


def called_names(tree):
    """Builtins called by name, and the keyword arguments that opt into running foreign code."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            if isinstance(node.func, ast.Name):
                yield node.func.id
            for keyword in node.keywords:
                if keyword.arg in ("trust_remote_code", "allow_pickle"):
                    yield f"{keyword.arg}="


@pytest.mark.parametrize("path", RUNTIME, ids=lambda p: p.name)
def test_the_runtime_never_unpickles_evals_or_runs_remote_code(path):
    tree = ast.parse(path.read_text(encoding="utf-8"))
    imported = {alias.name.split(".")[0] for node in ast.walk(tree)
                if isinstance(node, (ast.Import, ast.ImportFrom))
                for alias in node.names} | {node.module.split(".")[0] for node in ast.walk(tree)
                                            if isinstance(node, ast.ImportFrom) and node.module}
    assert not imported & {"pickle", "cPickle", "dill", "joblib", "marshal", "shelve"}
    forbidden = {"eval", "exec", "compile", "__import__", "trust_remote_code=", "allow_pickle="}
    assert not set(called_names(tree)) & forbidden
