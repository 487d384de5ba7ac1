#!/usr/bin/env python3
"""English-or-not agreement of laya_edge's detector with upstream laya 0.4.15, per language.

Builds a multilingual corpus from text already on the machine -- no download:

* the translated strings (msgstr) of the compiled gettext catalogs under
  ``/usr/share/locale/*/LC_MESSAGES/*.mo`` (parsed here with ``struct``), one group per locale
  directory (``de``, ``pt_BR``, ``sr@latin``, ...);
* English: the original strings (msgid) of the same catalogs, and sentences from the English man
  pages under ``/usr/share/man/man1`` (gzip'd troff, stripped here), plus the ``en_*`` locales.

A string counts when it has at least 4 words (whitespace tokens holding a letter), or, in a
script written without spaces (Han, kana, Thai, Lao, Khmer, Myanmar, Tibetan), at least 10
letters. Sampling is deterministic (ordered by SHA-1 of the text), so two runs on one machine see
the same corpus.

Each sentence gets two verdicts per implementation:

* route: ``Router(default="english").route(s)["model"] == "english"`` (laya_edge's Router and
  upstream's ``laya.Router(default="english")``, so both share the default for undecided text);
* is_english: ``laya_edge.lang.is_english(s)`` and ``laya.lang.is_english(s)``.

Prints a markdown table per locale (sentences, agreement %, routed-to-multilingual % for both
implementations) and a summary, and ``--json`` writes the figures. The test
``tests/test_router_detection.py`` builds the same corpus through :func:`build_corpus`.

Examples::

    python scripts/detector_agreement.py
    python scripts/detector_agreement.py --per-locale 400 --json /tmp/agreement.json
    python scripts/detector_agreement.py --disagreements 20
"""
from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import re
import struct
import sys
import time
import zlib
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

LOCALE_ROOT = Path("/usr/share/locale")
MAN_ROOT = Path("/usr/share/man/man1")

PER_CATALOG = 40      # sentences sampled from one catalog of one locale
PER_LOCALE = 150      # sentences kept per locale
MSGIDS = 2000         # English originals
MAN_SENTENCES = 2000  # English man-page sentences
MAN_FILES = 400       # man pages read at most

MAN_GROUP = "man (English)"
MSGID_GROUP = "msgid (English)"


# -- what counts as a sentence -----------------------------------------------------------------

_UNSPACED = re.compile("[\u0e00-\u0eff\u0f00-\u0fff\u1000-\u109f\u1780-\u17ff"
                       "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]")
_FORMAT = re.compile(r"%(?:\(\w+\))?[-+ #0-9.*]*[hlLqjzt]*[a-zA-Z%]|\{[\w.:!]*\}|\$\{?\w+\}?")
_MARKUP = re.compile(r"</?[a-zA-Z][^<>]{0,80}>|&[a-z]+;")
_ACCEL = re.compile(r"(?<![\w_])_(?=\w)|(?<=\s)&(?=\w)|^&(?=\w)")
_SPLIT = re.compile(r"(?<=[.!?])\s+|(?<=[。！？])\s*|\n+")


def clean(text: str) -> str:
    """Drop format specifiers, markup and mnemonic underscores; collapse whitespace."""
    text = _FORMAT.sub(" ", text)
    text = _MARKUP.sub(" ", text)
    text = _ACCEL.sub("", text)
    return " ".join(text.split())


def is_sentence(text: str) -> bool:
    words = [t for t in text.split() if any(ch.isalpha() for ch in t)]
    if len(words) >= 4:
        return True
    return bool(_UNSPACED.search(text)) and sum(ch.isalpha() for ch in text) >= 10


def sentences_of(text: str) -> List[str]:
    out = []
    for part in _SPLIT.split(text):
        part = clean(part)
        if 8 <= len(part) <= 400 and is_sentence(part):
            out.append(part)
    return out


