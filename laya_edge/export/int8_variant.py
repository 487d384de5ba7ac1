"""The int8 variant: accurate on probes it was not chosen on, and faster than fp32, or refused.

Candidates, in order, until one passes the int8 bar on the search probes and then again on the
held-out probes (another seed of the probe generator, never seen while choosing):

1. dynamic int8 of every weight multiplication, per-tensor and per-channel, each with full and
   7-bit weight range (the best of the four);
2. the same with the most sensitive nodes left in fp32 (`int8_search`), in the best of those
   four settings;
3. weight-only int8 (MatMulNBits, fp32 compute), smallest scheme first.

Static QDQ is not among them: measured (scripts/int8_static.py), it came no closer to the bar
than dynamic int8 and ran no faster (docs/export.md, "int8").

`int8_weight_only` goes straight to 3, for the smallest graph rather than a faster one.

The chosen graph is then timed against the fp32 graph (`speed`); one that is not faster is
refused unless the export allows it (`allow_slow_int8`) or asked for weight-only int8, and the
figure goes into the manifest either way, so `precision="auto"` can leave a slow int8 graph
alone.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from . import int8_search, speed
from .candidates import (Candidate, attempt_path, best_candidate, discard, rank, replace_graph,
                         variant_entry, verified)
from .precision import (EMBEDDING_BLOCK, VARIANT_FILES, WEIGHT_ONLY_SCHEMES, to_int8,
                        to_int8_weight_only)
from .verify import require_pass

NAME = VARIANT_FILES["int8"]
SETTINGS = tuple((channel, reduce) for channel in (False, True) for reduce in (False, True))


# The search stops at a graph whose max |dp| on the search probes is within this share of the
# bar, so that it passes on the held-out probes too. On the planted-outlier test checkpoint
# (tests/test_int8_search.py), stopping at the bar itself kept 10 of 28 nodes fp32 (max |dp|
# 0.045 on the search probes) and moved a held-out 40-option question by 0.077; with this
# headroom it keeps 12 (0.025), and the held-out probes move by at most 0.045.
SEARCH_HEADROOM = 0.5


def _accepted(report: Dict[str, Any]) -> bool:
    return bool(report["passed"]) and (
        report["max_abs_p"] <= SEARCH_HEADROOM * report["thresholds"]["max_abs_p"])


def weight_only_schemes(embeddings: bool) -> List[Tuple[int, bool, int]]:
    """The weight-only schemes to try, in order; without quantised embeddings, a scheme that
    differs only in its embedding block would rebuild the same graph."""
    return [scheme for scheme in WEIGHT_ONLY_SCHEMES if embeddings or scheme[2] == EMBEDDING_BLOCK]


class SlowVariantError(RuntimeError):
    """The int8 graph that passed verification is not faster than fp32 on this machine."""


def int8_variant(options: Any, build: Path, fp32_graph: Path, external: bool,
                 search_runs: List[Any], held_out_runs: List[Any], reference: Any,
                 inherited: List[str], plain: Tuple[Path, List[str]],
                 log: Callable[[str], None]) -> Dict[str, Any]:
    """Build, verify, time and put in place the int8 graph made from `fp32_graph` (the graph
    fp32 runs, fused where it fused); `plain` is the unfused graph and its optimisations, which
    the weight-only fallback is made from. Returns the variant's manifest entry."""

    def dynamic(setting: Tuple[bool, bool], exclude: Sequence[str] = ()) -> Callable:
        return lambda target, excluded=tuple(exclude): to_int8(
            fp32_graph, target, setting[0], setting[1], options.int8_embeddings, external,
            excluded)

    def weight_only(block: int, symmetric: bool, embedding_block: int) -> Callable:
        return lambda target: to_int8_weight_only(plain[0], target, options.int8_embeddings,
                                                  external, block, symmetric, embedding_block)

    if options.skip_verify:  # nothing to choose by: the first candidate, unverified, untimed
        first = ((weight_only(*WEIGHT_ONLY_SCHEMES[0]), plain[1]) if options.int8_weight_only
                 else (dynamic(SETTINGS[0]), inherited))
        graph, optimisations, report = best_candidate(NAME, [first], build, "int8",
                                                      search_runs, reference, True)
        replace_graph(build / NAME, graph)
        return variant_entry(build, NAME, "int8", optimisations, report)

    def held_out(candidate: Candidate) -> Tuple[Optional[Candidate], Candidate]:
        return _held_out(candidate, held_out_runs, reference)

    chosen, failure, search = None, None, None
    if not options.int8_weight_only:
        chosen, failure, search = _dynamic(fp32_graph, build, search_runs, reference, dynamic,
                                           inherited, held_out, log)
    for scheme in weight_only_schemes(options.int8_embeddings) if chosen is None else ():
        candidate = attempt_path(build, NAME)
        optimisations = plain[1] + weight_only(*scheme)(candidate)
        chosen, failure = _better_failure(
            held_out((candidate, optimisations,
                      verified(candidate, "int8", search_runs, reference, False))), failure)
        if chosen is not None:
            break
    if chosen is None:
        require_pass(failure[2], build / NAME)  # raises: says where it diverged
    assert chosen is not None
    discard(failure[0] if failure is not None and failure[0] != chosen[0] else None)
    graph, optimisations, report = chosen
    timing = speed.speedup_over(fp32_graph, graph, speed.timing_batches(search_runs))
    log(f"int8: {timing['speedup']:.2f}x fp32 on this machine ({timing['cpu']['model']})")
    if timing["speedup"] <= 1.0 and not (options.allow_slow_int8 or options.int8_weight_only):
        raise SlowVariantError(
            f"the int8 graph that passed verification runs at {timing['speedup']:.2f}x fp32 on "
            f"this machine ({timing['cpu']['model']}), not faster; pass --allow-slow-int8 to "
            "ship it anyway (precision='auto' then prefers fp32 on the CPU), or leave int8 out "
            "of --precision")
    replace_graph(build / NAME, graph)
    entry = variant_entry(build, NAME, "int8", optimisations, report)
    entry["speed"] = timing
    if search is not None:
        entry["int8_search"] = search.record()
    return entry


