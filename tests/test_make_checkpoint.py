"""laya_edge.export.synthetic writes checkpoints that upstream laya 0.4.15 loads offline."""
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

# Nothing here may reach the network; set before huggingface_hub is imported anywhere.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import laya  # noqa: E402 -- after the offline switches above
import safetensors  # noqa: E402

from laya_edge.export import synthetic as mc  # noqa: E402
from laya_edge.export.synthetic.writing import dir_size  # noqa: E402

QUESTIONS = {
    "dept": {"type": "choice", "instructions": "Which team?", "criteria": ["billing", "tech"]},
    "urgent": {"type": "noul", "instructions": "Is this urgent?"},
    "sev": {"type": "score", "instructions": "Severity", "criteria": ["low", "mid", "high"]},
    "topic": {"type": "choice", "instructions": "Topic",
              "criteria": {"refund": "money back", "login": "", "shipping": "delivery", "other": None}},
}


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    root = tmp_path_factory.mktemp("checkpoints")
    return {kind: mc.make_checkpoint(kind, root / kind, seed=0) for kind in mc.SMALL_KINDS}


def _load(path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)   # modernbert-tiny's clamped bucket
        return laya.load(str(path), device="cpu")


@pytest.mark.parametrize("kind", mc.SMALL_KINDS)
def test_upstream_loads_and_answers(checkpoints, kind):
    agent = _load(checkpoints[kind])
    answers = agent.system_one("My card was charged twice", QUESTIONS)["answers"]

    dept = answers["dept"]
    assert dept["type"] == "choice" and dept["choice"] in ("billing", "tech")
    assert list(dept["probabilities"]) == ["billing", "tech"]
    assert sum(dept["probabilities"].values()) == pytest.approx(1.0, abs=1e-3)

    topic = answers["topic"]
    assert list(topic["probabilities"]) == ["refund", "login", "shipping", "other"]
    assert sum(topic["probabilities"].values()) == pytest.approx(1.0, abs=1e-3)

    sev = answers["sev"]
    assert sev["type"] == "score" and list(sev["probabilities"]) == ["0", "1", "2"]
    assert sum(sev["probabilities"].values()) == pytest.approx(1.0, abs=1e-3)
    assert 0.0 <= sev["score"] <= 2.0
    assert sev["legend"] == {"0": "low", "1": "mid", "2": "high"}

    urgent = answers["urgent"]
    assert urgent["type"] == "noul" and 0.0 <= urgent["noul"] <= 1.0
    assert urgent["confidence"] == pytest.approx(max(urgent["noul"], 1 - urgent["noul"]), abs=1e-3)


@pytest.mark.parametrize("kind", mc.SMALL_KINDS)
def test_long_state_is_truncated_not_rejected(checkpoints, kind):
    agent = _load(checkpoints[kind])
    state = "The printer stopped working after the update and nobody can print. " * 200
    result = agent.system_one(state, {"urgent": QUESTIONS["urgent"]})
    assert result["usage"]["truncated"] is True
    assert 0.0 <= result["answers"]["urgent"]["noul"] <= 1.0


@pytest.mark.parametrize("kind", mc.SMALL_KINDS)
def test_checkpoint_layout(checkpoints, kind):
    path = checkpoints[kind]
    for name in ("rl_agent_config.json", "model.safetensors", "tokenizer/tokenizer.json",
                 "tokenizer/tokenizer_config.json", "tokenizer/special_tokens_map.json",
                 "encoder/config.json"):
        assert (path / name).is_file(), name
    cfg = json.loads((path / "rl_agent_config.json").read_text())
    assert {"encoder", "head_layers", "max_len", "head_max_len", "temperature"} <= set(cfg)
    assert len(cfg["temperature"]) == 3

    with safetensors.safe_open(str(path / "model.safetensors"), "pt") as f:
        names = list(f.keys())
        float_dtypes = {str(f.get_tensor(n).dtype) for n in names if f.get_tensor(n).is_floating_point()}
    assert float_dtypes == {"torch.float16"}
    for prefix in ("encoder.", "type_emb.", "scorer.", "act_head.", "head.layers.1."):
        assert any(n.startswith(prefix) for n in names), prefix

    tok_cfg = json.loads((path / "tokenizer/tokenizer_config.json").read_text())
    enc_cfg = json.loads((path / "encoder/config.json").read_text())
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(str(path / "tokenizer/tokenizer.json"))
    for role in ("cls_token", "sep_token", "pad_token", "mask_token", "unk_token"):
        token_id = tok.token_to_id(tok_cfg[role])
        assert token_id is not None and token_id < enc_cfg["vocab_size"], role
    assert tok.token_to_id(tok_cfg["pad_token"]) == enc_cfg["pad_token_id"]
    assert tok.get_vocab_size() <= enc_cfg["vocab_size"]


@pytest.mark.parametrize("kind", ["modernbert-tiny", "unigram-tiny"])
def test_tiny_kinds_are_small(checkpoints, kind):
    assert dir_size(checkpoints[kind]) < 5_000_000


def test_unigram_special_ids_follow_mmbert(checkpoints):
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(str(checkpoints["unigram-tiny"] / "tokenizer/tokenizer.json"))
    assert [tok.token_to_id(t) for t in ("<pad>", "<eos>", "<bos>", "<unk>", "<mask>")] == [0, 1, 2, 3, 4]
    cfg = json.loads((checkpoints["unigram-tiny"] / "rl_agent_config.json").read_text())
    assert (cfg["max_len"], cfg["head_max_len"]) == (1024, 256)


def test_clamp_test_bucket_warns(checkpoints, tmp_path):
    with pytest.warns(RuntimeWarning, match=r"choice:11\+=0\.1005"):
        agent = laya.load(str(checkpoints["modernbert-tiny"]), device="cpu")
    assert agent.temperature_by_options["choice:11+"] == 0.5

    plain = mc.make_checkpoint("modernbert-tiny", tmp_path / "plain", seed=0, clamp_test=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        agent = laya.load(str(plain), device="cpu")
    assert agent.temperature_by_options["choice:11+"] == 0.75


def test_loading_does_not_rewrite_the_checkpoint(checkpoints):
    # upstream patches tokenizer_config.json in place when tokenizer_class is missing
    for path in checkpoints.values():
        before = {p: p.read_bytes() for p in path.rglob("*") if p.is_file()}
        _load(path)
        assert before == {p: p.read_bytes() for p in path.rglob("*") if p.is_file()}


@pytest.mark.parametrize("kind", ["modernbert-tiny", "unigram-tiny"])
def test_same_seed_same_bytes(tmp_path, kind):
    def files(root):
        return {p.relative_to(root): p.read_bytes() for p in root.rglob("*") if p.is_file()}

    a = files(mc.make_checkpoint(kind, tmp_path / "a", seed=3))
    b = files(mc.make_checkpoint(kind, tmp_path / "b", seed=3))
    c = files(mc.make_checkpoint(kind, tmp_path / "c", seed=4))
    assert a == b
    assert a[Path("model.safetensors")] != c[Path("model.safetensors")]


def test_refuses_to_overwrite_without_force(checkpoints):
    with pytest.raises(SystemExit):
        mc.make_checkpoint("modernbert-tiny", checkpoints["modernbert-tiny"], seed=0)


def test_cli_check(tmp_path):
    out = tmp_path / "cli"
    proc = subprocess.run([sys.executable, "-m", "laya_edge.export.synthetic", "--kind", "unigram-tiny", "--out", str(out),
                           "--check"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "laya.load + system_one OK" in proc.stderr
    assert (out / "model.safetensors").is_file()
