#!/usr/bin/env python3
"""The int8 trade-off curve of one checkpoint: accuracy and speed as fp32 nodes are added.

`python -m laya_edge.export --precision fp32,int8` ships the fewest fp32 nodes that pass; this
script shows the whole curve the choice is made on, for docs/export.md ("int8"). It exports the
checkpoint's fp32 bundle (fused, verified), picks the best of the four dynamic settings fully
quantised (on the search probes, as the exporter does), measures each node's sensitivity the
way the exporter's search does (node by node, or in runs of consecutive nodes on big encoders),
and then, for each count of most harmful nodes kept fp32:

- the search-probe and held-out-probe figures (decisive argmax agreement, max |dp|) and whether
  the held-out ones pass the int8 bar;
- the speed-up over the fp32 graph (interleaved rounds, the exporter's own timing) and the size.

    python scripts/int8_tradeoff.py CHECKPOINT --work DIR [--counts 0,1,2,4,8,16,24,32]
        [--run-length N]

Writes DIR/int8-tradeoff.json and prints a Markdown table. State the CPU with the figures
(the JSON records it): speed-ups depend on the processor's int8 instructions.
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple


def log(message: str) -> None:
    print(f"[int8-tradeoff] {message}", file=sys.stderr, flush=True)


def fp32_bundle(checkpoint: Path, out: Path) -> Path:
    """The checkpoint's fp32 bundle (fused, verified) at `out`, exported unless already there."""
    from laya_edge.export import ExportOptions, Progress, export_bundle

    if not (out / "laya_edge.json").is_file():
        export_bundle(ExportOptions(source=str(checkpoint), out=out, force=True), Progress())
    return out


def probe_runs(checkpoint: Path) -> Tuple[Any, List[Any], List[Any]]:
    """`(reference, search runs, held-out runs)`: the PyTorch model and its answers on the
    exporter's two probe sets, as the exporter's int8 choice uses them."""
    from laya_edge.export.probes import held_out_cases, probe_cases
    from laya_edge.export.reference import Reference
    from laya_edge.export.verify import run_reference

    reference = Reference(checkpoint)
    max_len = int(json.loads((checkpoint / "rl_agent_config.json").read_text())
                  .get("max_len", 512))
    return (reference, run_reference(reference, probe_cases(max_len)),
            run_reference(reference, held_out_cases(max_len)))


def measure(checkpoint: Path, work: Path, counts: Sequence[int],
            run_length: Optional[int] = None) -> Dict[str, Any]:
    from laya_edge.bundle_format import GRAPH, read_manifest
    from laya_edge.export import int8_search, speed
    from laya_edge.export.candidates import attempt_path, discard, rank, verified
    from laya_edge.export.int8_variant import SETTINGS
    from laya_edge.export.precision import to_int8

    bundle = fp32_bundle(checkpoint, work / "fp32")
    graph = bundle / GRAPH
    external = bool(read_manifest(bundle)["graph"].get("external_data"))
    reference, search_runs, held_runs = probe_runs(checkpoint)
    scratch = work / "attempts"
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    name = "laya.int8.onnx"

    def build(setting, keep_fp32, target):
        return to_int8(graph, target, setting[0], setting[1], False, external, keep_fp32)

    settings = []
    for setting in SETTINGS:
        candidate = attempt_path(scratch, name)
        build(setting, (), candidate)
        settings.append((rank(verified(candidate, "int8", search_runs, reference, False)),
                         setting))
        discard(candidate)
    setting = max(settings)[1]
    log(f"dynamic setting: per_channel={setting[0]}, reduce_range={setting[1]}")
    nodes = int8_search.quantisable_nodes(graph)
    length = run_length or int8_search.run_length(len(nodes))
    alone = int8_search.sensitivities(
        nodes, scratch, name, lambda target, keep: build(setting, keep, target),
        lambda path: verified(path, "int8", search_runs, reference, False), log, length)
    order = int8_search.most_harmful_first(alone)
    batches = speed.timing_batches(search_runs)
    points: List[Dict[str, Any]] = []
    for count in sorted({min(c, len(nodes)) for c in counts}):
        candidate = attempt_path(scratch, name)
        build(setting, order[:count], candidate)
        searched = verified(candidate, "int8", search_runs, reference, False)
        held = verified(candidate, "int8", held_runs, reference, False)
        timing = speed.speedup_over(graph, candidate, batches)
        size = sum(f.stat().st_size for f in candidate.parent.iterdir())
        points.append({"kept_fp32": count, "of": len(nodes),
                       "search": {k: searched[k] for k in ("decisive_agreement", "max_abs_p")},
                       "held_out": {k: held[k] for k in ("decisive_agreement", "max_abs_p",
                                                         "passed")},
                       "speedup": timing["speedup"], "mb": round(size / 1e6, 1)})
        log(f"{count} kept: held-out agreement {held['decisive_agreement']:.3f}, max |dp| "
            f"{held['max_abs_p']:.3f}, {timing['speedup']:.2f}x fp32")
        discard(candidate)
    shutil.rmtree(scratch, ignore_errors=True)
    return {"checkpoint": str(checkpoint), "setting": {"per_channel": setting[0],
                                                       "reduce_range": setting[1]},
            "run_length": length, "cpu": speed.cpu_description(),
            "order": order[:max(counts, default=0)], "points": points}


