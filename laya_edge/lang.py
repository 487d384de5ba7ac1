"""Script and language detection for checkpoint routing, with no dependency.

Routing needs a single bit: can the English checkpoint read this state, or not? The English
checkpoint has an English-only vocabulary, so it fails outright on other scripts and loses
calibration on other Latin-script languages, while the multilingual checkpoint only loses a few
points on English. The detector therefore answers two questions, in order of certainty:

1. *Which script?* Exact: letters are binned by Unicode range (router.md §5.3). A state whose
   letters are mostly, or noticeably, non-Latin is not English.
2. *Is the Latin text English?* Best effort: function-word counts per language, the share of
   letters English does not use, and a few rules against acronyms, shouting, identifiers and code
   (router.md §5.4-§5.7). "Undecided" is kept apart from "English" so that text with non-English
   letters is never handed to the English checkpoint just because no word list named it.

Callers that already know the language should pass it explicitly instead (``lang=``).

Everything here is standard library, and every pattern is linear-time: states are user input.
The behavioural oracle is upstream ``laya.lang`` 0.4.15; this is an independent implementation of
the rules in router.md §5.
"""
from __future__ import annotations

import bisect
import re
import unicodedata
from collections import Counter
from collections.abc import Mapping
from functools import lru_cache
from typing import Any, Dict, FrozenSet, Iterator, List, Optional, Tuple, Union

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
# Constants (router.md §5.1)
# --------------------------------------------------------------------------------------------

#: Share of non-English letters at which Latin text counts as non-English.
NON_EN_DIACRITIC_RATE = 0.02
#: Above this share of non-English letters, English function words cannot rescue the text.
ENGLISH_RESCUE_DIACRITIC_RATE = 0.06
#: Non-Latin letter share that carries a text whose plurality script is Latin ...
NON_LATIN_FRACTION = 0.2
#: ... or this smaller share, when it amounts to at least NON_LATIN_MIN_LETTERS letters.
NON_LATIN_MIN_FRACTION = 0.1
NON_LATIN_MIN_LETTERS = 10
#: An all-caps text must match a function word of at least this many letters ...
SHOUTED_MIN_STOPWORD = 4
#: ... and hold a word of at least this many letters; shorter all-caps runs are acronyms.
SHOUTED_MIN_WORD = 5
#: Characters read from a state (flattened text, segment scan, per-line sample).
TEXT_BUDGET = 4000
#: Values nested deeper than this many containers are ignored.
MAX_DEPTH = 6

# --------------------------------------------------------------------------------------------
# Scripts and letters (router.md §5.3)
# --------------------------------------------------------------------------------------------

# Named non-Latin scripts and their code point ranges (hex, inclusive). No two ranges overlap.
_SCRIPT_TABLE: Tuple[Tuple[str, str], ...] = (
    ("greek", "0370-03FF 1F00-1FFF"),
    ("cyrillic", "0400-052F 2DE0-2DFF A640-A69F"),
    ("armenian", "0530-058F"),
    ("hebrew", "0590-05FF"),
    ("arabic", "0600-06FF 0750-077F 08A0-08FF FB50-FDFF FE70-FEFF"),
    ("devanagari", "0900-097F A8E0-A8FF"),
    ("bengali", "0980-09FF"),
    ("gurmukhi", "0A00-0A7F"),
    ("gujarati", "0A80-0AFF"),
    ("oriya", "0B00-0B7F"),
    ("tamil", "0B80-0BFF"),
    ("telugu", "0C00-0C7F"),
    ("kannada", "0C80-0CFF"),
    ("malayalam", "0D00-0D7F"),
    ("sinhala", "0D80-0DFF"),
    ("thai", "0E00-0E7F"),
    ("lao", "0E80-0EFF"),
    ("tibetan", "0F00-0FFF"),
    ("myanmar", "1000-109F"),
    ("georgian", "10A0-10FF"),
    ("ethiopic", "1200-137F"),
    ("khmer", "1780-17FF"),
    ("hangul", "1100-11FF 3130-318F AC00-D7AF"),
    ("kana", "3040-309F 30A0-30FF 31F0-31FF"),
    ("han", "3400-4DBF 4E00-9FFF F900-FAFF"),
)

