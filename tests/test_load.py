"""`laya_edge.load` as a drop-in for upstream's `laya.load`, and the environment digest pins."""
import json
import warnings

import pytest

import laya_edge
from laya_edge.bundle_format import sha256_file


@pytest.fixture
def models_dir(tmp_path, monkeypatch, bundles):
    monkeypatch.setenv("LAYA_EDGE_MODELS", str(tmp_path))
    (tmp_path / "multilingual").symlink_to(bundles["unigram-tiny"])
    return tmp_path


@pytest.mark.parametrize("name", ["multilingual", "ml", " Multi ", "laya-multilingual"])
def test_checkpoint_names_mean_the_local_bundle_of_that_checkpoint(models_dir, name):
    agent = laya_edge.load(name, backend="onnx")
    assert agent.directory == models_dir / "multilingual"


def test_a_missing_builtin_bundle_names_the_export_command(models_dir):
    with pytest.raises(FileNotFoundError) as missing:
        laya_edge.load("typed")
    assert str(models_dir / "typed-decisions") in str(missing.value)
    assert "python -m laya_edge.export --recipe export/typed-decisions.json" in str(missing.value)


@pytest.mark.parametrize("kwargs, named", [({"backend": "eager"}, "backend='eager'"),
                                           ({"backend": "compile"}, "backend='compile'"),
                                           ({"fast": True}, "fast=True"),
                                           ({"compile": True}, "compile=True")])
def test_torch_backends_are_refused_plainly(models_dir, kwargs, named):
    with pytest.raises(ValueError) as refused:
        laya_edge.load("ml", **kwargs)
    assert named in str(refused.value) and "ONNX" in str(refused.value)


def test_torch_only_flags_left_false_are_accepted(models_dir):
    assert laya_edge.load("ml", fast=False, compile=False, backend="auto").directory.name == \
        "multilingual"


def test_flat_environment_pins_apply_when_no_pins_are_passed(monkeypatch, bundles):
    bundle = bundles["modernbert-tiny"]
    good = sha256_file(bundle / "rl_agent_config.json")
    monkeypatch.setenv("LAYA_SHA256_DIGESTS", json.dumps({"rl_agent_config.json": good}))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        assert laya_edge.load(str(bundle)).directory == bundle
        monkeypatch.setenv("LAYA_SHA256_DIGESTS", json.dumps({"rl_agent_config.json": "0" * 64}))
        with pytest.raises(ValueError, match="SHA-256 mismatch for rl_agent_config.json"):
            laya_edge.load(str(bundle))
        # explicit pins win over the environment
        assert laya_edge.load(str(bundle), expected_sha256={"rl_agent_config.json": good})
        # a nested (per-checkpoint) map is the Router's, not a flat pin
        monkeypatch.setenv("LAYA_SHA256_DIGESTS", json.dumps({"english": {"x": "0" * 64}}))
        assert laya_edge.load(str(bundle)).directory == bundle
        monkeypatch.setenv("LAYA_SHA256_DIGESTS", "{not json")
        with pytest.raises(ValueError, match="LAYA_SHA256_DIGESTS must be a JSON object"):
            laya_edge.load(str(bundle))
