"""Tokenizers for the synthetic checkpoints, trained here with the `tokenizers` library:
byte-level BPE in ModernBERT's style, Unigram in mmBERT's, and the tokenizer files a checkpoint
ships."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Sequence

from .writing import write_json


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