# Letters (general category L*) of Unicode 16.0 that are unassigned in Unicode 13.0, the database
# of the oldest supported interpreter (Python 3.10): everything Unicode 14.0-16.0 added as a letter,
# CJK extensions H and I included. Derived from the Python 3.10-3.13 databases plus a newer
# property table; ranges of hex code points. A character is looked up here only when the running
# interpreter reports it unassigned (``Cn``); an assigned one is decided by ``str.isalpha`` alone.
_LATE_LETTERS = (
    "870-887 889-88E 8B5 8C8-8C9 C5D CDD 170D 171F 1B4C 1C89-1C8A 2C2F 2C5F 9FFD-9FFF "
    "A7C0-A7C1 A7CB-A7CD A7D0-A7D1 A7D3 A7D5-A7DC A7F2-A7F4 10570-1057A 1057C-1058A "
    "1058C-10592 10594-10595 10597-105A1 105A3-105B1 105B3-105B9 105BB-105BC 105C0-105F3 "
    "10780-10785 10787-107B0 107B2-107BA 10D4A-10D65 10D6F-10D85 10EC2-10EC4 10F70-10F81 "
    "11071-11072 11075 1123F-11240 11380-11389 1138B 1138E 11390-113B5 113B7 113D1 113D3 "
    "11740-11746 11AB0-11ABF 11BC0-11BE0 11F02 11F04-11F10 11F12-11F33 12F90-12FF0 1342F "
    "13441-13446 13460-143FA 16100-1611D 16A70-16ABE 16D40-16D6C 18CFF 1AFF0-1AFF3 "
    "1AFF5-1AFFB 1AFFD-1AFFE 1B11F-1B122 1B132 1B155 1DF00-1DF1E 1DF25-1DF2A 1E030-1E06D "
    "1E290-1E2AD 1E4D0-1E4EB 1E5D0-1E5ED 1E5F0 1E7E0-1E7E6 1E7E8-1E7EB 1E7ED-1E7EE "
    "1E7F0-1E7FE 2A6DE-2A6DF 2B735-2B739 2EBF0-2EE5D 31350-323AF "
)


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
    [(low, high, name) for name, spec in _SCRIPT_TABLE for low, high in _parse_ranges(spec)])
_LATE_LOWS, _LATE_HIGHS, _ = _sorted_table(
    [(low, high, None) for low, high in _parse_ranges(_LATE_LETTERS)])
_LATE_FLOOR = _LATE_LOWS[0]


def _in_table(cp: int, lows: Tuple[int, ...], highs: Tuple[int, ...]) -> int:
    """Index of the range holding ``cp``, or -1."""
    i = bisect.bisect_right(lows, cp) - 1
    return i if i >= 0 and cp <= highs[i] else -1


def _is_letter(ch: str) -> bool:
    """``str.isalpha``, extended to letters this interpreter's Unicode database predates."""
    if ch.isalpha():
        return True
    cp = ord(ch)
    return (cp >= _LATE_FLOOR and unicodedata.category(ch) == "Cn"
            and _in_table(cp, _LATE_LOWS, _LATE_HIGHS) >= 0)


def _is_latin(cp: int) -> bool:
    """Latin code points: ASCII to IPA Extensions, Latin Extended Additional, fullwidth letters."""
    return (cp < 0x02B0 or 0x1E00 <= cp <= 0x1EFF
            or 0xFF21 <= cp <= 0xFF3A or 0xFF41 <= cp <= 0xFF5A)


def _named_script(cp: int) -> Optional[str]:
    """The table script of a non-Latin code point (letter or not), or None."""
    if _is_latin(cp):
        return None
    i = _in_table(cp, _SCRIPT_LOWS, _SCRIPT_HIGHS)
    return _SCRIPT_NAMES[i] if i >= 0 else None


# Marker for a combining mark in the non-Latin word scan: it neither extends nor ends a run.
_TRANSPARENT = ""


@lru_cache(maxsize=8192)
def _char_info(ch: str) -> Tuple[Optional[str], bool, Optional[str]]:
    """``(letter script or None, isalpha, word script)`` of one character.

    The letter script is ``"latin"``, a table name or ``"other"``; the word script is the table
    script used by the non-Latin word scan (non-letters of a script's block included), or
    ``_TRANSPARENT`` for a combining mark.
    """
    cp = ord(ch)
    word = _TRANSPARENT if unicodedata.combining(ch) else _named_script(cp)
    if not _is_letter(ch):
        return None, False, word
    if _is_latin(cp):
        return "latin", ch.isalpha(), word
    return _named_script(cp) or "other", ch.isalpha(), word


_ASCII_LETTERS = bytes(range(65, 91)) + bytes(range(97, 123))


