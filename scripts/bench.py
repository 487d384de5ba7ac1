#!/usr/bin/env python3
"""Benchmark laya_edge next to its peers on the same checkpoint and the same inputs.

For every checkpoint kind (default: a ModernBERT-base-shaped random checkpoint and the MiniLM
real-encoder checkpoint, both written by laya_edge.export.synthetic) the script

1. builds what each runtime needs from that one checkpoint: the laya_edge bundle
   (`python -m laya_edge.export --precision fp32,int8`), a plain export of the same checkpoint
   (`--no-fuse --no-readout`: the graph a straight torch.onnx export gives, with none of
   laya_edge's graph optimisations), and edgejev's directory with its own `edgejev build`
   (int8, keeping its fp32 graph for the fp32 row);
2. runs every runtime in fresh processes on the same support-ticket states (40 to 300 words) and
   questions:

       laya_edge            each precision in the bundle (`laya_edge.load(bundle, precision=..)`)
       upstream-onnx        upstream `laya.onnx_agent.ONNXAgent` on the plain export's graph,
                            and (for reference) on the laya_edge bundle's own fp32 graph
       upstream-torch       upstream `laya.load(checkpoint, device="cpu")`
       edgejev              `edgejev.Agent` on its fp32 and int8 builds

   recording `import` time, construction time, the first answer in a cold process, p50/p90
   latency of 1 state x 1 question and 1 x 10 mixed questions, questions/s of 32 states x 4
   questions, peak RSS and the size on disk; and, against upstream torch's answers to the 32 x 4
   batch, argmax agreement (over every answer, and over the decisive ones, where torch's top two
   options are further apart than the export verification's tie margin) and max |delta p|.
   Each runtime's process runs `--repeats` times, the runtimes taking turns, so a machine whose
   speed drifts during the run slows every runtime alike; latencies pool the samples of every
   repeat, the other figures are medians over the repeats. Before them, each runtime is
   constructed once in a process of its own and that construction time is reported as "first
   load": it finds the files in the page cache like the timed ones, but none of what a runtime
   keeps between loads (laya_edge's digest records and session cache start empty in every bench
   run, so its first load hashes the bundle and writes the session cache entry, the timed ones
   need not; `--no-session-cache` leaves the cache off);
3. prints a markdown table and the acceptance ratios of issue 7, and writes JSON (--json) and
   the table (--markdown).

    python scripts/bench.py --work /tmp/bench --json bench.json --markdown bench.md
    python scripts/bench.py --kinds minilm --iters 10 --rounds 2      # quicker

The laya_edge bundle is exported with `--skip-verify` (its int8 graph is then every weight
multiplication quantised, unchecked); here the agreement columns measure every runtime, int8
included, against upstream torch on the benchmark's own inputs. `--verified-int8` exports it
verified instead, so the int8 row is the graph an export would ship (the int8 search's mixed
graph or the weight-only fallback, docs/export.md). Builds are kept in
`--work` between runs; remove its `bundles/` after changing the exporter.

laya_edge's modules are byte-compiled before anything is timed, as pip does when it installs a
wheel: the peers come from PyPI with their bytecode, and a source checkout run with
PYTHONDONTWRITEBYTECODE would otherwise compile laya_edge anew in every timed process.
"""
from __future__ import annotations

import argparse
import compileall
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from laya_edge.bundle_format import MANIFEST
from laya_edge.export.verify import THRESHOLDS
# scripts/ is on the path when a script runs: the workload the benchmarks share
from workloads import QUESTIONS1, QUESTIONS4, QUESTIONS10, agreement, tickets

REPO = Path(__file__).resolve().parents[1]
DEFAULT_KINDS = ("modernbert-base", "minilm")
UPSTREAM = "upstream ONNXAgent fp32"
UPSTREAM_SAME_GRAPH = "upstream ONNXAgent fp32, laya_edge graph"

