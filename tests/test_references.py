"""Every document, file and section that the code, tests, scripts and docs point to exists in
this repository: `docs/...md#section` in source comments, and relative links in the Markdown.
No citation may point at a document this repository does not have."""
import re
from pathlib import Path
from typing import Iterator, Set, Tuple

ROOT = Path(__file__).resolve().parents[1]
# this file's own text describes the patterns, so it is not scanned
SOURCES = [path for folder in ("laya_edge", "tests", "scripts", "examples")
           for path in sorted((ROOT / folder).rglob("*.py")) if path.name != Path(__file__).name]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
CITED = re.compile(r"\b(docs/[\w/.-]+?\.md)(#[\w-]+)?")
LINK = re.compile(r"\]\(([^)\s#]*)(#[^)\s]+)?\)")
# a document named the way the project's original specification files were, without a path
BARE = re.compile(r"(?<![\w/.-])(model|router|hooks)\.md\b(?!\))")


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> Set[str]:
    headings = re.findall(r"^#{1,6} (.+)$", page.read_text(encoding="utf-8"), re.M)
    return {"#" + slug(heading) for heading in headings}


def references() -> Iterator[Tuple[Path, Path, str]]:
    """(where, the file it points to, the anchor or '')."""
    for source in SOURCES:
        for match in CITED.finditer(source.read_text(encoding="utf-8")):
            yield source, ROOT / match.group(1), match.group(2) or ""
    for page in PAGES:
        for match in LINK.finditer(page.read_text(encoding="utf-8")):
            target, anchor = match.group(1), match.group(2) or ""
            if target.startswith(("http://", "https://", "mailto:")):
                continue
            yield page, (page.parent / target) if target else page, anchor


def test_every_reference_resolves():
    broken = []
    for where, target, anchor in references():
        if not target.exists():
            broken.append(f"{where.relative_to(ROOT)} -> {target}")
        elif anchor and target.suffix == ".md" and anchor not in anchors(target):
            broken.append(f"{where.relative_to(ROOT)} -> {target.relative_to(ROOT)}{anchor}")
    assert broken == []


def test_the_check_sees_references():
    found = list(references())
    assert len(found) > 100
    assert any(anchor == "#where-laya_edge-follows-the-seeds-rather-than-upstream-laya"
               for _, _, anchor in found)
    assert slug("Router.predict_batch") == "routerpredict_batch"
    assert slug("Model lifecycle: on_load and on_evict") == "model-lifecycle-on_load-and-on_evict"


def test_no_citation_of_documents_outside_the_repository():
    cited = [f"{path.relative_to(ROOT)}:{number}"
             for path in SOURCES for number, line in enumerate(
                 path.read_text(encoding="utf-8").splitlines(), 1)
             if BARE.search(line) or "§" in line]
    assert cited == []


# repository files named in comments and docs: `laya_edge/session.py`, `scripts/bench.py`, ...
# One name is data, not a reference: the provenance label every synthetic checkpoint (and the
# bundles in models/) carries, kept so regenerated checkpoints stay byte-identical.
PROVENANCE_LABELS = {"scripts/make_checkpoint.py"}
FILE = re.compile(r"(?<![\w/.-])((?:laya_edge|scripts|tests|examples|export|models|docs)"
                  r"/[\w/.-]*\w\.(?:py|md|json|sh|txt))\b")


def test_every_repository_file_named_exists():
    missing, seen = [], 0
    for where in [*SOURCES, *PAGES]:
        for match in FILE.finditer(where.read_text(encoding="utf-8")):
            named, seen = match.group(1), seen + 1
            if named in PROVENANCE_LABELS:
                continue
            # inside the package, paths are also written relative to laya_edge/ (export/...)
            if not ((ROOT / named).exists() or (ROOT / "laya_edge" / named).exists()
                    or (where.parent / named).exists()):
                missing.append(f"{where.relative_to(ROOT)}: {named}")
    assert seen > 200 and missing == []
