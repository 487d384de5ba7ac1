"""Checks of the controls (`max_len`, `head_max_len`, `batch_size`, `lang`, `max_loaded`) before
inference.

The rule they follow (docs/agent.md, "Controls"): where upstream laya answers a value, answer the
same and warn when the value looks like a mistake; where upstream fails deep inside with a Python
internals message, fail here first with the same exception type and a message naming the argument.
"""
from __future__ import annotations

import operator
import warnings
from typing import Any, Optional


class LangTypeError(TypeError, AttributeError):
    """`lang` is not a language code. Upstream fails on such a value with an AttributeError (or a
    TypeError for bytes), so this is both: code that caught either keeps working."""


def _warn(message: str) -> None:
    warnings.warn(message, RuntimeWarning, stacklevel=3)


def check_max_len(value: Any) -> Any:
    """`max_len` as given, when it is a whole number of tokens."""
    try:
        operator.index(value)
    except TypeError:
        raise TypeError(f"max_len must be an int (a number of tokens), got "
                        f"{type(value).__name__} {value!r}") from None
    return value


def head_max_len_error(value: Any) -> Optional[TypeError]:
    """The error to raise when building a question head with `value` failed on its type, or None
    when `value` is a proper int (then the failure is not about `head_max_len`)."""
    try:
        operator.index(value)
    except TypeError:
        return TypeError(f"head_max_len must be an int (a number of tokens), got "
                         f"{type(value).__name__} {value!r}")
    return None


def warn_head_max_len(value: Any) -> None:
    """Upstream answers a float `head_max_len` where its value never reaches a slice; so do we,
    with a warning (a number that does reach one fails, see `head_max_len_error`)."""
    if value is not None and isinstance(value, float):
        _warn(f"head_max_len={value!r} is not an int; pass a whole number of tokens")


def check_batch_size(batch_size: Any) -> Optional[int]:
    """States per session run, or None for all at once. A falsy or non-positive `batch_size`
    means all at once, as upstream reads it, with a warning unless it is None."""
    if batch_size is None:
        return None
    try:
        positive = bool(batch_size) and batch_size > 0
        return operator.index(batch_size) if positive else _all_at_once(batch_size)
    except TypeError:
        raise TypeError(f"batch_size must be a positive int or None, got "
                        f"{type(batch_size).__name__} {batch_size!r}") from None


def _all_at_once(batch_size: Any) -> None:
    _warn(f"batch_size={batch_size!r} is not a positive int; answering all states in one batch "
          "(pass None for that)")


def check_positions(longest: int, max_len: int, positions: Optional[int]) -> None:
    """Refuse a row longer than the model's position table (upstream fails inside torch)."""
    if positions is not None and longest > positions:
        raise ValueError(f"max_len={max_len} lets a row grow to {longest} tokens, past this "
                         f"model's {positions} positions; pass max_len={positions} or less")


def check_lang(lang: Any) -> Any:
    """`lang` when it is a language code (or empty: no override, as upstream reads it)."""
    if lang is None or isinstance(lang, str):
        return lang
    if not lang:
        _warn(f"lang={lang!r} is not a language code; no per-language temperatures apply")
        return lang
    raise LangTypeError(f"lang must be a language code string such as 'en' or 'de-CH', got "
                        f"{type(lang).__name__} {lang!r}")


def check_max_loaded(value: Any) -> int:
    """How many agents a Router keeps: `int(value)`, at least 1, as upstream reads it, with a
    warning when that is not what was written."""
    try:
        count = int(value)
    except (TypeError, ValueError) as exc:
        raise type(exc)(f"max_loaded must be a positive int, got {type(value).__name__} "
                        f"{value!r}") from None
    if count < 1 or isinstance(value, bool) or count != value:
        _warn(f"max_loaded={value!r} is not a positive int; keeping {max(1, count)} "
              "checkpoint(s) loaded")
    return max(1, count)