def _dynamic(fp32_graph: Path, build: Path, search_runs: List[Any], reference: Any,
             dynamic: Callable, inherited: List[str], held_out: Callable,
             log: Callable[[str], None]) -> Tuple[Optional[Candidate], Candidate, Any]:
    """Candidates 1 and 2 of the module: `(chosen, failure, search)`, the search's outcome None
    where a fully quantised graph passed."""
    tried = []
    for setting in SETTINGS:
        candidate = attempt_path(build, NAME)
        optimisations = inherited + dynamic(setting)(candidate)
        tried.append(((candidate, optimisations, verified(candidate, "int8", search_runs,
                                                          reference, False)), setting))
    tried.sort(key=lambda entry: rank(entry[0][2]), reverse=True)
    for (candidate, _, _), _ in tried[1:]:
        discard(candidate)
    (best, setting), search = tried[0], None
    chosen, failure = held_out(best)
    if chosen is None:
        log("int8: no fully quantised graph passes; searching for the nodes to keep in fp32")
        search = int8_search.search_mixed_int8(
            int8_search.quantisable_nodes(fp32_graph), build, NAME,
            lambda target, exclude: inherited + dynamic(setting, exclude)(target),
            lambda graph: verified(graph, "int8", search_runs, reference, False),
            _accepted, log)
        search.curve.insert(0, int8_search.curve_point(0, best[2], _accepted(best[2])))
        if search.graph is not None:
            found = (search.graph, search.optimisations + [
                f"{len(search.kept_fp32)} of {search.candidates} weight multiplications kept "
                "fp32 (sensitivity search)"], search.report)
            chosen, failure = _better_failure(held_out(found), failure)
    return chosen, failure, search


def _better_failure(outcome: Tuple[Optional[Candidate], Candidate],
                    failure: Optional[Candidate]) -> Tuple[Optional[Candidate], Candidate]:
    """`(chosen, failure)` after one more candidate: a chosen one ends the search; of two
    failures the better ranked is kept (its report is the error's) and the other removed."""
    chosen, failed = outcome
    if chosen is not None:
        return chosen, failure if failure is not None else failed
    if failure is None:
        return None, failed
    keep, drop = (failed, failure) if rank(failed[2]) > rank(failure[2]) else (failure, failed)
    discard(drop[0])
    return None, keep


def _held_out(candidate: Candidate, held_out_runs: List[Any],
              reference: Any) -> Tuple[Optional[Candidate], Candidate]:
    """`(chosen, failure)`: the candidate with its held-out report (the one the manifest
    publishes, the search figures kept beside it) when it passed both probe sets; otherwise
    None and the candidate with the report it failed."""
    graph, optimisations, search_report = candidate
    if not search_report["passed"]:
        return None, candidate
    report = verified(graph, "int8", held_out_runs, reference, False)
    report["probes"] = "held-out"
    report["search"] = {key: search_report[key] for key in
                        ("rows", "decisive_agreement", "max_abs_p", "passed")}
    outcome = (graph, optimisations, report)
    return (outcome, outcome) if report["passed"] else (None, outcome)