def _alpha_count(text: str) -> int:
    """Number of ``str.isalpha`` characters."""
    if text.isascii():
        return len(text) - len(text.encode("ascii").translate(None, _ASCII_LETTERS))
    return sum(map(str.isalpha, text))


class _Tally:
    """Letter counts of one text: per script, isalpha total, and whether any table-script
    character occurs (a precondition for a non-Latin word)."""

    __slots__ = ("counts", "alpha", "scripted")

    def __init__(self, text: str) -> None:
        if text.isascii():
            letters = _alpha_count(text)
            self.counts: Dict[str, int] = {"latin": letters}
            self.alpha = letters
            self.scripted = False
            return
        counts: Dict[str, int] = {}
        latin = alpha = 0
        scripted = False
        # Counter keeps first-occurrence order, so scripts are keyed in the order they appear.
        for ch, n in Counter(text).items():
            script, is_alpha, word = _char_info(ch)
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


def _dominant(counts: Dict[str, int]) -> str:
    """Key with the largest count (first wins ties), or ``"unknown"`` without letters."""
    best, best_n = "unknown", 0
    for script, n in counts.items():
        if n > best_n:
            best, best_n = script, n
    return best


def _profile(counts: Dict[str, int]) -> Dict[str, float]:
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


def _carries(fraction: float, letters: int) -> bool:
    """Whether non-Latin letters are enough to make a Latin-plurality text non-Latin."""
    return (fraction >= NON_LATIN_FRACTION
            or (fraction >= NON_LATIN_MIN_FRACTION and letters >= NON_LATIN_MIN_LETTERS))


def _has_non_latin_word(text: str, tally: Optional[_Tally] = None) -> bool:
    """Whether ``text`` holds a run of two or more characters of one table script that does not
    start with a capital (a capitalised run is a name, a single character a symbol). Combining
    marks are skipped, so they never split a run."""
    if tally is None:
        tally = _Tally(text)
    if not tally.scripted:
        return False
    script: Optional[str] = None
    length = 0
    capital = False
    for ch in text:
        word = _char_info(ch)[2]
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
    return _dominant(_Tally(text).counts)


def script_profile(text: str) -> Dict[str, float]:
    """Share of the letters of ``text`` in each script, Latin first; ``{}`` without letters."""
    return _profile(_Tally(text).counts)


# --------------------------------------------------------------------------------------------
# Word lists (router.md §5.4): function words, lower-case, sorted
# --------------------------------------------------------------------------------------------

def _words_of(text: str) -> FrozenSet[str]:
    return frozenset(text.split())