CHILD = r'''
import json, resource, sys, time, warnings
T0 = time.perf_counter()
warnings.simplefilter("ignore")
spec = json.loads(sys.argv[1])
inputs = json.load(open(spec["inputs"], encoding="utf-8"))
states, iters, rounds = inputs["states"], spec["iters"], spec["rounds"]

def peak_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0

kind = spec["kind"]
if kind == "laya_edge":
    import laya_edge
    make = lambda: laya_edge.load(spec["path"], device="cpu", precision=spec["precision"])
elif kind == "upstream-onnx":
    from laya.onnx_agent import ONNXAgent
    make = lambda: ONNXAgent(spec["path"], onnx_path=spec["path"] + "/laya.onnx")
elif kind == "upstream-torch":
    import laya
    make = lambda: laya.load(spec["path"], device="cpu")
else:
    from edgejev import Agent
    make = lambda: Agent(spec["path"])
t1 = time.perf_counter()
out = {"import_s": t1 - T0}
agent = make()
t2 = time.perf_counter()
out["construct_s"] = t2 - t1
if spec.get("construct_only"):
    print("BENCH " + json.dumps(out))
    sys.exit(0)
agent.system_one(states[0], inputs["q4"])
t3 = time.perf_counter()
out["first_s"], out["ready_s"], out["loaded_peak_mb"] = t3 - t2, t3 - T0, peak_mb()

def batch(qs):
    if hasattr(agent, "predict_batch"):
        return agent.predict_batch(states, qs)
    return [agent.system_one(state, qs) for state in states]

def latencies(qs):
    for state in states[:3]:
        agent.system_one(state, qs)
    times = []
    for i in range(iters):
        start = time.perf_counter()
        agent.system_one(states[i % len(states)], qs)
        times.append(time.perf_counter() - start)
    return [1e3 * t for t in times]

out["1x1_ms"] = latencies(inputs["q1"])
out["1x10_ms"] = latencies(inputs["q10"])
times, answers = [], None
for _ in range(rounds):
    start = time.perf_counter()
    answers = batch(inputs["q4"])
    times.append(time.perf_counter() - start)
out["32x4_s"] = times
out["peak_mb"] = peak_mb()
out["answers"] = [a["answers"] for a in answers]
print("BENCH " + json.dumps(out))
'''


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def child_env() -> Dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
                HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false")


def call(command: Sequence[str], what: str, quiet: bool = False) -> str:
    if not quiet:
        log(f"  {what}: {' '.join(command)}")
    done = subprocess.run(list(command), capture_output=True, text=True, env=child_env())
    if done.returncode != 0:
        raise SystemExit(f"{what} failed ({done.returncode}):\n{done.stdout[-2000:]}"
                         f"\n{done.stderr[-4000:]}")
    return done.stdout


def size_mb(paths: Sequence[Path]) -> float:
    total = 0
    for path in paths:
        files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
        total += sum(p.stat().st_size for p in files)
    return total / 1e6


def export(checkpoint: Path, bundle: Path, what: str, *flags: str, verify: bool = False) -> None:
    if not (bundle / MANIFEST).exists():
        call([sys.executable, "-m", "laya_edge.export", str(checkpoint), "--out", str(bundle),
              *flags, *(() if verify else ("--skip-verify",)), "--quiet", "--force"], what)


