"""Which language Latin-script text is in, from evidence: function words per language, the
share of letters English does not use, and the identifiers and code that are no evidence at all.

Part of language detection (laya_edge.lang, which adds the rules for capitals, foreign lines and
nested states); the word lists are in laya_edge.lang_tables. Standard library only, and every
pattern is linear-time: states are user input.
"""
from __future__ import annotations

import re
from collections import Counter
from typing import Any, Dict, FrozenSet, List, Optional, Tuple

from .lang_tables import (COLLISIONS, NON_EN_LETTERS, NORDIC_OVERLAP, SHORT_SWEDISH, STOPWORDS,
                          SWEDISH_OPENERS)

Result = Dict[str, Any]

#: Share of non-English letters at which Latin text counts as non-English.
NON_EN_DIACRITIC_RATE = 0.02
#: Above this share of non-English letters, English function words cannot rescue the text.
ENGLISH_RESCUE_DIACRITIC_RATE = 0.06

# --------------------------------------------------------------------------------------------
# Word evidence over the function-word lists of laya_edge.lang_tables
# --------------------------------------------------------------------------------------------

def _shared_words() -> FrozenSet[str]:
    seen: Counter = Counter(w for words in STOPWORDS.values() for w in words)
    return frozenset(w for w, n in seen.items() if n > 1) | NORDIC_OVERLAP


_SHARED = _shared_words()
# word -> the lists that hold it, in list order
_LISTS_OF: Dict[str, Tuple[str, ...]] = {
    word: tuple(code for code, words in STOPWORDS.items() if word in words)
    for word in frozenset().union(*STOPWORDS.values())}
_EN_ONLY = STOPWORDS["en"] - _SHARED

_NON_EN_LETTER_RE = re.compile("[" + "".join(sorted(NON_EN_LETTERS)) + "]")

# --------------------------------------------------------------------------------------------
# Patterns. Each is linear-time: no nested or adjacent overlapping repetition.
# --------------------------------------------------------------------------------------------

# A word: a run of word characters that are neither digits nor underscores.
WORD = re.compile(r"[^\W\d_]+")
# An identifier (URL host, e-mail, version, dotted abbreviation, decimal). The look-behind pins
# every match to the start of a [\w-] run; since "." and "@" are not in [\w-], a failed attempt
# costs one pass over that run and no other start inside it is tried.
_IDENTIFIER = re.compile(r"(?<![\w-])[\w-]*(?:[.@][\w-]+)+")
# Two or more letters in a row; an all-caps one is an acronym or emphasis.
LETTER_RUN = re.compile(r"[^\W\d_]{2,}")
# Program text: assignments, statement ends, braces, brackets, or a call ``name(``.
CODE_LINE = re.compile(r"[=;{}\[\]]|\w\(")
# Letter-or-digit, joiner, letter-or-digit: a dotted/underscored name, a path or a compound.
JOINED = re.compile(r"[^\W_][._/\\][^\W_]")

# --------------------------------------------------------------------------------------------
# Latin-script language (docs/design/routing.md#latin-text)
# --------------------------------------------------------------------------------------------

def _prose_words(text: str) -> List[str]:
    """Lower-case words of ``text`` with identifiers removed."""
    return WORD.findall(_IDENTIFIER.sub(" ", text).replace("İ", "i").lower())


def _non_english_rate(text: str) -> float:
    """Share of the (lower-cased) characters of ``text`` that English does not use."""
    lowered = text.lower()
    if lowered.isascii():
        return 0.0
    return len(_NON_EN_LETTER_RE.findall(lowered)) / max(1, len(lowered))


def _scores(words: List[str]) -> Tuple[Dict[str, int], FrozenSet[str]]:
    """Function-word score per language (a collision word counts once however often it
    repeats), and the languages that matched a word no other list holds."""
    scores = dict.fromkeys(STOPWORDS, 0)
    evidenced = set()
    for word, n in Counter(words).items():
        codes = _LISTS_OF.get(word)
        if codes is None:
            continue
        weight = 1 if word in COLLISIONS else n
        for code in codes:
            scores[code] += weight
        if word not in _SHARED:
            evidenced.update(codes)
    return scores, frozenset(evidenced)


def _best_evidenced(scores: Dict[str, int], evidenced: FrozenSet[str]) -> Tuple[Optional[str], int]:
    """Highest-scoring evidenced non-English language (list order breaks ties), or (None, 0)."""
    best, best_score = None, 0
    for code in STOPWORDS:
        if code != "en" and code in evidenced and (best is None or scores[code] > best_score):
            best, best_score = code, scores[code]
    return best, best_score


def _english_rescue(distinct: set, rate: float) -> bool:
    """English wins despite marked letters: a low rate, two English-only words, and at most one
    word carrying a non-English letter (a loanword or a name)."""
    if rate >= ENGLISH_RESCUE_DIACRITIC_RATE or len(distinct & _EN_ONLY) < 2:
        return False
    marked = sum(1 for w in distinct if not NON_EN_LETTERS.isdisjoint(w))
    return marked <= 1


def _decide(words: List[str], distinct: set, rate: float,
            marked: bool) -> Tuple[Optional[str], int]:
    """Language code (or None) and English score for four or more words."""
    scores, evidenced = _scores(words)
    en = scores["en"]
    best, score = _best_evidenced(scores, evidenced)
    if best and score >= max(2, en + 2):
        return best, en
    if (best == "sv" and "inte" in distinct and "kan" in distinct
            and words[0] in SWEDISH_OPENERS and en <= 1):
        return best, en
    if best and marked and score >= max(2, en):
        return best, en
    if en and (not marked or _english_rescue(distinct, rate)):
        return "en", en
    return None, en


def latin_evidence(text: str, diagnostic: Optional[dict] = None) -> Result:
    """``latin_profile``, optionally recording the reason in ``diagnostic``."""
    words = _prose_words(text)
    rate = _non_english_rate(text)
    marked = rate >= NON_EN_DIACRITIC_RATE
    distinct = set(words)
    nordic = not distinct.isdisjoint(NORDIC_OVERLAP) and distinct.isdisjoint(_EN_ONLY)
    if 1 < len(words) < 4 and not distinct.isdisjoint(SHORT_SWEDISH):
        reason, language, en, looks = "short_swedish", "sv", 0, marked
    elif len(words) < 4:
        reason, language, en, looks = "insufficient_words", None, 0, marked or nordic
    else:
        language, en = _decide(words, distinct, rate, marked)
        reason = "language_evidence" if language else "no_language_evidence"
        looks = marked or (language is None and nordic)
    if diagnostic is not None:
        diagnostic["reason"] = reason
    return {"language": language, "english_hits": en, "diacritic_rate": rate,
            "looks_non_english": looks}


def latin_profile(text: str) -> Result:
    """Evidence for the language of Latin-script ``text``.

    ``language`` (a code, or None when undecided), ``english_hits`` (English function-word
    score), ``diacritic_rate`` (share of non-English letters) and ``looks_non_english`` (marked
    letters, or Nordic words without English ones: not English even when undecided).
    """
    return latin_evidence(text)


def guess_latin_language(text: str) -> Optional[str]:
    """Best-effort language code of Latin-script ``text``, or None."""
    return latin_evidence(text)["language"]