def _key(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8", "surrogatepass")).hexdigest()


def sample(items: Iterable[str], n: int) -> List[str]:
    """Up to `n` distinct items, ordered by SHA-1: deterministic and spread over the input."""
    return sorted(set(items), key=_key)[:n]


# -- gettext catalogs --------------------------------------------------------------------------

def read_mo(path: Path) -> List[Tuple[bytes, bytes, str]]:
    """Raw `(msgid, msgstr, charset)` entries of a compiled catalog (the header entry and empty
    translations skipped); decode them with :func:`decode_entry`."""
    data = path.read_bytes()
    if len(data) < 28:
        return []
    magic = struct.unpack("<I", data[:4])[0]
    order = "<" if magic == 0x950412DE else ">" if magic == 0xDE120495 else None
    if order is None:
        return []
    _, count, originals, translations = struct.unpack(order + "4I", data[4:20])
    if count == 0 or max(originals, translations) + 8 * count > len(data):
        return []
    otable = struct.unpack(f"{order}{2 * count}I", data[originals:originals + 8 * count])
    ttable = struct.unpack(f"{order}{2 * count}I", data[translations:translations + 8 * count])
    charset = "utf-8"
    entries = []
    for i in range(count):
        olen, ooff, tlen, toff = otable[2 * i], otable[2 * i + 1], ttable[2 * i], ttable[2 * i + 1]
        msgid, msgstr = data[ooff:ooff + olen], data[toff:toff + tlen]
        if msgid == b"":
            found = re.search(rb"charset=([\w.-]+)", msgstr)
            if found:
                charset = found.group(1).decode("ascii", "replace")
        elif msgstr:
            entries.append((msgid, msgstr))
    return [(msgid, msgstr, charset) for msgid, msgstr in entries]


def decode_entry(msgid: bytes, msgstr: bytes, charset: str) -> Optional[Tuple[str, str]]:
    """`(msgid, msgstr)` text: the first plural form, without `msgctxt`; None if undecodable."""
    try:
        return (msgid.split(b"\x04")[-1].split(b"\x00")[0].decode(charset),
                msgstr.split(b"\x00")[0].decode(charset))
    except (LookupError, UnicodeDecodeError):
        return None


def locale_of(path: Path, root: Path) -> str:
    return path.relative_to(root).parts[0]


def is_english_locale(locale: str) -> bool:
    """`en`, `en_GB`, `en@quot`, ...; not `en@shaw` (English in the Shavian alphabet)."""
    return re.split(r"[_@.]", locale)[0] == "en" and "@shaw" not in locale


def catalog_sentences(path: Path, per_catalog: int) -> Tuple[List[str], List[str]]:
    """Up to `per_catalog` translated sentences of one catalog, and the English originals of
    the entries examined. Entries are visited in CRC-32 order of their translation (a
    deterministic spread over the catalog), until enough sentences are found."""
    try:
        entries = read_mo(path)
    except (OSError, struct.error):
        return [], []
    entries.sort(key=lambda e: zlib.crc32(e[1]))
    translated: List[str] = []
    originals: List[str] = []
    seen = set()
    for msgid, msgstr, charset in entries[:40 * per_catalog]:
        decoded = decode_entry(msgid, msgstr, charset)
        if decoded is None:
            continue
        originals.extend(sentences_of(decoded[0]))
        for sentence in sentences_of(decoded[1]):
            if sentence not in seen:
                seen.add(sentence)
                translated.append(sentence)
        if len(translated) >= per_catalog:
            break
    return translated[:per_catalog], originals


def catalog_corpus(root: Path = LOCALE_ROOT, per_catalog: int = PER_CATALOG,
                   per_locale: int = PER_LOCALE, msgids: int = MSGIDS
                   ) -> Tuple[Dict[str, List[str]], List[str]]:
    """`({locale: sentences}, English msgid sentences)`.

    Per locale, catalogs are read in a deterministic order until there are twice `per_locale`
    candidates (each catalog contributing at most `per_catalog`), then `per_locale` are kept.
    """
    by_locale: Dict[str, List[Path]] = defaultdict(list)
    for path in root.glob("*/LC_MESSAGES/*.mo"):
        by_locale[locale_of(path, root)].append(path)
    groups: Dict[str, List[str]] = {}
    originals: set = set()
    for locale in sorted(by_locale):
        candidates: set = set()
        for path in sorted(by_locale[locale], key=lambda p: _key(str(p.relative_to(root)))):
            translated, english = catalog_sentences(path, per_catalog)
            candidates.update(translated)
            if len(originals) < 10 * msgids:
                originals.update(english)
            if len(candidates) >= 2 * per_locale:
                break
        kept = sample(candidates, per_locale)
        if kept:
            groups[locale] = kept
    return groups, sample(originals, msgids)


# -- man pages ---------------------------------------------------------------------------------

_TEXT_MACROS = {"B", "I", "BR", "RB", "IR", "RI", "BI", "IB", "SM", "SB"}
_BREAK_MACROS = {"PP", "P", "LP", "TP", "IP", "HP", "SH", "SS", "br", "sp", "RS", "RE", "TQ",
                 "nf", "fi", "EX", "EE", "in", "ti", "UR", "UE", "MT", "ME", "TH"}
_ESCAPES = [
    (re.compile(r"\\\".*$"), ""),                         # comment
    (re.compile(r"\\f(?:\[[^\]]*\]|\(..|.)"), ""),        # font changes
    (re.compile(r"\\s[-+]?\d+"), ""),                     # size changes
    (re.compile(r"\\\((?:em|en|hy)"), "-"),
    (re.compile(r"\\\((?:lq|rq|dq)"), '"'), (re.compile(r"\\\((?:oq|cq|aq)"), "'"),
    (re.compile(r"\\\(.."), " "), (re.compile(r"\\\[[^\]]*\]"), " "),
    (re.compile(r"\\\*(?:\(..|\[[^\]]*\]|.)"), ""),       # strings
    (re.compile(r"\\[-]"), "-"), (re.compile(r"\\e"), lambda m: "\\"),
    (re.compile(r"\\[&|^%c,/:!)]"), ""), (re.compile(r"\\ "), " "), (re.compile(r"\\."), ""),
]


def troff_paragraphs(source: str) -> Iterator[str]:
    """Plain-text paragraphs of a man page: text lines and the text of font macros, split at
    paragraph and section macros."""
    paragraph: List[str] = []
    for line in source.splitlines():
        if line.startswith((".", "'")):
            parts = line[1:].strip().split(None, 1)
            macro = parts[0] if parts else ""
            if macro in _TEXT_MACROS and len(parts) > 1:
                line = parts[1].replace('"', "")
            else:
                if macro in _BREAK_MACROS or not macro.startswith("\\\""):
                    if paragraph:
                        yield " ".join(paragraph)
                    paragraph = []
                continue
        for pattern, replacement in _ESCAPES:
            line = pattern.sub(replacement, line)
        line = line.strip()
        if line:
            paragraph.append(line)
    if paragraph:
        yield " ".join(paragraph)


def man_corpus(root: Path = MAN_ROOT, n: int = MAN_SENTENCES, max_files: int = MAN_FILES
               ) -> List[str]:
    """Up to `n` English sentences from (at most `max_files`) man pages, deterministic."""
    files = sorted((p for p in root.glob("*.gz") if p.is_file() and not p.is_symlink()),
                   key=lambda p: _key(p.name))
    found: List[str] = []
    for path in files[:max_files]:
        try:
            text = gzip.decompress(path.read_bytes()).decode("utf-8", "replace")
        except (OSError, EOFError, ValueError):
            continue
        if text.lstrip().startswith(".so "):
            continue
        for paragraph in troff_paragraphs(text):
            for sentence in _SPLIT.split(paragraph):
                sentence = " ".join(sentence.split())
                words = sentence.split()
                letters = [w for w in words if any(ch.isalpha() for ch in w)]
                if 4 <= len(letters) <= 60 and len(letters) >= 0.6 * len(words) \
                        and sentence.isascii():
                    found.append(sentence)
        if len(set(found)) >= 3 * n:
            break
    return sample(found, n)


# -- the corpus --------------------------------------------------------------------------------

@dataclass
class Corpus:
    groups: Dict[str, List[str]]       # group name -> sentences
    english: Dict[str, bool]           # group name -> the group is English text
    seconds: float

    @property
    def size(self) -> int:
        return sum(map(len, self.groups.values()))


def build_corpus(locale_root: Path = LOCALE_ROOT, man_root: Path = MAN_ROOT,
                 per_catalog: int = PER_CATALOG, per_locale: int = PER_LOCALE,
                 msgids: int = MSGIDS, man_sentences: int = MAN_SENTENCES,
                 man_files: int = MAN_FILES) -> Corpus:
    started = time.perf_counter()
    groups, originals = ({}, []) if not locale_root.is_dir() else catalog_corpus(
        locale_root, per_catalog, per_locale, msgids)
    english = {locale: is_english_locale(locale) for locale in groups}
    if originals:
        groups[MSGID_GROUP], english[MSGID_GROUP] = originals, True
    man = man_corpus(man_root, man_sentences, man_files) if man_root.is_dir() else []
    if man:
        groups[MAN_GROUP], english[MAN_GROUP] = man, True
    return Corpus(groups, english, time.perf_counter() - started)


# -- verdicts ----------------------------------------------------------------------------------

def verdict_functions() -> Dict[str, Dict[str, Callable[[str], bool]]]:
    import laya
    import laya.lang as upstream_lang

    import laya_edge.lang as edge_lang
    from laya_edge.router import Router

    ours, theirs = Router(default="english"), laya.Router(default="english")
    return {
        "edge": {"route": lambda s: ours.route(s)["model"] == "english",
                 "is_english": edge_lang.is_english},
        "upstream": {"route": lambda s: theirs.route(s)["model"] == "english",
                     "is_english": upstream_lang.is_english},
    }


@dataclass
class Row:
    group: str
    english_text: bool
    sentences: int
    route_agree: int
    english_agree: int
    ml_edge: int           # routed to multilingual by laya_edge
    ml_upstream: int       # ... by upstream
    seconds_edge: float
    seconds_upstream: float
    disagreements: List[Tuple[str, bool, bool]]

    def pct(self, n: int) -> float:
        return 100.0 * n / self.sentences if self.sentences else 0.0


def evaluate(corpus: Corpus, keep_disagreements: int = 5) -> List[Row]:
    fns = verdict_functions()
    rows = []
    for group, sentences in corpus.groups.items():
        verdicts: Dict[str, Dict[str, List[bool]]] = {}
        seconds: Dict[str, float] = {}
        for impl, by_kind in fns.items():
            started = time.perf_counter()
            verdicts[impl] = {kind: [fn(s) for s in sentences] for kind, fn in by_kind.items()}
            seconds[impl] = time.perf_counter() - started
        ours, theirs = verdicts["edge"], verdicts["upstream"]
        disagreements = [(s, a, b) for s, a, b in zip(sentences, ours["route"], theirs["route"])
                         if a != b]
        rows.append(Row(
            group=group, english_text=corpus.english[group], sentences=len(sentences),
            route_agree=sum(a == b for a, b in zip(ours["route"], theirs["route"])),
            english_agree=sum(a == b for a, b in zip(ours["is_english"], theirs["is_english"])),
            ml_edge=sum(not v for v in ours["route"]),
            ml_upstream=sum(not v for v in theirs["route"]),
            seconds_edge=seconds["edge"], seconds_upstream=seconds["upstream"],
            disagreements=disagreements[:keep_disagreements]))
    return rows


def summary(rows: Sequence[Row]) -> Dict[str, Any]:
    total = sum(r.sentences for r in rows)
    english = [r for r in rows if r.english_text]
    other = [r for r in rows if not r.english_text]
    n_en = sum(r.sentences for r in english)
    n_other = sum(r.sentences for r in other)

    def rate(n: int, d: int) -> float:
        return round(100.0 * n / d, 3) if d else 0.0

    return {
        "sentences": total, "groups": len(rows),
        "route_agreement_pct": rate(sum(r.route_agree for r in rows), total),
        "is_english_agreement_pct": rate(sum(r.english_agree for r in rows), total),
        "english_sentences": n_en,
        "english_routed_away_pct": {"edge": rate(sum(r.ml_edge for r in english), n_en),
                                    "upstream": rate(sum(r.ml_upstream for r in english), n_en)},
        "non_english_sentences": n_other,
        "non_english_routed_to_multilingual_pct": {
            "edge": rate(sum(r.ml_edge for r in other), n_other),
            "upstream": rate(sum(r.ml_upstream for r in other), n_other)},
        "detector_seconds": {"edge": round(sum(r.seconds_edge for r in rows), 3),
                             "upstream": round(sum(r.seconds_upstream for r in rows), 3)},
    }


def markdown(rows: Sequence[Row]) -> str:
    lines = ["| locale | English text | sentences | route agreement % | is_english agreement % "
             "| to multilingual % (laya_edge) | to multilingual % (upstream) |",
             "|---|---|---:|---:|---:|---:|---:|"]
    for r in sorted(rows, key=lambda r: (not r.english_text, r.group)):
        lines.append(f"| {r.group} | {'yes' if r.english_text else 'no'} | {r.sentences} | "
                     f"{r.pct(r.route_agree):.1f} | {r.pct(r.english_agree):.1f} | "
                     f"{r.pct(r.ml_edge):.1f} | {r.pct(r.ml_upstream):.1f} |")
    s = summary(rows)
    lines.append(f"| **all** | | {s['sentences']} | {s['route_agreement_pct']:.2f} | "
                 f"{s['is_english_agreement_pct']:.2f} | | |")
    return "\n".join(lines)


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--locale-root", type=Path, default=LOCALE_ROOT)
    parser.add_argument("--man-root", type=Path, default=MAN_ROOT)
    parser.add_argument("--per-catalog", type=int, default=PER_CATALOG)
    parser.add_argument("--per-locale", type=int, default=PER_LOCALE)
    parser.add_argument("--msgids", type=int, default=MSGIDS)
    parser.add_argument("--man-sentences", type=int, default=MAN_SENTENCES)
    parser.add_argument("--man-files", type=int, default=MAN_FILES)
    parser.add_argument("--disagreements", type=int, default=0,
                        help="print up to N route disagreements per locale")
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args(argv)

    corpus = build_corpus(args.locale_root, args.man_root, args.per_catalog, args.per_locale,
                          args.msgids, args.man_sentences, args.man_files)
    if not corpus.size:
        print("no corpus: no gettext catalogs or man pages found", file=sys.stderr)
        return 1
    rows = evaluate(corpus, keep_disagreements=max(args.disagreements, 5))
    print(markdown(rows))
    s = summary(rows)
    s["corpus_seconds"] = round(corpus.seconds, 3)
    print()
    print(json.dumps(s, indent=2))
    if args.disagreements:
        print()
        for r in rows:
            for sentence, ours, theirs in r.disagreements[:args.disagreements]:
                print(f"[{r.group}] laya_edge={'en' if ours else 'ml'} "
                      f"upstream={'en' if theirs else 'ml'}: {sentence!r}")
    if args.json:
        args.json.write_text(json.dumps({"summary": s, "rows": [
            {k: v for k, v in vars(r).items()} for r in rows]}, indent=2, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
