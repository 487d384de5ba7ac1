"""The English-or-not verdict of laya_edge's detector against upstream laya 0.4.15, on a
multilingual corpus assembled at test time from text on this machine
(docs/design/routing.md#language-detection).

The corpus is built by scripts/detector_agreement.py: translated strings of the compiled gettext
catalogs under /usr/share/locale (dozens of languages and scripts), and English from the catalogs'
original strings and the man pages under /usr/share/man/man1. Per sentence, both
implementations give a route verdict (`Router(default="english").route(s)["model"] ==
"english"`) and an `is_english` verdict; they must agree on at least 99 % of the sentences, and
laya_edge must not route more English sentences away from English than upstream does. The
per-locale table is printed (run with `-s` to see it; `python scripts/detector_agreement.py`
prints the same table).
"""
from __future__ import annotations

import gettext
import struct
from pathlib import Path

import pytest

import laya_edge

from modules import load_file

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "detector_agreement.py"


def load_script():
    return load_file(SCRIPT)


agreement = load_script()


@pytest.fixture(scope="module")
def corpus():
    built = agreement.build_corpus()
    non_english = [g for g, english in built.english.items() if not english]
    # The corpus comes from the gettext catalogues and man pages of the machine's base image;
    # too little of it is a broken test environment, not a reason to pass.
    assert built.size >= 2000 and len(non_english) >= 10 and any(built.english.values()), (
        f"too little text on this machine for a multilingual corpus ({built.size} sentences, "
        f"{len(non_english)} non-English locales): /usr/share/locale and /usr/share/man/man1 "
        "are expected on the CI image")
    return built


@pytest.fixture(scope="module")
def rows(corpus):
    result = agreement.evaluate(corpus, keep_disagreements=10)
    print()
    print(agreement.markdown(result))
    print(agreement.summary(result))
    return result


def test_the_corpus_spans_many_languages_and_scripts(corpus):
    from laya_edge.lang import detect_script

    non_english = [g for g, english in corpus.english.items() if not english]
    assert len(non_english) >= 10
    scripts = {detect_script(s) for g in non_english for s in corpus.groups[g][:20]}
    assert {"latin", "cyrillic"} <= scripts or len(scripts) >= 4, scripts
    english = [s for g, flag in corpus.english.items() if flag for s in corpus.groups[g]]
    assert len(english) >= 200
    # sampling is deterministic: the same catalog gives the same sentences
    catalog = next(iter(sorted(agreement.LOCALE_ROOT.glob("de/LC_MESSAGES/*.mo"))), None)
    if catalog is not None:
        assert agreement.catalog_sentences(catalog, 40) == \
            agreement.catalog_sentences(catalog, 40)


def test_english_or_not_verdicts_agree_with_upstream_on_99_percent(rows):
    summary = agreement.summary(rows)
    disagreements = [(r.group, s, ours, theirs) for r in rows
                     for s, ours, theirs in r.disagreements]
    assert summary["route_agreement_pct"] >= 99.0, disagreements[:20]
    assert summary["is_english_agreement_pct"] >= 99.0, disagreements[:20]


def test_english_is_not_routed_away_more_often_than_upstream(rows):
    summary = agreement.summary(rows)
    away = summary["english_routed_away_pct"]
    assert summary["english_sentences"] >= 200
    assert away["edge"] <= away["upstream"], away
    # and the detector is not degenerate: it does route foreign text to multilingual
    assert summary["non_english_routed_to_multilingual_pct"]["edge"] >= 50.0


def test_non_latin_locales_route_to_multilingual_like_upstream(rows):
    """Locales in a non-Latin script (Arabic, Cyrillic, Greek, Han, ...): near-total agreement
    on every one of them, whatever the per-locale routing rate."""
    checked = 0
    for row in rows:
        if row.english_text or row.sentences < 30:
            continue
        if row.ml_upstream >= 0.9 * row.sentences:
            checked += 1
            assert row.route_agree >= 0.97 * row.sentences, (row.group, row.disagreements)
            assert row.ml_edge >= 0.85 * row.sentences, row.group
    assert checked >= 5


# -- the corpus builder itself -----------------------------------------------------------------

