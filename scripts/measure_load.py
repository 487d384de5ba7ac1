#!/usr/bin/env python3
"""Measure what it costs to start answering: laya_edge's ONNXAgent next to upstream's.

For every bundle and runtime, fresh Python processes (one per repeat) each record

    import      importing the runtime module (laya_edge / laya.onnx_agent)
    construct   building the agent on the bundle (the constructor alone)
    first       the first answer (`system_one` on a short state, three question types)

as wall time, and the process's peak resident set size (`ru_maxrss`) after each step; the table
shows the median over the repeats. Upstream runs as `laya.onnx_agent.ONNXAgent(bundle,
onnx_path=bundle/laya.onnx)`, i.e. on the very same graph and tokenizer files.

    python -m laya_edge.export.synthetic --all /tmp/ckpt
    python -m laya_edge.export /tmp/ckpt/minilm --out /tmp/bundles/minilm
    python scripts/measure_load.py /tmp/bundles/minilm [more bundles] [--repeat 5] [--json out.json]

Prints a markdown table, then the JSON of every measurement.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List

REPO = Path(__file__).resolve().parents[1]
RUNTIMES = ("laya_edge", "upstream")

CHILD = r'''
import json, resource, sys, time, warnings
warnings.simplefilter("ignore")
runtime, bundle = sys.argv[1], sys.argv[2]
questions = {
    "dept": {"type": "choice", "instructions": "Which team should handle this ticket?",
             "criteria": ["billing", "tech", "sales"]},
    "urgent": {"type": "noul", "instructions": "Is this urgent?"},
    "sev": {"type": "score", "instructions": "How severe?", "criteria": ["low", "mid", "high"]},
}

def peak_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0

out = {"baseline_peak_mb": peak_mb()}
t0 = time.perf_counter()
if runtime == "laya_edge":
    import laya_edge
    from laya_edge.onnx_agent import ONNXAgent
    build = lambda: laya_edge.load(bundle)
else:
    from laya.onnx_agent import ONNXAgent
    build = lambda: ONNXAgent(bundle, onnx_path=bundle + "/laya.onnx")
t1 = time.perf_counter()
out["import_s"], out["import_peak_mb"] = t1 - t0, peak_mb()
agent = build()
t2 = time.perf_counter()
out["construct_s"], out["construct_peak_mb"] = t2 - t1, peak_mb()
answer = agent.system_one("My invoice was charged twice this month.", questions)
t3 = time.perf_counter()
out["first_s"], out["first_peak_mb"] = t3 - t2, peak_mb()
out["ready_s"] = t3 - t0
out["torch_loaded"] = "torch" in sys.modules
out["transformers_loaded"] = "transformers" in sys.modules
out["choice"] = answer["answers"]["dept"]["choice"]
print(json.dumps(out))
'''


def measure_once(runtime: str, bundle: Path) -> Dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
               HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    done = subprocess.run([sys.executable, "-c", CHILD, runtime, str(bundle)],
                          capture_output=True, text=True, env=env, timeout=600)
    if done.returncode != 0:
        raise SystemExit(f"{runtime} on {bundle} failed:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def bundle_size_mb(bundle: Path) -> float:
    return sum(p.stat().st_size for p in bundle.rglob("*") if p.is_file()) / 1e6


def summarise(runs: List[Dict[str, Any]]) -> Dict[str, Any]:
    keys = [k for k, v in runs[0].items() if isinstance(v, float)]
    summary: Dict[str, Any] = {k: statistics.median(run[k] for run in runs) for k in keys}
    for key in ("torch_loaded", "transformers_loaded", "choice"):
        summary[key] = runs[0][key]
    return summary


def table(results: List[Dict[str, Any]]) -> str:
    head = ("| bundle | runtime | import s | construct s | first answer s | import→answer s | "
            "peak RSS after construct MB | peak RSS after first answer MB | torch / transformers "
            "loaded |")
    rule = "|" + "---|" * 9
    rows = [head, rule]
    for r in results:
        m = r["median"]
        rows.append(f"| {r['bundle']} ({r['bundle_mb']:.0f} MB) | {r['runtime']} | "
                    f"{m['import_s']:.2f} | {m['construct_s']:.2f} | {m['first_s']:.3f} | "
                    f"{m['ready_s']:.2f} | {m['construct_peak_mb']:.0f} | "
                    f"{m['first_peak_mb']:.0f} | "
                    f"{'yes' if m['torch_loaded'] else 'no'} / "
                    f"{'yes' if m['transformers_loaded'] else 'no'} |")
    return "\n".join(rows)


def main(argv: List[str] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("bundles", nargs="+", type=Path, help="exported bundle directories")
    parser.add_argument("--repeat", type=int, default=3, help="fresh processes per runtime")
    parser.add_argument("--runtime", choices=RUNTIMES, action="append",
                        help="measure only this runtime (repeatable; default both)")
    parser.add_argument("--json", type=Path, help="also write the measurements here")
    args = parser.parse_args(argv)
    results = []
    for bundle in args.bundles:
        for runtime in args.runtime or RUNTIMES:
            runs = [measure_once(runtime, bundle.resolve()) for _ in range(args.repeat)]
            results.append({"bundle": bundle.name, "bundle_mb": bundle_size_mb(bundle),
                            "runtime": runtime, "repeat": args.repeat, "median": summarise(runs),
                            "runs": runs})
            print(f"measured {runtime} on {bundle.name}", file=sys.stderr)
    print(table(results))
    print()
    payload = {"python": sys.version.split()[0], "cpus": os.cpu_count(), "results": results}
    print(json.dumps(payload, indent=2))
    if args.json:
        args.json.write_text(json.dumps(payload, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
