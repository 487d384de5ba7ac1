"""Which script a text is written in: its letters binned by Unicode range, exactly.

The first question of language detection (laya_edge.lang): text whose letters are mostly, or
noticeably, not Latin cannot be read by the English checkpoint. Standard library only.
"""
from __future__ import annotations

import bisect
import unicodedata
from collections import Counter
from functools import lru_cache
from typing import Dict, List, Optional, Tuple

from .lang_tables import LATE_LETTERS, SCRIPT_TABLE

#: Non-Latin letter share that carries a text whose plurality script is Latin ...
NON_LATIN_FRACTION = 0.2
#: ... or this smaller share, when it amounts to at least NON_LATIN_MIN_LETTERS letters.
NON_LATIN_MIN_FRACTION = 0.1
NON_LATIN_MIN_LETTERS = 10


def _parse_ranges(spec: str) -> List[Tuple[int, int]]:
    """``"0370-03FF 1F00"`` -> ``[(0x370, 0x3FF), (0x1F00, 0x1F00)]``."""
    ranges = []
    for item in spec.split():
        low, _, high = item.partition("-")
        ranges.append((int(low, 16), int(high or low, 16)))
    return ranges


def _sorted_table(entries: List[Tuple[int, int, Optional[str]]]):
    """Split sorted, non-overlapping ``(low, high, name)`` entries into bisectable columns."""
    entries = sorted(entries)
    for (_, high, _), (low, _, _) in zip(entries, entries[1:]):
        if low <= high:
            raise ValueError("overlapping code point ranges")
    return (tuple(e[0] for e in entries), tuple(e[1] for e in entries),
            tuple(e[2] for e in entries))


_SCRIPT_LOWS, _SCRIPT_HIGHS, _SCRIPT_NAMES = _sorted_table(
    [(low, high, name) for name, spec in SCRIPT_TABLE for low, high in _parse_ranges(spec)])
_LATE_LOWS, _LATE_HIGHS, _ = _sorted_table(
    [(low, high, None) for low, high in _parse_ranges(LATE_LETTERS)])
_LATE_FLOOR = _LATE_LOWS[0]


def _in_table(cp: int, lows: Tuple[int, ...], highs: Tuple[int, ...]) -> int:
    """Index of the range holding ``cp``, or -1."""
    i = bisect.bisect_right(lows, cp) - 1
    return i if i >= 0 and cp <= highs[i] else -1


def is_letter(ch: str) -> bool:
    """``str.isalpha``, extended to letters this interpreter's Unicode database predates."""
    if ch.isalpha():
        return True
    cp = ord(ch)
    return (cp >= _LATE_FLOOR and unicodedata.category(ch) == "Cn"
            and _in_table(cp, _LATE_LOWS, _LATE_HIGHS) >= 0)


def is_latin(cp: int) -> bool:
    """Latin code points: ASCII to IPA Extensions, Latin Extended Additional, fullwidth letters."""
    return (cp < 0x02B0 or 0x1E00 <= cp <= 0x1EFF
            or 0xFF21 <= cp <= 0xFF3A or 0xFF41 <= cp <= 0xFF5A)


def _named_script(cp: int) -> Optional[str]:
    """The table script of a non-Latin code point (letter or not), or None."""
    if is_latin(cp):
        return None
    i = _in_table(cp, _SCRIPT_LOWS, _SCRIPT_HIGHS)
    return _SCRIPT_NAMES[i] if i >= 0 else None


# Marker for a combining mark in the non-Latin word scan: it neither extends nor ends a run.
_TRANSPARENT = ""


