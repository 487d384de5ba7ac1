"""Script and language detection for checkpoint routing, with no dependency.

Routing needs a single bit: can the English checkpoint read this state, or not? The English
checkpoint has an English-only vocabulary, so it fails outright on other scripts and loses
calibration on other Latin-script languages, while the multilingual checkpoint only loses a few
points on English. The detector therefore answers two questions, in order of certainty:

1. *Which script?* Exact: letters are binned by Unicode range (laya_edge.script_detect). A state
   whose letters are mostly, or noticeably, non-Latin is not English.
2. *Is the Latin text English?* Best effort: function-word counts per language and the share of
   letters English does not use (laya_edge.latin_language), and here the rules against acronyms,
   shouting, identifiers, code and foreign lines inside English states. "Undecided" is kept apart
   from "English" so that text with non-English letters is never handed to the English
   checkpoint just because no word list named it.

Callers that already know the language should pass it explicitly instead (``lang=``).

Everything here is standard library, and every pattern is linear-time: states are user input.
The behavioural oracle is upstream ``laya.lang`` 0.4.15; this is an independent implementation of
the rules written down in docs/design/routing.md.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Dict, Iterator, List, Optional, Tuple, Union

from .lang_tables import STOPWORDS
from .latin_language import (CODE_LINE, ENGLISH_RESCUE_DIACRITIC_RATE, JOINED, LETTER_RUN,
                             NON_EN_DIACRITIC_RATE, WORD, guess_latin_language, latin_evidence,
                             latin_profile)
from .script_detect import (NON_LATIN_FRACTION, NON_LATIN_MIN_FRACTION, NON_LATIN_MIN_LETTERS,
                            Tally, alpha_count, carries, detect_script, dominant,
                            has_non_latin_word, profile, script_profile)

__all__ = [
    "ENGLISH_RESCUE_DIACRITIC_RATE",
    "MAX_DEPTH",
    "NON_EN_DIACRITIC_RATE",
    "NON_LATIN_FRACTION",
    "NON_LATIN_MIN_FRACTION",
    "NON_LATIN_MIN_LETTERS",
    "SHOUTED_MIN_STOPWORD",
    "SHOUTED_MIN_WORD",
    "TEXT_BUDGET",
    "analyse",
    "detect_script",
    "guess_latin_language",
    "is_english",
    "latin_profile",
    "script_profile",
    "state_text",
]

State = Union[str, bytes, bytearray, Mapping, list, tuple, None]
Result = Dict[str, Any]

# --------------------------------------------------------------------------------------------
# Constants
# --------------------------------------------------------------------------------------------

#: An all-caps text must match a function word of at least this many letters ...
SHOUTED_MIN_STOPWORD = 4
#: ... and hold a word of at least this many letters; shorter all-caps runs are acronyms.
SHOUTED_MIN_WORD = 5
#: Characters read from a state (flattened text, segment scan, per-line sample).
TEXT_BUDGET = 4000
#: Values nested deeper than this many containers are ignored.
MAX_DEPTH = 6

# --------------------------------------------------------------------------------------------
# Text extraction (docs/design/routing.md#text)
# --------------------------------------------------------------------------------------------

KeyPath = Optional[Tuple[Union[str, int], ...]]


def _key_in_path(key: Any) -> bool:
    """Keys a diagnostic path may show: short strings and 63-bit integers (not bools)."""
    return ((type(key) is str and len(key) <= 128)
            or (type(key) is int and key.bit_length() <= 63))


def _leaves(state: Any, depth: int = 0, path: KeyPath = ()) -> Iterator[Tuple[str, KeyPath]]:
    """Text leaves of a state, depth-first, with their paths (``None`` once a key cannot be
    shown). Mapping keys are skipped (field names are English); numbers and bools are not text."""
    if depth > MAX_DEPTH or state is None:
        return
    if isinstance(state, str):
        yield state, path
    elif isinstance(state, (bytes, bytearray)):
        try:
            text = bytes(state).decode("utf-8")
        except UnicodeDecodeError:
            return
        yield text, path
    elif isinstance(state, Mapping):
        for key, value in state.items():
            child = path + (key,) if path is not None and _key_in_path(key) else None
            yield from _leaves(value, depth + 1, child)
    elif isinstance(state, (list, tuple)):
        for index, value in enumerate(state):
            yield from _leaves(value, depth + 1, None if path is None else path + (index,))


def _texts(state: Any) -> Iterator[str]:
    return (leaf for leaf, _ in _leaves(state))


def state_text(state: State, max_chars: int = TEXT_BUDGET) -> str:
    """The text detection reads: leaves joined by spaces, at most ``max_chars`` characters."""
    parts: List[str] = []
    budget = max_chars
    for leaf in _texts(state):
        if budget <= 0:
            break
        if len(leaf) > budget:
            parts.append(leaf[:budget])
            break
        parts.append(leaf)
        budget -= len(leaf) + 1
    return " ".join(parts)[:max_chars]


# --------------------------------------------------------------------------------------------
# Capitals: shouting and acronyms (docs/design/routing.md#latin-text)
# --------------------------------------------------------------------------------------------

def _shouted(text: str) -> bool:
    """Cased text with no lower-case character."""
    return not any(map(str.islower, text)) and any(map(str.isupper, text))


def _shouted_evidence(tokens: List[str], language: str, rate: float) -> bool:
    """Whether all-caps words support ``language`` beyond acronym-shaped tokens."""
    if not any(len(t) >= SHOUTED_MIN_WORD for t in tokens):
        return False
    if rate >= NON_EN_DIACRITIC_RATE:
        return True
    vocab = STOPWORDS.get(language, frozenset())
    return any(len(w) >= SHOUTED_MIN_STOPWORD for w in {t.lower() for t in tokens} & vocab)


def _blank_caps(text: str) -> str:
    """``text`` with every all-caps letter run replaced by a space."""
    return LETTER_RUN.sub(lambda m: " " if m.group().isupper() else m.group(), text)


def _only_acronyms(text: str) -> bool:
    """Mixed-case text whose all-caps runs exist and are all acronym-short."""
    caps = [run for run in LETTER_RUN.findall(text) if run.isupper()]
    return bool(caps) and all(len(run) < SHOUTED_MIN_WORD for run in caps)


# --------------------------------------------------------------------------------------------
# Whole-text verdict
# --------------------------------------------------------------------------------------------

def _verdict(text: str, diagnostic: Optional[dict] = None) -> Result:
    """Detection result for one flattened string (no segment or value scan)."""
    tally = Tally(text)
    counts = tally.counts
    shares = profile(counts)
    script = dominant(counts)
    fraction = round(1.0 - shares.get("latin", 0.0), 4) if shares else 0.0
    carried = carries(fraction, round(fraction * tally.alpha))
    if script == "latin" and carried and has_non_latin_word(text, tally):
        script = dominant({k: n for k, n in counts.items() if k != "latin"})
    if script == "unknown" or script != "latin":
        unknown = script == "unknown"
        if diagnostic is not None:
            diagnostic["reason"] = "no_letters" if unknown else "non_latin_script"
        return {"script": script, "script_profile": shares, "language": None,
                "is_english": unknown, "language_undecided": True, "diacritic_rate": 0.0,
                "non_latin_fraction": 0.0 if unknown else fraction, "mixed_segment": None}
    evidence = latin_evidence(text, diagnostic)
    language = evidence["language"]
    if language not in (None, "en") and not carried:
        language = _recheck_caps(text, language, evidence["diacritic_rate"], diagnostic)
    undecided = language is None
    english = language == "en" or (undecided and not evidence["looks_non_english"])
    if diagnostic is not None and undecided and not english:
        diagnostic["reason"] = "non_english_markers"
    return {"script": "latin", "script_profile": shares, "language": language,
            "is_english": english, "language_undecided": undecided,
            "diacritic_rate": round(float(evidence["diacritic_rate"]), 4),
            "non_latin_fraction": fraction, "mixed_segment": None}


def _recheck_caps(text: str, language: str, rate: float,
                  diagnostic: Optional[dict]) -> Optional[str]:
    """Drop a foreign verdict that rests on shouting or acronyms."""
    if _shouted(text):
        if _shouted_evidence(WORD.findall(text), language, rate):
            return language
        if diagnostic is not None:
            diagnostic["reason"] = "caps_veto"
        return None
    if not _only_acronyms(text):
        return language
    blanked = _blank_caps(text)
    if blanked == text:
        return language
    if diagnostic is not None:
        diagnostic["reason"] = "caps_filtered"
    return latin_evidence(blanked)["language"]


# --------------------------------------------------------------------------------------------
# Foreign lines inside English states (docs/design/routing.md#states-with-several-parts)
# --------------------------------------------------------------------------------------------

def _named_prose_language(line: str) -> Optional[str]:
    """Non-English language one prose line is clearly written in, or None."""
    if not line.strip() or CODE_LINE.search(line):
        return None
    prose = " ".join(tok for tok in line.split() if not JOINED.search(tok))
    shouted = _shouted(prose)
    if not shouted:
        prose = _blank_caps(prose)
    tokens = WORD.findall(prose)
    if len(tokens) < 4:
        return None
    evidence = latin_evidence(prose)
    language = evidence["language"]
    if language in (None, "en"):
        return None
    if shouted and not _shouted_evidence(tokens, language, float(evidence["diacritic_rate"])):
        return None
    if len({t.lower() for t in tokens} & STOPWORDS[language]) < 2:
        return None
    return language


def _source(index: int, path: KeyPath, line: int) -> Dict[str, Any]:
    return {"leaf_index": index, "path": None if path is None else list(path), "line": line}


def _has_parts(state: Any) -> bool:
    """More than one leaf, or a leaf with several lines."""
    for count, leaf in enumerate(_texts(state), 1):
        if count > 1 or "\n" in leaf:
            return True
    return False


def _segment_scan(state: Any, diagnostic: Optional[dict]) -> Optional[Tuple[str, str]]:
    """First line (within the shared budget) that names a non-English language:
    ``(language, stripped line)``."""
    seen = 0
    for index, (leaf, path) in enumerate(_leaves(state)):
        for number, line in enumerate(leaf.split("\n"), 1):
            if seen >= TEXT_BUDGET:
                return None
            line = line[:TEXT_BUDGET - seen]
            seen += len(line)
            language = _named_prose_language(line)
            if language:
                if diagnostic is not None:
                    diagnostic.update(stage="segment", reason="named_segment",
                                      source=_source(index, path, number))
                return language, line.strip()
    return None


def _line_reason(sample: str, det: Result) -> Optional[str]:
    """Why one non-English line of a value counts (diagnostic reason), or None if it does not."""
    if det["language"] not in (None, "en") and _named_prose_language(sample) is not None:
        return "named_value"
    if det["script"] not in ("latin", "unknown"):
        if has_non_latin_word(sample) and alpha_count(sample) >= NON_LATIN_MIN_LETTERS:
            return "non_latin_value"
        return None
    if det["diacritic_rate"] >= NON_EN_DIACRITIC_RATE and len(WORD.findall(sample)) >= 4:
        return "diacritic_value"
    return None


def _value_candidate(leaf: str) -> Optional[Tuple[Result, int, str]]:
    """The qualifying non-English line of one value with the most letters:
    ``(verdict, 1-based line, reason)``."""
    best: Optional[Tuple[Result, int, str]] = None
    best_letters = -1
    for number, line in enumerate(leaf.split("\n"), 1):
        if len(line) < 7:  # too short for four words or ten letters
            continue
        sample = line[:TEXT_BUDGET]
        if not sample.strip() or CODE_LINE.search(sample):
            continue
        det = _verdict(sample)
        if det["is_english"]:
            continue
        reason = _line_reason(sample, det)
        if reason is None:
            continue
        letters = alpha_count(sample)
        if letters > best_letters:
            best, best_letters = (det, number, reason), letters
    return best


def _value_scan(state: Any) -> Optional[Tuple[Result, Dict[str, Any], str]]:
    """Across the leaves of a structured state, the non-English value with the most letters:
    ``(verdict, source, reason)``."""
    best = None
    best_letters = -1
    for index, (leaf, path) in enumerate(_leaves(state)):
        found = _value_candidate(leaf)
        if found is None:
            continue
        letters = alpha_count(leaf[:TEXT_BUDGET])
        if letters > best_letters:
            det, number, reason = found
            best, best_letters = (det, _source(index, path, number), reason), letters
    return best


# --------------------------------------------------------------------------------------------
# Public entry points
# --------------------------------------------------------------------------------------------

def analyse(state: State, *, explain: bool = False) -> Result:
    """Detection result for a state (str, bytes, mapping, list/tuple, nested up to depth 6).

    Keys, in order: ``script``, ``script_profile``, ``language``, ``is_english``,
    ``language_undecided``, ``diacritic_rate``, ``non_latin_fraction``, ``mixed_segment``; with
    ``explain=True`` also ``diagnostic`` (stage, reason and source leaf/path/line; never text).
    """
    diagnostic = {"stage": "whole_state", "reason": None, "source": None} if explain else None
    result = _verdict(state_text(state), diagnostic)
    if diagnostic is not None:
        result["diagnostic"] = diagnostic
    if result["script"] == "latin" and result["is_english"] and _has_parts(state):
        found = _segment_scan(state, diagnostic)
        if found:
            result.update(language=found[0], is_english=False, language_undecided=False,
                          mixed_segment=found[1])
    if isinstance(state, (str, bytes, bytearray)) or state is None or not result["is_english"]:
        return result
    value = _value_scan(state)
    if value is not None:
        det, source, reason = value
        result.update(language=det["language"], is_english=False,
                      language_undecided=det["language_undecided"])
        if diagnostic is not None:
            diagnostic.update(stage="value", reason=reason, source=source)
    return result


def is_english(state: State) -> bool:
    """Whether the English checkpoint can be expected to read ``state``."""
    return bool(analyse(state)["is_english"])
