"""Mixed-precision int8: which weight multiplications stay in fp32, found by measurement.

Dynamic int8 quantises the input of each weight multiplication with one scale per call. Where
a layer's activations carry a few outlier features (MiniLM's, for example) the small values
beside them round away and the decision moves; the other layers quantise harmlessly. So the
search measures rather than guesses (docs/export.md, "int8"):

1. sensitivity: each quantisable node quantised alone, everything else fp32, verified on the
   search probes (decisive argmax flips, max |dp|); on big encoders, each run of consecutive
   nodes (about one layer) quantised alone instead, its nodes then ranked together in graph
   order (`run_length`);
2. the nodes ordered most harmful first, and the fewest of them kept in fp32 for the graph to
   be accepted on the search probes (the caller's test: the bar with headroom, so that the
   graph also passes on probes it was not chosen on), found by doubling the count and then
   bisecting;
3. the caller verifies the chosen graph on held-out probes the search never saw.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from .candidates import attempt_path, discard

# The operators dynamic quantisation rewrites when their weight (second input) is a constant.
QUANTISABLE_OPS = ("MatMul", "Gemm", "Attention")

Build = Callable[[Path, Sequence[str]], List[str]]  # (target, nodes left fp32) -> optimisations
Evaluate = Callable[[Path], Dict[str, Any]]  # graph -> verification report on the search probes
Accept = Callable[[Dict[str, Any]], bool]  # a search-probe report -> good enough to stop

# Up to this many quantisable nodes each is measured alone (MiniLM has 40); above it the nodes
# are measured in at most RUNS runs of consecutive ones, since each measurement is a build and a
# verification (ModernBERT-base: 21 instead of 126). Graph order follows the encoder's layers,
# so a run is about one layer.
NODES_MEASURED_ALONE = 48
RUNS = 24


@dataclass
class SearchOutcome:
    """What the search found: the graph (in its own attempt directory) and how."""

    graph: Optional[Path]
    optimisations: List[str]
    report: Dict[str, Any]
    kept_fp32: List[Dict[str, Any]]
    candidates: int
    run_length: int = 1
    curve: List[Dict[str, Any]] = field(default_factory=list)

    def record(self) -> Dict[str, Any]:
        """The manifest's account of the search."""
        measured = ("each node" if self.run_length == 1 else
                    f"each run of {self.run_length} consecutive nodes")
        return {"method": f"sensitivity search: {measured} quantised alone on the search "
                          "probes, the most harmful kept fp32 until accepted on the search probes",
                "quantisable_nodes": self.candidates, "run_length": self.run_length,
                "kept_fp32": self.kept_fp32, "curve": self.curve}


def quantisable_nodes(graph: Path) -> List[Tuple[str, str]]:
    """`(name, op_type)` of every node dynamic int8 would quantise, in graph order."""
    import onnx

    model = onnx.load(str(graph), load_external_data=False)
    constants = {init.name for init in model.graph.initializer}
    return [(node.name, node.op_type) for node in model.graph.node
            if node.op_type in QUANTISABLE_OPS and len(node.input) > 1
            and node.input[1] in constants]


def curve_point(kept: int, report: Dict[str, Any], accepted: bool) -> Dict[str, Any]:
    return {"kept_fp32": kept, "decisive_agreement": report["decisive_agreement"],
            "max_abs_p": report["max_abs_p"], "accepted": accepted}


def harm(report: Dict[str, Any]) -> Tuple[float, float]:
    """Larger is worse: decisive flips first, then the largest probability drift."""
    return (1.0 - report.get("decisive_agreement", 0.0), report.get("max_abs_p", 0.0))


def _counts_to_try(total: int) -> List[int]:
    """1, 2, 4, ... and finally `total - 1`: how many nodes to keep fp32, fewest first (at
    least one node stays quantised, or the graph would not be int8)."""
    counts, count = [], 1
    while count < total - 1:
        counts.append(count)
        count *= 2
    return counts + ([total - 1] if total > 1 else [])