@lru_cache(maxsize=8192)
def char_info(ch: str) -> Tuple[Optional[str], bool, Optional[str]]:
    """``(letter script or None, isalpha, word script)`` of one character.

    The letter script is ``"latin"``, a table name or ``"other"``; the word script is the table
    script used by the non-Latin word scan (non-letters of a script's block included), or
    ``_TRANSPARENT`` for a combining mark.
    """
    cp = ord(ch)
    word = _TRANSPARENT if unicodedata.combining(ch) else _named_script(cp)
    if not is_letter(ch):
        return None, False, word
    if is_latin(cp):
        return "latin", ch.isalpha(), word
    return _named_script(cp) or "other", ch.isalpha(), word


_ASCII_LETTERS = bytes(range(65, 91)) + bytes(range(97, 123))


def alpha_count(text: str) -> int:
    """Number of ``str.isalpha`` characters."""
    if text.isascii():
        return len(text) - len(text.encode("ascii").translate(None, _ASCII_LETTERS))
    return sum(map(str.isalpha, text))


class Tally:
    """Letter counts of one text: per script, isalpha total, and whether any table-script
    character occurs (a precondition for a non-Latin word)."""

    __slots__ = ("counts", "alpha", "scripted")

    def __init__(self, text: str) -> None:
        if text.isascii():
            letters = alpha_count(text)
            self.counts: Dict[str, int] = {"latin": letters}
            self.alpha = letters
            self.scripted = False
            return
        counts: Dict[str, int] = {}
        latin = alpha = 0
        scripted = False
        # Counter keeps first-occurrence order, so scripts are keyed in the order they appear.
        for ch, n in Counter(text).items():
            script, is_alpha, word = char_info(ch)
            if is_alpha:
                alpha += n
            if word:
                scripted = True
            if script == "latin":
                latin += n
            elif script is not None:
                counts[script] = counts.get(script, 0) + n
        counts["latin"] = latin  # last: a named script wins a tie against Latin
        self.counts, self.alpha, self.scripted = counts, alpha, scripted


def dominant(counts: Dict[str, int]) -> str:
    """Key with the largest count (first wins ties), or ``"unknown"`` without letters."""
    best, best_n = "unknown", 0
    for script, n in counts.items():
        if n > best_n:
            best, best_n = script, n
    return best


def profile(counts: Dict[str, int]) -> Dict[str, float]:
    """Share of letters per script, Latin first, zero counts left out."""
    total = sum(counts.values())
    if not total:
        return {}
    shares: Dict[str, float] = {}
    if counts.get("latin"):
        shares["latin"] = counts["latin"] / total
    for script, n in counts.items():
        if n and script != "latin":
            shares[script] = n / total
    return shares


def carries(fraction: float, letters: int) -> bool:
    """Whether non-Latin letters are enough to make a Latin-plurality text non-Latin."""
    return (fraction >= NON_LATIN_FRACTION
            or (fraction >= NON_LATIN_MIN_FRACTION and letters >= NON_LATIN_MIN_LETTERS))


def has_non_latin_word(text: str, tally: Optional[Tally] = None) -> bool:
    """Whether ``text`` holds a run of two or more characters of one table script that does not
    start with a capital (a capitalised run is a name, a single character a symbol). Combining
    marks are skipped, so they never split a run."""
    if tally is None:
        tally = Tally(text)
    if not tally.scripted:
        return False
    script: Optional[str] = None
    length = 0
    capital = False
    for ch in text:
        word = char_info(ch)[2]
        if word == _TRANSPARENT:
            continue
        if word is not None and word == script:
            length += 1
            if length == 2 and not capital:
                return True
            continue
        script = word
        length = 1 if word else 0
        capital = bool(word) and ch.isupper()
    return False


def detect_script(text: str) -> str:
    """Dominant script of ``text`` (``latin``, ``han``, ``cyrillic``, ..., ``other``), or
    ``unknown`` when it has no letters. No promotion of a non-Latin minority."""
    return dominant(Tally(text).counts)


def script_profile(text: str) -> Dict[str, float]:
    """Share of the letters of ``text`` in each script, Latin first; ``{}`` without letters."""
    return profile(Tally(text).counts)