# Order matters: it breaks ties between languages.
_STOPWORDS: Dict[str, FrozenSet[str]] = {
    "en": _words_of(
        "after already always and any are aren as at be because been before being between both "
        "but can could couldn didn didnt does doesn doesnt doing done dont down during each ever "
        "every few for from has hasn have haven havent here him his how i if in into is isn isnt "
        "it ive many might much must never nor not of on only onto our please shall she should "
        "some than that thats the their them then there these they this those through to too "
        "until very was wasn wasnt we were weren what whats when where which while who whom why "
        "will with within without won wont would wouldn yet you your youre yours "
    ),
    "fr": _words_of(
        "alors au aux avec bien bonjour ce ces cette comment dans des deux dois doit donc du elle "
        "elles est et fait fois il ils je jour jours la le les ma mais merci mes mois mon nous "
        "ont ou pas peut peux plus pour pourquoi quand que qui sa ses sont sur ta tes ton tous "
        "tout toute trois très tu une veut veux vous être "
    ),
    "de": _words_of(
        "aber auch auf aus bei bitte das dem den der dich die diese diesen dieser dieses dir ein "
        "eine einem einen einer für gibt habe haben heute ich im in ist jetzt kann kannst mein "
        "meine meinem meinen meiner mich mir mit nach nicht noch oder sich sind und uns von wann "
        "was welche werden wie wir wird wo wurde zu zum zur "
    ),
    "es": _words_of(
        "al algo aquí aunque como con cuando del donde dos el entre es esa ese eso esta este esto "
        "está fue fueron gracias han hay hemos hoy la las le les lo los mi muy más nada necesito "
        "ni nos para pero por porque puede pueden que quiero se ser sobre son su sus también "
        "tengo tiene tienen todo tres tu un una y ya "
    ),
    "pt": _words_of(
        "agora ainda alguem alguém ali antes ao aos aqui as até boa cadê com como consigo da das "
        "depois deu do dois dos e em entao então era esta estamos estava este estou está eu ficou "
        "fiz foi gostaria hoje isso isto ja já mais mas meu meus minha minhas muito na nada nao "
        "nas nenhum nenhuma ninguem ninguém noite nos nossa nosso não o obrigada obrigado olá "
        "onde ontem os para pela pelo pode podem por porque pra preciso quando que quero sao se "
        "ser seu sou sua são tambem também tarde tem tenho três tudo tá um uma vc vcs voce voces "
        "você vocês é "
    ),
    "it": _words_of(
        "abbiamo adesso agli alla alle anche ancora avete che ci ciao col come con da dagli dal "
        "dalla dallo degli dei del della delle dello deve devo devono di dove e ed era fra già "
        "gli grazie ha hai hanno ho ieri il la le lo mai mi mia mio molto ne negli nel nell "
        "nella non o oggi per perche più poco quando questa questo scusa sempre si sono stata "
        "stato su sua sul sulla sulle tra tuo un una uno voglio vorrei è "
    ),
    "nl": _words_of(
        "aan dat deze door een het is maar met naar niet ook op te van voor worden wordt zijn "
    ),
    "sv": _words_of(
        "appen aterbetala aterbetalning att behover behöver blivit debiterade dessa detta "
        "faktura fel från får ganger gång gånger gör göra hittar hjalp hjalpa hjälp hjälpa här "
        "installningarna installningen inställningarna inställningen inte jag kommer kraschar "
        "kvittot losenord lösenord mig min mitt måste nar när nästa och också om oppnar paket ska "
        "skicka skulle sparningen spårningen säger till tva två upp uppdaterats utan vi vill är "
        "återbetala återbetalning öppnar "
    ),
    "ro": _words_of(
        "aceasta această acest acesta acum ale care dar din după este foarte fost fără lui mi nu "
        "pentru până sunt să trebuie vreau vă în și ți "
    ),
    "bn": _words_of(
        "abar ajke akhon amader amake amar ami amra apnake apnar apnara apni ar asbe bhai bhalo "
        "bolte bolun chai chaina dhonnobad dilam dite diye diyechi dorkar duibar ei eita ekbar "
        "ekhon ekhono ekta ferot geche gese hobe hocche hoise hoye hoyeche hoyni jabe jodi jonno "
        "kalke keno keu kharap khub ki kibhabe kichu kintu kivabe kobe kokhon korbo korchi kore "
        "koreche korechi koren korlam korsi korte korun kothay koto lagbe moddhe nai niye oi oita "
        "onek ota pabo paini parben parbo parchi parchina peyechi sathe shathe shob shomossa "
        "somossa tader tahole taka theke tomake tomar tomra tumi valo "
    ),
    "az": _words_of(
        "amma ancaq artiq artıq bir biz bu cox daha deyil də eger görə həm hər ile ilə isə kimi "
        "lakin mən nə olan olmasa olub onlar siz sonra sən ucun var ve və yalniz yalnız yox "
        "yoxdur çox üçün əgər "
    ),
}

# Swedish support words specific enough to name a two- or three-word fragment.
_SHORT_SWEDISH = _words_of(
    "abonnemanget aterbetalning atkomst behover behöver betalningen fakturan felmeddelande glomt "
    "glömt inloggningen installningen inställningen kvitto kvittot losenord lösenord sparningen "
    "spårningen återbetalning åtkomst "
)

# Common Danish/Norwegian/Swedish words: never evidence for Swedish on their own.
_NORDIC_OVERLAP = _words_of("hej ja nej jo tack mig min om kommer får skulle vi")


def _shared_words() -> FrozenSet[str]:
    seen: Counter = Counter(w for words in _STOPWORDS.values() for w in words)
    return frozenset(w for w, n in seen.items() if n > 1) | _NORDIC_OVERLAP


_SHARED = _shared_words()
# word -> the lists that hold it, in list order
_LISTS_OF: Dict[str, Tuple[str, ...]] = {
    word: tuple(code for code, words in _STOPWORDS.items() if word in words)
    for word in frozenset().union(*_STOPWORDS.values())}
_EN_ONLY = _STOPWORDS["en"] - _SHARED
# English words that a non-English list also holds: repeats count once as foreign evidence.
_COLLISIONS = frozenset({"come", "son", "do", "care", "todo", "im", "per", "plus"})
_SWEDISH_OPENERS = frozenset({"kan", "jag", "vi"})