def write_mo(path: Path, entries, charset: str = "UTF-8", big_endian: bool = False) -> None:
    """A compiled gettext catalog, as msgfmt writes it (sorted keys, no hash table)."""
    header = f"Content-Type: text/plain; charset={charset}\n".encode("ascii")
    items = sorted([(b"", header)] + [(k.encode(charset), v.encode(charset))
                                      for k, v in entries])
    order = ">" if big_endian else "<"
    n = len(items)
    originals, translations = 28, 28 + 8 * n
    data_start = translations + 8 * n
    blob, otable, ttable = b"", [], []
    for key, _ in items:
        otable += [len(key), data_start + len(blob)]
        blob += key + b"\0"
    for _, value in items:
        ttable += [len(value), data_start + len(blob)]
        blob += value + b"\0"
    head = struct.pack(order + "7I", 0x950412DE, 0, n, originals, translations, 0, 0)
    path.write_bytes(head + struct.pack(f"{order}{2 * n}I", *otable)
                     + struct.pack(f"{order}{2 * n}I", *ttable) + blob)


@pytest.mark.parametrize("big_endian", [False, True])
def test_mo_reader_matches_gettext(tmp_path, big_endian):
    entries = [("Could not open the file for reading", "Die Datei konnte nicht geöffnet werden"),
               ("One file\0%d files", "Eine Datei\0%d Dateien"),
               ("menu\x04_Open the recent document", "_Zuletzt geöffnetes Dokument öffnen"),
               ("untranslated", "")]
    path = tmp_path / "test.mo"
    write_mo(path, entries, big_endian=big_endian)
    ours = {agreement.decode_entry(*e) for e in agreement.read_mo(path)}
    with open(path, "rb") as handle:
        catalog = gettext.GNUTranslations(handle)
    assert catalog.gettext("Could not open the file for reading") == \
        "Die Datei konnte nicht geöffnet werden"
    assert ours == {("Could not open the file for reading",
                     "Die Datei konnte nicht geöffnet werden"),
                    ("One file", "Eine Datei"),
                    ("_Open the recent document", "_Zuletzt geöffnetes Dokument öffnen")}
    assert agreement.sentences_of("_Zuletzt geöffnetes Dokument öffnen") == \
        ["Zuletzt geöffnetes Dokument öffnen"]
    assert agreement.sentences_of("%s: cannot open %d files for <b>writing</b>\nOK") == \
        [": cannot open files for writing"]
    assert agreement.sentences_of("%(name)s: open %d files") == []      # 3 words
    assert agreement.sentences_of("注文した商品がまだ届いていません。確認してください。") == \
        ["注文した商品がまだ届いていません。"]


def test_troff_is_stripped_to_sentences():
    page = "\n".join([
        '.\\" comment', '.TH LS 1', '.SH NAME', 'ls \\- list directory contents',
        '.SH DESCRIPTION', '.PP', 'List information about the FILEs (the current directory',
        'by default).  Sort entries alphabetically if none of \\fB\\-cftuvSUX\\fR is given.',
        '.TP', '.B \\-a', 'do not ignore entries starting with a dot'])
    paragraphs = list(agreement.troff_paragraphs(page))
    assert "List information about the FILEs (the current directory by default).  Sort " \
           "entries alphabetically if none of -cftuvSUX is given." in paragraphs
    assert "-a do not ignore entries starting with a dot" in paragraphs
    assert not any("\\" in p or p.startswith(".") for p in paragraphs)


def test_a_router_builds_its_agents_with_the_factory_it_is_given(tmp_path):
    """`agent_factory` says how an agent is built (here a stand-in recording its arguments);
    agent_kwargs are checked against the factory's signature, not ONNXAgent's."""
    built = []

    def factory(model_id_or_path, *, device=None, token=None, subfolder=None, temperature=1.0):
        built.append((model_id_or_path, device, temperature))
        return {"agent": model_id_or_path}

    router = laya_edge.Router(models={"english": str(tmp_path)}, device="cpu",
                              agent_factory=factory, agent_kwargs={"temperature": 2.0})
    assert router.load("english") == {"agent": str(tmp_path)}
    assert built == [(str(tmp_path), "cpu", 2.0)]
    with pytest.raises(ValueError, match="factory accepts none of 'session_cache'"):
        laya_edge.Router(agent_factory=factory, agent_kwargs={"session_cache": True})