def run_length(total: int) -> int:
    """How many consecutive nodes each sensitivity measurement quantises (see RUNS)."""
    return 1 if total <= NODES_MEASURED_ALONE else -(-total // RUNS)


def sensitivities(nodes: Sequence[Tuple[str, str]], build_dir: Path, name: str, build: Build,
                  evaluate: Evaluate, log: Callable[[str], None],
                  length: int = 1) -> Dict[str, Dict[str, Any]]:
    """`{node: report}`: the search-probe report of the graph with only that node quantised, or
    only the run of `length` consecutive nodes it belongs to (each member gets the run's
    report, with `measured_with` saying how many nodes it covers), in graph order."""
    names, ops = [node for node, _ in nodes], dict(nodes)
    runs = [names[start:start + length] for start in range(0, len(names), length)]
    alone: Dict[str, Dict[str, Any]] = {}
    for index, run in enumerate(runs, 1):
        candidate = attempt_path(build_dir, name)
        build(candidate, [other for other in names if other not in run])
        report = dict(evaluate(candidate), measured_with=len(run))
        discard(candidate)
        alone.update((node, report) for node in run)
        what = (f"{run[0]} ({ops[run[0]]})" if len(run) == 1 else
                f"{run[0]} .. {run[-1]} ({len(run)} nodes)")
        log(f"int8 search: sensitivity {index}/{len(runs)}: {what} alone: "
            f"max |dp| {report['max_abs_p']:.3f}, decisive agreement "
            f"{report['decisive_agreement']:.3f}")
    return alone


def most_harmful_first(alone: Dict[str, Dict[str, Any]]) -> List[str]:
    """The nodes by harm; equals (a run's members) keep their graph order, the sort is stable."""
    return sorted(alone, key=lambda node: harm(alone[node]), reverse=True)


def search_mixed_int8(nodes: Sequence[Tuple[str, str]], build_dir: Path, name: str,
                      build: Build, evaluate: Evaluate, accept: Accept,
                      log: Callable[[str], None]) -> SearchOutcome:
    """Find the fewest nodes to keep fp32 for the search probes to accept (see the module)."""
    names = [node for node, _ in nodes]
    ops = dict(nodes)
    length = run_length(len(names))
    alone = sensitivities(nodes, build_dir, name, build, evaluate, log, length)
    order = most_harmful_first(alone)
    chosen: Optional[Tuple[Path, List[str], Dict[str, Any]]] = None  # the fewest accepted
    curve: List[Dict[str, Any]] = []

    def attempt(count: int) -> bool:
        nonlocal chosen
        candidate = attempt_path(build_dir, name)
        optimisations = build(candidate, order[:count])
        report = evaluate(candidate)
        accepted = accept(report)
        if accepted:  # counts only go down once one is accepted
            discard(chosen[0] if chosen is not None else None)
            chosen = (candidate, optimisations, report)
        else:
            discard(candidate)
        curve.append(curve_point(count, report, accepted))
        log(f"int8 search: {count} of {len(names)} nodes kept fp32: max |dp| "
            f"{report['max_abs_p']:.3f}, decisive agreement "
            f"{report['decisive_agreement']:.3f}{' (accepted)' if accepted else ''}")
        return accepted

    failing, passing = 0, None
    for count in _counts_to_try(len(names)):
        if attempt(count):
            passing = count
            break
        failing = count
    while passing is not None and passing - failing > 1:
        middle = (passing + failing) // 2
        if attempt(middle):
            passing = middle
        else:
            failing = middle
    kept = [{"node": node, "op": ops[node], "alone_max_abs_p": alone[node]["max_abs_p"],
             "alone_decisive_agreement": alone[node]["decisive_agreement"],
             "measured_with": alone[node]["measured_with"]}
            for node in (order[:passing] if passing is not None else [])]
    curve.sort(key=lambda point: point["kept_fp32"])
    if chosen is None:
        return SearchOutcome(None, [], {}, [], len(names), length, curve)
    return SearchOutcome(chosen[0], chosen[1], chosen[2], kept, len(names), length, curve)