# Letters ordinary English does not use (lower-case).
_NON_EN_LETTERS = frozenset(
    "àâäãáåçéèêëíìîïñóòôöõøúùûüýÿßæœ"  # Western European
    "ăâîșțşţ"  # Romanian
    "ąćęłńśźż"  # Polish
    "čďěňřšťůž"  # Czech and Slovak
    "őű"  # Hungarian
    "ğı"  # Turkish
    "āēģīķļņūž"  # Baltic
    "đ"  # Croatian, Vietnamese
    "ə"  # Azerbaijani
)
_NON_EN_LETTER_RE = re.compile("[" + "".join(sorted(_NON_EN_LETTERS)) + "]")

# --------------------------------------------------------------------------------------------
# Patterns. Each is linear-time: no nested or adjacent overlapping repetition.
# --------------------------------------------------------------------------------------------

# A word: a run of word characters that are neither digits nor underscores.
_WORD = re.compile(r"[^\W\d_]+")
# An identifier (URL host, e-mail, version, dotted abbreviation, decimal). The look-behind pins
# every match to the start of a [\w-] run; since "." and "@" are not in [\w-], a failed attempt
# costs one pass over that run and no other start inside it is tried.
_IDENTIFIER = re.compile(r"(?<![\w-])[\w-]*(?:[.@][\w-]+)+")
# Two or more letters in a row; an all-caps one is an acronym or emphasis.
_LETTER_RUN = re.compile(r"[^\W\d_]{2,}")
# Program text: assignments, statement ends, braces, brackets, or a call ``name(``.
_CODE_LINE = re.compile(r"[=;{}\[\]]|\w\(")
# Letter-or-digit, joiner, letter-or-digit: a dotted/underscored name, a path or a compound.
_JOINED = re.compile(r"[^\W_][._/\\][^\W_]")

# --------------------------------------------------------------------------------------------
# Text extraction (router.md §5.2)
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
# Latin-script language (router.md §5.4)
# --------------------------------------------------------------------------------------------

def _prose_words(text: str) -> List[str]:
    """Lower-case words of ``text`` with identifiers removed."""
    return _WORD.findall(_IDENTIFIER.sub(" ", text).replace("İ", "i").lower())


def _non_english_rate(text: str) -> float:
    """Share of the (lower-cased) characters of ``text`` that English does not use."""
    lowered = text.lower()
    if lowered.isascii():
        return 0.0
    return len(_NON_EN_LETTER_RE.findall(lowered)) / max(1, len(lowered))


def _scores(words: List[str]) -> Tuple[Dict[str, int], FrozenSet[str]]:
    """Function-word score per language (a collision word counts once however often it
    repeats), and the languages that matched a word no other list holds."""
    scores = dict.fromkeys(_STOPWORDS, 0)
    evidenced = set()
    for word, n in Counter(words).items():
        codes = _LISTS_OF.get(word)
        if codes is None:
            continue
        weight = 1 if word in _COLLISIONS else n
        for code in codes:
            scores[code] += weight
        if word not in _SHARED:
            evidenced.update(codes)
    return scores, frozenset(evidenced)


def _best_evidenced(scores: Dict[str, int], evidenced: FrozenSet[str]) -> Tuple[Optional[str], int]:
    """Highest-scoring evidenced non-English language (list order breaks ties), or (None, 0)."""
    best, best_score = None, 0
    for code in _STOPWORDS:
        if code != "en" and code in evidenced and (best is None or scores[code] > best_score):
            best, best_score = code, scores[code]
    return best, best_score


def _english_rescue(distinct: set, rate: float) -> bool:
    """English wins despite marked letters: a low rate, two English-only words, and at most one
    word carrying a non-English letter (a loanword or a name)."""
    if rate >= ENGLISH_RESCUE_DIACRITIC_RATE or len(distinct & _EN_ONLY) < 2:
        return False
    marked = sum(1 for w in distinct if not _NON_EN_LETTERS.isdisjoint(w))
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
            and words[0] in _SWEDISH_OPENERS and en <= 1):
        return best, en
    if best and marked and score >= max(2, en):
        return best, en
    if en and (not marked or _english_rescue(distinct, rate)):
        return "en", en
    return None, en


