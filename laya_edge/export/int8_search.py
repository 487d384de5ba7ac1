"""Mixed-precision int8: which weight multiplications stay in fp32, found by measurement.

Dynamic int8 quantises the input of each weight multiplication with one scale per call. Where
a layer's activations carry a few outlier features (MiniLM's, for example) the small values
beside them round away and the decision moves; the other layers quantise harmlessly. So the
search measures rather than guesses (docs/export.md, "int8"):

1. sensitivity: each quantisable node quantised alone, everything else fp32, verified on the
   search probes (decisive argmax flips, max |dp|);
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


@dataclass
class SearchOutcome:
    """What the search found: the graph (in its own attempt directory) and how."""

    graph: Optional[Path]
    optimisations: List[str]
    report: Dict[str, Any]
    kept_fp32: List[Dict[str, Any]]
    candidates: int
    curve: List[Dict[str, Any]] = field(default_factory=list)

    def record(self) -> Dict[str, Any]:
        """The manifest's account of the search."""
        return {"method": "sensitivity search: each node quantised alone on the search probes, "
                          "the most harmful kept fp32 until accepted on the search probes",
                "quantisable_nodes": self.candidates, "kept_fp32": self.kept_fp32,
                "curve": self.curve}


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


def sensitivities(nodes: Sequence[Tuple[str, str]], build_dir: Path, name: str, build: Build,
                  evaluate: Evaluate, log: Callable[[str], None]) -> Dict[str, Dict[str, Any]]:
    """`{node: report}`: the search-probe report of the graph with only that node quantised."""
    names = [node for node, _ in nodes]
    alone: Dict[str, Dict[str, Any]] = {}
    for index, (node, op) in enumerate(nodes, 1):
        candidate = attempt_path(build_dir, name)
        build(candidate, [other for other in names if other != node])
        alone[node] = evaluate(candidate)
        discard(candidate)
        log(f"int8 search: sensitivity {index}/{len(names)}: {node} ({op}) alone: "
            f"max |dp| {alone[node]['max_abs_p']:.3f}, decisive agreement "
            f"{alone[node]['decisive_agreement']:.3f}")
    return alone


def most_harmful_first(alone: Dict[str, Dict[str, Any]]) -> List[str]:
    return sorted(alone, key=lambda node: harm(alone[node]), reverse=True)


def search_mixed_int8(nodes: Sequence[Tuple[str, str]], build_dir: Path, name: str,
                      build: Build, evaluate: Evaluate, accept: Accept,
                      log: Callable[[str], None]) -> SearchOutcome:
    """Find the fewest nodes to keep fp32 for the search probes to accept (see the module)."""
    names = [node for node, _ in nodes]
    ops = dict(nodes)
    alone = sensitivities(nodes, build_dir, name, build, evaluate, log)
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
    kept = [{"node": node, "op": ops[node],
             "alone_max_abs_p": alone[node]["max_abs_p"],
             "alone_decisive_agreement": alone[node]["decisive_agreement"]}
            for node in (order[:passing] if passing is not None else [])]
    curve.sort(key=lambda point: point["kept_fp32"])
    if chosen is None:
        return SearchOutcome(None, [], {}, [], len(names), curve)
    return SearchOutcome(chosen[0], chosen[1], chosen[2], kept, len(names), curve)