# The figures every row of these scripts' tables gives, after its own leading columns.
MEASURED_COLUMNS = ("held-out decisive agreement", "held-out max \\|dp\\|", "passes",
                    "search max \\|dp\\|", "speed-up vs fp32")


def measured_cells(entry: Dict[str, Any]) -> List[str]:
    """The `MEASURED_COLUMNS` of one measured graph (`held_out`, `search`, `speedup`)."""
    held = entry["held_out"]
    return [f"{held['decisive_agreement']:.3f}", f"{held['max_abs_p']:.3f}",
            "yes" if held["passed"] else "no", f"{entry['search']['max_abs_p']:.3f}",
            f"{entry['speedup']:.2f}x"]


def markdown_table(columns: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


def publish(result: Dict[str, Any], path: Path) -> None:
    """Write `result` as JSON to `path` and print the CPU it was measured on."""
    path.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    cpu = result["cpu"]
    print(f"CPU: {cpu['model']} (VNNI: {cpu['vnni']}, AMX: {cpu['amx']})")


def table(result: Dict[str, Any]) -> str:
    return markdown_table(("kept fp32",) + MEASURED_COLUMNS + ("MB",), [
        [f"{point['kept_fp32']} of {point['of']}"] + measured_cells(point) + [str(point["mb"])]
        for point in result["points"]])


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint", type=Path)
    parser.add_argument("--work", type=Path, required=True,
                        help="scratch directory; the fp32 bundle is kept there for reruns")
    parser.add_argument("--counts", default="0,1,2,4,8,12,16,24,32",
                        help="how many of the most harmful nodes to keep fp32, comma-separated")
    parser.add_argument("--run-length", type=int, default=None,
                        help="nodes quantised together per sensitivity measurement (default: "
                             "the exporter's, 1 up to 48 quantisable nodes, else runs of "
                             "about a layer)")
    args = parser.parse_args(argv)
    if args.run_length is not None and args.run_length < 1:
        parser.error("argument --run-length: must be at least 1")
    try:
        counts = [int(part) for part in args.counts.split(",") if part.strip()]
    except ValueError:
        parser.error(f"argument --counts: comma-separated integers, got {args.counts!r}")
    if any(count < 0 for count in counts):
        parser.error("argument --counts: counts must not be negative")
    from laya_edge.export.logs import progress_on_stderr

    with progress_on_stderr("laya_edge.export", "laya_edge.export"):
        result = measure(args.checkpoint, args.work, counts, args.run_length)
    publish(result, args.work / "int8-tradeoff.json")
    print(f"dynamic setting {result['setting']}")
    print(table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