def _latin_evidence(text: str, diagnostic: Optional[dict] = None) -> Result:
    """``latin_profile``, optionally recording the reason in ``diagnostic``."""
    words = _prose_words(text)
    rate = _non_english_rate(text)
    marked = rate >= NON_EN_DIACRITIC_RATE
    distinct = set(words)
    nordic = not distinct.isdisjoint(_NORDIC_OVERLAP) and distinct.isdisjoint(_EN_ONLY)
    if 1 < len(words) < 4 and not distinct.isdisjoint(_SHORT_SWEDISH):
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
    return _latin_evidence(text)


def guess_latin_language(text: str) -> Optional[str]:
    """Best-effort language code of Latin-script ``text``, or None."""
    return _latin_evidence(text)["language"]


# --------------------------------------------------------------------------------------------
# Capitals: shouting and acronyms (router.md §5.5)
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
    vocab = _STOPWORDS.get(language, frozenset())
    return any(len(w) >= SHOUTED_MIN_STOPWORD for w in {t.lower() for t in tokens} & vocab)


def _blank_caps(text: str) -> str:
    """``text`` with every all-caps letter run replaced by a space."""
    return _LETTER_RUN.sub(lambda m: " " if m.group().isupper() else m.group(), text)


def _only_acronyms(text: str) -> bool:
    """Mixed-case text whose all-caps runs exist and are all acronym-short."""
    caps = [run for run in _LETTER_RUN.findall(text) if run.isupper()]
    return bool(caps) and all(len(run) < SHOUTED_MIN_WORD for run in caps)


# --------------------------------------------------------------------------------------------
# Whole-text verdict (router.md §5.5)
# --------------------------------------------------------------------------------------------

def _verdict(text: str, diagnostic: Optional[dict] = None) -> Result:
    """Detection result for one flattened string (no segment or value scan)."""
    tally = _Tally(text)
    counts = tally.counts
    shares = _profile(counts)
    script = _dominant(counts)
    fraction = round(1.0 - shares.get("latin", 0.0), 4) if shares else 0.0
    carried = _carries(fraction, round(fraction * tally.alpha))
    if script == "latin" and carried and _has_non_latin_word(text, tally):
        script = _dominant({k: n for k, n in counts.items() if k != "latin"})
    if script == "unknown" or script != "latin":
        unknown = script == "unknown"
        if diagnostic is not None:
            diagnostic["reason"] = "no_letters" if unknown else "non_latin_script"
        return {"script": script, "script_profile": shares, "language": None,
                "is_english": unknown, "language_undecided": True, "diacritic_rate": 0.0,
                "non_latin_fraction": 0.0 if unknown else fraction, "mixed_segment": None}
    evidence = _latin_evidence(text, diagnostic)
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
    """Drop a foreign verdict that rests on shouting or acronyms (§5.5 step 4)."""
    if _shouted(text):
        if _shouted_evidence(_WORD.findall(text), language, rate):
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
    return _latin_evidence(blanked)["language"]


# --------------------------------------------------------------------------------------------
# Foreign lines inside English states (router.md §5.6, §5.7)
# --------------------------------------------------------------------------------------------

def _named_prose_language(line: str) -> Optional[str]:
    """Non-English language one prose line is clearly written in, or None."""
    if not line.strip() or _CODE_LINE.search(line):
        return None
    prose = " ".join(tok for tok in line.split() if not _JOINED.search(tok))
    shouted = _shouted(prose)
    if not shouted:
        prose = _blank_caps(prose)
    tokens = _WORD.findall(prose)
    if len(tokens) < 4:
        return None
    evidence = _latin_evidence(prose)
    language = evidence["language"]
    if language in (None, "en"):
        return None
    if shouted and not _shouted_evidence(tokens, language, float(evidence["diacritic_rate"])):
        return None
    if len({t.lower() for t in tokens} & _STOPWORDS[language]) < 2:
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
        if _has_non_latin_word(sample) and _alpha_count(sample) >= NON_LATIN_MIN_LETTERS:
            return "non_latin_value"
        return None
    if det["diacritic_rate"] >= NON_EN_DIACRITIC_RATE and len(_WORD.findall(sample)) >= 4:
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
        if not sample.strip() or _CODE_LINE.search(sample):
            continue
        det = _verdict(sample)
        if det["is_english"]:
            continue
        reason = _line_reason(sample, det)
        if reason is None:
            continue
        letters = _alpha_count(sample)
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
        letters = _alpha_count(leaf[:TEXT_BUDGET])
        if letters > best_letters:
            det, number, reason = found
            best, best_letters = (det, _source(index, path, number), reason), letters
    return best


# --------------------------------------------------------------------------------------------
# Public entry points (router.md §5.7)
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
