"""Candidate graphs in the build directory: built, verified, ranked, kept or removed.

A reduced-precision variant is chosen among several builds of the same graph; each lives in a
directory of its own until one is chosen, because a graph names its external-data sidecar by
file name, so neither may be renamed afterwards.
"""
from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

from ..bundle_format import sidecar
from .verify import verify_graph

Candidate = Tuple[Path, List[str], Dict[str, Any]]  # graph, optimisations, verification report


def verified(graph: Path, precision: str, runs: List[Any], reference: Any,
             skip: bool) -> Dict[str, Any]:
    """The verification report of `graph` on `runs`, or the record of a skipped one."""
    if skip:
        return {"skipped": True, "passed": None, "precision": precision}
    return dict(verify_graph(graph, runs, reference, precision), skipped=False)


def rank(report: Dict[str, Any]) -> Tuple[bool, float, float]:
    """Candidates compare by: passes its thresholds, decisive agreement, smaller drift."""
    return (bool(report.get("passed")), report.get("decisive_agreement", 0.0),
            -report.get("max_abs_p", 0.0))


def attempt_path(build: Path, name: str) -> Path:
    """Where a candidate graph `name` is built: a new directory of its own inside `build`."""
    return Path(tempfile.mkdtemp(prefix=f"{name}.attempt", dir=build)) / name


def discard(candidate: Optional[Path]) -> None:
    if candidate is not None:
        shutil.rmtree(candidate.parent, ignore_errors=True)


def best_candidate(name: str, candidates: List[Tuple[Callable[[Path], List[str]], List[str]]],
                   build: Path, precision: str, runs: List[Any], reference: Any, skip: bool,
                   best: Optional[Candidate] = None) -> Candidate:
    """Build and verify each candidate, keeping the best by `rank` (starting from `best`)."""
    for builder, inherited in candidates:
        candidate = attempt_path(build, name)
        optimisations = inherited + builder(candidate)
        report = verified(candidate, precision, runs, reference, skip)
        if best is None or rank(report) > rank(best[2]):
            discard(best[0] if best is not None else None)
            best = (candidate, optimisations, report)
        else:
            discard(candidate)
    assert best is not None, "best_candidate needs at least one candidate"
    return best


def replace_graph(graph: Path, built: Path) -> None:
    """Put the graph built at `built` (with its sidecar, in a directory of its own) in place of
    `graph`, and remove that directory."""
    remove_graph(graph)
    for produced in built.parent.iterdir():
        produced.rename(graph.parent / produced.name)
    built.parent.rmdir()


def remove_graph(path: Path) -> None:
    for doomed in (path, path.with_name(sidecar(path.name))):
        doomed.unlink(missing_ok=True)


def variant_entry(build: Path, name: str, precision: str, optimisations: List[str],
                  report: Dict[str, Any]) -> Dict[str, Any]:
    """The manifest entry of a variant whose graph `name` is in place in `build`."""
    files = [name] + ([sidecar(name)] if (build / sidecar(name)).exists() else [])
    return {"precision": precision, "files": files, "optimisations": optimisations,
            "bytes": sum((build / f).stat().st_size for f in files), "verification": report}
