"""Loading a checkpoint's tokenizer with the `tokenizers` library alone, and its special tokens.

No transformers: the fast-tokenizer file `tokenizer.json` is the whole tokenizer, and the role of
each special token (cls, sep, pad, mask) is read from the JSON configs next to it.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, NamedTuple, Optional

ROLES = ("cls", "sep", "pad", "mask")


class SpecialToken(NamedTuple):
    text: str
    id: int


class LoadedTokenizer(NamedTuple):
    """The tokenizer, and what its file said about truncation before that was switched off."""

    tokenizer: Any
    truncation_direction: Optional[str]


def load_tokenizer(directory: Any) -> LoadedTokenizer:
    """`tokenizer.json` as a `tokenizers.Tokenizer`, with stored truncation and padding off.

    Some checkpoints ship a tokenizer that pads or truncates every encode (MiniLM's pads to
    128); Laya builds its own sequences, so both are switched off once here and the tokenizer
    is never mutated afterwards, which keeps concurrent encodes safe. The stored truncation's
    direction is kept: it says which end of an option a checkpoint cuts.
    """
    from tokenizers import Tokenizer

    path = Path(directory) / "tokenizer.json"
    if not path.is_file():
        raise FileNotFoundError(
            f"tokenizer file not found: {str(path)!r}. laya_edge reads the fast-tokenizer file "
            "tokenizer.json; re-save the tokenizer with a fast tokenizer's save_pretrained().")
    try:
        tokenizer = Tokenizer.from_file(str(path))
    except Exception as exc:  # tokenizers raises a bare Exception for a file it cannot read
        raise ValueError(f"{str(path)!r} is not a tokenizer file the `tokenizers` library can "
                         f"read ({exc})") from None
    direction = (tokenizer.truncation or {}).get("direction")
    tokenizer.no_truncation()
    tokenizer.no_padding()
    return LoadedTokenizer(tokenizer, direction)


def read_json(path: Path) -> Dict[str, Any]:
    """A JSON config file's object; `{}` when the file is absent (configs are optional)."""
    if not path.is_file():
        return {}
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def _token_text(entry: Any) -> Any:
    return entry.get("content") if isinstance(entry, dict) else entry


def special_tokens(directory: Any, tokenizer: Any,
                   tokenizer_config: Optional[Dict[str, Any]] = None) -> Dict[str, SpecialToken]:
    """The cls/sep/pad/mask tokens: text from the tokenizer configs, id from the vocabulary.

    `tokenizer_config` is the directory's tokenizer_config.json when the caller has read it.
    """
    directory = Path(directory)
    if tokenizer_config is None:
        tokenizer_config = read_json(directory / "tokenizer_config.json")
    sources = (tokenizer_config, read_json(directory / "special_tokens_map.json"))
    found = {}
    for role in ROLES:
        key = f"{role}_token"
        text = next((_token_text(source[key]) for source in sources
                     if _token_text(source.get(key)) is not None), None)
        if not isinstance(text, str):
            raise ValueError(f"tokenizer in {str(directory)!r} names no {key} in "
                             "tokenizer_config.json or special_tokens_map.json")
        token_id = tokenizer.token_to_id(text)
        if token_id is None:
            raise ValueError(f"tokenizer in {str(directory)!r}: {key} {text!r} is not in "
                             "the vocabulary")
        found[role] = SpecialToken(text, token_id)
    return found