def prepare(kind: str, work: Path, verified_int8: bool = False,
            exporter: Optional[str] = None) -> Dict[str, Path]:
    """The checkpoint, the laya_edge bundle, the plain export and edgejev's fp32/int8
    directories for a kind; `exporter` is the laya_edge exports' `--exporter` (default: the
    exporter's own)."""
    checkpoint = work / "checkpoints" / kind
    bundle = work / "bundles" / (f"{kind}-verified" if verified_int8 else kind)
    plain = work / "bundles" / f"{kind}-plain"
    edge_int8, edge_fp32 = work / "edgejev" / f"{kind}-int8", work / "edgejev" / f"{kind}-fp32"
    if not (checkpoint / "rl_agent_config.json").exists():
        call([sys.executable, "-m", "laya_edge.export.synthetic", "--kind", kind,
              "--out", str(checkpoint)], f"{kind}: checkpoint")
    chosen = ("--exporter", exporter) if exporter else ()
    export(checkpoint, bundle, f"{kind}: laya_edge export", "--precision", "fp32,int8", *chosen,
           *(("--allow-slow-int8",) if verified_int8 else ()), verify=verified_int8)
    export(checkpoint, plain, f"{kind}: plain export", "--no-fuse", "--no-readout", *chosen)
    if not (edge_int8 / "edgejev.json").exists():
        shutil.rmtree(edge_int8, ignore_errors=True)
        call([sys.executable, "-m", "edgejev.cli", "build", "--backend", "laya", "--model",
              str(checkpoint), "--out", str(edge_int8), "--precision", "int8", "--keep-fp32"],
             f"{kind}: edgejev build")
    if not (edge_fp32 / "edgejev.json").exists():
        # `edgejev build --precision fp32` moves the same exported graph into place; reuse the
        # one `--keep-fp32` kept instead of exporting the checkpoint a second time.
        edge_fp32.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(edge_int8 / "_fp32.onnx", edge_fp32 / "model.onnx")
        shutil.copyfile(edge_int8 / "tokenizer.json", edge_fp32 / "tokenizer.json")
        config = json.loads((edge_int8 / "edgejev.json").read_text(encoding="utf-8"))
        config.update(onnx_file="model.onnx", precision="fp32")
        (edge_fp32 / "edgejev.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
        (edge_int8 / "_fp32.onnx").unlink()
    return {"checkpoint": checkpoint, "bundle": bundle, "plain": plain,
            "edgejev-int8": edge_int8, "edgejev-fp32": edge_fp32}


def graph_files(bundle: Path, precision: str = "fp32") -> List[Path]:
    manifest = json.loads((bundle / MANIFEST).read_text(encoding="utf-8"))
    return [bundle / name for name in manifest["variants"][precision]["files"]]


def runtimes(paths: Dict[str, Path]) -> List[Dict[str, Any]]:
    manifest = json.loads((paths["bundle"] / MANIFEST).read_text(encoding="utf-8"))
    tokenizer = paths["bundle"] / "tokenizer"
    rows = []
    for precision in manifest["variants"]:
        rows.append({"name": f"laya_edge {precision}", "kind": "laya_edge",
                     "path": str(paths["bundle"]), "precision": precision,
                     "size_mb": size_mb(graph_files(paths["bundle"], precision) + [tokenizer])})
    rows.append({"name": UPSTREAM, "kind": "upstream-onnx", "path": str(paths["plain"]),
                 "precision": "fp32",
                 "size_mb": size_mb(graph_files(paths["plain"]) + [tokenizer])})
    rows.append({"name": UPSTREAM_SAME_GRAPH, "kind": "upstream-onnx",
                 "path": str(paths["bundle"]), "precision": "fp32",
                 "size_mb": size_mb(graph_files(paths["bundle"]) + [tokenizer])})
    rows.append({"name": "upstream torch fp32", "kind": "upstream-torch",
                 "path": str(paths["checkpoint"]), "precision": "fp32",
                 "size_mb": size_mb([paths["checkpoint"]])})
    for precision in ("fp32", "int8"):
        directory = paths[f"edgejev-{precision}"]
        rows.append({"name": f"edgejev {precision}", "kind": "edgejev",
                     "path": str(directory), "precision": precision,
                     "size_mb": size_mb([directory])})
    return rows


def run_child(spec: Dict[str, Any]) -> Dict[str, Any]:
    stdout = call([sys.executable, "-c", CHILD, json.dumps(spec)], spec["name"], quiet=True)
    line = next(l for l in reversed(stdout.splitlines()) if l.startswith("BENCH "))
    return json.loads(line[len("BENCH "):])


# What a user's program runs first, per runtime: the import of what it answers with.
IMPORTS = {"laya_edge": "import laya_edge",
           "laya_edge runtime": "from laya_edge import ONNXAgent, Router",
           "laya": "from laya import load", "edgejev": "import edgejev"}


def import_times(repeat: int) -> Dict[str, float]:
    """Median wall time of each IMPORTS statement in a fresh interpreter (interpreter start
    excluded), the statements interleaved round by round so drift hits them alike."""
    code = "import sys, time; t = time.perf_counter(); {0}; print(time.perf_counter() - t)"
    samples: Dict[str, List[float]] = {name: [] for name in IMPORTS}
    for _ in range(repeat):
        for name, statement in IMPORTS.items():
            samples[name].append(float(call([sys.executable, "-c", code.format(statement)],
                                            statement, quiet=True)))
    return {name: statistics.median(values) for name, values in samples.items()}


def summarise(name: str, samples: List[Dict[str, Any]], questions: int) -> Dict[str, Any]:
    """One runtime's figures from its repeated processes: latencies from every sample, the rest
    as medians over the processes."""
    def pooled(key: str) -> Dict[str, float]:
        times = sorted(t for sample in samples for t in sample[key])
        return {"p50_ms": statistics.median(times),
                "p90_ms": times[min(len(times) - 1, int(0.9 * len(times)))],
                "samples": len(times)}

    batch_s = statistics.median(t for sample in samples for t in sample["32x4_s"])
    out = {key: statistics.median(sample[key] for sample in samples)
           for key in ("import_s", "construct_s", "first_s", "ready_s", "loaded_peak_mb",
                       "peak_mb")}
    out.update({"1x1": pooled("1x1_ms"), "1x10": pooled("1x10_ms"),
                "32x4": {"s_per_batch": batch_s, "questions_per_s": questions / batch_s},
                "processes": len(samples), "answers": samples[0]["answers"]})
    return out


def bench_kind(kind: str, work: Path, inputs: Path, iters: int, rounds: int,
               repeats: int, verified_int8: bool = False,
               exporter: Optional[str] = None) -> Dict[str, Any]:
    log(f"{kind}: preparing")
    paths = prepare(kind, work, verified_int8, exporter)
    specs = runtimes(paths)
    questions = 32 * len(json.loads(inputs.read_text(encoding="utf-8"))["q4"])
    samples: Dict[str, List[Dict[str, Any]]] = {spec["name"]: [] for spec in specs}
    children = [dict(spec, inputs=str(inputs), iters=iters, rounds=rounds) for spec in specs]
    first_loads = {}
    for child in children:
        log(f"{kind}: {child['name']} (first load)")
        first_loads[child["name"]] = run_child(dict(child, construct_only=True))
    for repeat in range(repeats):
        # Rotate who goes first, so no runtime always meets the machine in the same state.
        for child in children[repeat % len(children):] + children[:repeat % len(children)]:
            log(f"{kind}: {child['name']} ({repeat + 1}/{repeats})")
            samples[child["name"]].append(run_child(child))
    results = [dict(spec, **summarise(spec["name"], samples[spec["name"]], questions),
                    first_construct_s=first_loads[spec["name"]]["construct_s"])
               for spec in specs]
    reference = next(r for r in results if r["kind"] == "upstream-torch")["answers"]
    for row in results:
        row.update(agreement(row.pop("answers"), reference))
    return {"kind": kind, "runtimes": results}


def find(rows: List[Dict[str, Any]], name: str) -> Optional[Dict[str, Any]]:
    return next((row for row in rows if row["name"] == name), None)


def ratios(kind_result: Dict[str, Any], imports: Dict[str, float]) -> List[Dict[str, Any]]:
    """Issue 7's acceptance ratios, each with its bar and whether this run met it; then, with
    no bar, the same per-call ratios against upstream's ONNXAgent on laya_edge's own graph and
    the first loads' construction against edgejev's."""
    rows = kind_result["runtimes"]
    edge, edge8 = find(rows, "laya_edge fp32"), find(rows, "laya_edge int8")
    onnx, same = find(rows, UPSTREAM), find(rows, UPSTREAM_SAME_GRAPH)
    jev32, jev8 = find(rows, "edgejev fp32"), find(rows, "edgejev int8")
    int8 = THRESHOLDS["int8"]
    checks = [
        ("runtime import vs upstream's (from ... import)", imports["laya_edge runtime"]
         / imports["laya"], "<=", 1 / 20),
        ("cold first answer vs upstream ONNXAgent", edge["ready_s"] / onnx["ready_s"], "<=", 1 / 3),
        ("p50 1x1 vs upstream ONNXAgent", edge["1x1"]["p50_ms"] / onnx["1x1"]["p50_ms"], "<=", 0.7),
        ("p50 1x10 vs upstream ONNXAgent", edge["1x10"]["p50_ms"] / onnx["1x10"]["p50_ms"], "<=",
         0.6),
        ("32x4 questions/s vs upstream ONNXAgent", edge["32x4"]["questions_per_s"]
         / onnx["32x4"]["questions_per_s"], ">=", 1.5),
        ("peak RSS loaded vs upstream ONNXAgent", edge["loaded_peak_mb"] / onnx["loaded_peak_mb"],
         "<=", 0.5),
        ("p50 1x1 fp32 vs edgejev fp32", edge["1x1"]["p50_ms"] / jev32["1x1"]["p50_ms"], "<=", 1.0),
        ("p50 1x10 fp32 vs edgejev fp32", edge["1x10"]["p50_ms"] / jev32["1x10"]["p50_ms"], "<=",
         1.0),
        ("32x4 q/s fp32 vs edgejev fp32", edge["32x4"]["questions_per_s"]
         / jev32["32x4"]["questions_per_s"], ">=", 1.0),
        ("cold first answer fp32 vs edgejev fp32", edge["ready_s"] / jev32["ready_s"], "<=", 1.0),
        ("construction fp32 vs edgejev fp32", edge["construct_s"] / jev32["construct_s"], "<=",
         1.0),
        ("peak RSS loaded fp32 vs edgejev fp32", edge["loaded_peak_mb"] / jev32["loaded_peak_mb"],
         "<=", 1.0),
        ("size fp32 vs edgejev fp32", edge["size_mb"] / jev32["size_mb"], "<=", 1.0),
    ]
    if edge8 is not None:
        checks += [
            ("p50 1x1 int8 vs edgejev int8", edge8["1x1"]["p50_ms"] / jev8["1x1"]["p50_ms"], "<=",
             1.0),
            ("p50 1x1 fp32 / int8 (speed-up)", edge["1x1"]["p50_ms"] / edge8["1x1"]["p50_ms"],
             ">=", 1.8),
            ("int8 decisive argmax agreement vs torch", edge8["decisive_agreement"], ">=",
             int8["argmax_agreement"]),
            ("int8 max abs dp vs torch", edge8["max_abs_p"], "<=", int8["max_abs_p"]),
        ]
    measured = [{"check": name, "value": value, "bar": f"{op} {bar:.3g}",
                 "met": value <= bar if op == "<=" else value >= bar}
                for name, value, op, bar in checks]
    reference = [
        ("p50 1x1 vs upstream ONNXAgent on laya_edge's graph",
         edge["1x1"]["p50_ms"] / same["1x1"]["p50_ms"]),
        ("p50 1x10 vs upstream ONNXAgent on laya_edge's graph",
         edge["1x10"]["p50_ms"] / same["1x10"]["p50_ms"]),
        ("32x4 questions/s vs upstream ONNXAgent on laya_edge's graph",
         edge["32x4"]["questions_per_s"] / same["32x4"]["questions_per_s"]),
        ("first-load construction fp32 vs edgejev fp32's",
         edge["first_construct_s"] / jev32["first_construct_s"]),
    ]
    return measured + [{"check": name, "value": value, "bar": None, "met": None}
                       for name, value in reference]


def markdown(report: Dict[str, Any]) -> str:
    cache = "on" if report["settings"]["session_cache"] else "off"
    lines = [f"Machine: {report['machine']}", "", f"laya_edge session cache: {cache}", "",
             "`import` (fresh interpreter, median): " + ", ".join(
                 f"{name} {seconds * 1e3:.0f} ms" for name, seconds in report["imports"].items()),
             ""]
    for kind in report["kinds"]:
        lines += [f"### {kind['kind']}", "",
                  "| runtime | import s | construct s (first load) | cold first answer s | "
                  "1x1 p50/p90 ms | 1x10 p50/p90 ms | 32x4 q/s | peak RSS MB (loaded / end) | "
                  "size MB | argmax agreement vs torch (all / decisive) | max abs dp |",
                  "|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in kind["runtimes"]:
            lines.append(
                f"| {r['name']} | {r['import_s']:.2f} | {r['construct_s']:.2f} "
                f"({r['first_construct_s']:.2f}) | "
                f"{r['ready_s']:.2f} | {r['1x1']['p50_ms']:.1f} / {r['1x1']['p90_ms']:.1f} | "
                f"{r['1x10']['p50_ms']:.1f} / {r['1x10']['p90_ms']:.1f} | "
                f"{r['32x4']['questions_per_s']:.1f} | {r['loaded_peak_mb']:.0f} / "
                f"{r['peak_mb']:.0f} | {r['size_mb']:.1f} | {r['argmax_agreement']:.4f} / "
                f"{r['decisive_agreement']:.4f} | {r['max_abs_p']:.4f} |")
        lines += ["", "| check | value | bar | met |", "|---|---|---|---|"]
        lines += [f"| {c['check']} | {c['value']:.3f} | {c['bar'] or '(for reference)'} | "
                  f"{'-' if c['met'] is None else 'yes' if c['met'] else 'NO'} |"
                  for c in kind["ratios"]]
        lines.append("")
    return "\n".join(lines)


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import onnxruntime
    return (f"{cpu}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
            f"onnxruntime {onnxruntime.__version__}")


def publish(report: Dict[str, Any], table: str, json_path: Optional[Path],
            markdown_path: Optional[Path]) -> None:
    """Print the table, and write the report as JSON and the table as markdown where asked."""
    print(table)
    if json_path:
        json_path.write_text(json.dumps(report, indent=2), encoding="utf-8")
    if markdown_path:
        markdown_path.write_text(table + "\n", encoding="utf-8")


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kinds", default=",".join(DEFAULT_KINDS),
                        help="checkpoint kinds of laya_edge.export.synthetic, comma-separated")
    parser.add_argument("--work", type=Path, default=None,
                        help="where checkpoints and builds are kept between runs "
                             "(default: a temporary directory)")
    parser.add_argument("--iters", type=int, default=30,
                        help="timed calls per latency figure, in each process")
    parser.add_argument("--rounds", type=int, default=3,
                        help="timed 32x4 batches (the runtimes are warm from the latency runs)")
    parser.add_argument("--repeats", type=int, default=3,
                        help="fresh processes per runtime, the runtimes taking turns")
    parser.add_argument("--imports", type=int, default=5, help="fresh interpreters per import")
    parser.add_argument("--no-session-cache", dest="session_cache", action="store_false",
                        help="leave laya_edge's session cache (LAYA_EDGE_SESSION_CACHE) off")
    parser.add_argument("--verified-int8", action="store_true",
                        help="export the laya_edge bundle verified (with --allow-slow-int8), so "
                             "its int8 row is the graph an export ships: the int8 search's "
                             "mixed graph or the weight-only fallback (docs/export.md, int8)")
    parser.add_argument("--exporter", choices=("dynamo", "torchscript"), default=None,
                        help="the laya_edge exports' --exporter (default: the exporter's own); "
                             "torchscript builds faster, the answers are the same")
    parser.add_argument("--json", type=Path, help="write the full report here")
    parser.add_argument("--markdown", type=Path, help="write the markdown table here")
    args = parser.parse_args(argv)
    work = args.work or Path(tempfile.mkdtemp(prefix="laya-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    compileall.compile_dir(str(REPO / "laya_edge"), quiet=1)
    records = work / "digest-records"
    shutil.rmtree(records, ignore_errors=True)
    os.environ["LAYA_EDGE_DIGEST_CACHE"] = str(records)
    sessions = work / "session-cache"
    shutil.rmtree(sessions, ignore_errors=True)
    os.environ["LAYA_EDGE_SESSION_CACHE"] = str(sessions) if args.session_cache else "off"
    inputs = work / "inputs.json"
    inputs.write_text(json.dumps({"states": tickets(32), "q1": QUESTIONS1, "q10": QUESTIONS10,
                                  "q4": QUESTIONS4}), encoding="utf-8")
    imports = import_times(args.imports)
    kinds = []
    for kind in [k.strip() for k in args.kinds.split(",") if k.strip()]:
        result = bench_kind(kind, work, inputs, args.iters, args.rounds, args.repeats,
                            args.verified_int8, args.exporter)
        result["ratios"] = ratios(result, imports)
        kinds.append(result)
    report = {"machine": machine(), "imports": imports, "kinds": kinds,
              "settings": {"iters": args.iters, "rounds": args.rounds,
                           "repeats": args.repeats, "session_cache": args.session_cache,
                           "verified_int8": args.verified_int8, "exporter": args.exporter}}
    publish(report, markdown(report), args.json, args.markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
