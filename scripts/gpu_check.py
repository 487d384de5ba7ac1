#!/usr/bin/env python3
"""The GPU check of the precision issue: accuracy and speed of laya_edge on an NVIDIA GPU.

On the GPU machine (onnxruntime-gpu on PYTHONPATH, see ../shared/gpu/README.md):

    python scripts/gpu_check.py --work /tmp/gpucheck --json $OUT/gpu_check.json

1. with `--tests`, runs the GPU tests (tests/gpu: real CUDA/TensorRT sessions) and reports
   their outcome;
2. writes a ModernBERT-large-shaped random checkpoint (laya_edge.export.synthetic);
3. exports it with fp32 and fp16 variants (python -m laya_edge.export);
4. answers the same tickets on the CPU (fp32, the reference), on CUDA fp32 and on CUDA fp16, and
   reports argmax agreement and max |dp| of the CUDA answers against the CPU ones, and which
   execution provider ran each node (onnxruntime's profile of one run);
5. times 1 state x 1 question, 1 x 10 (mixed types) and 32 x 4 (questions/s) for laya_edge on
   CUDA fp32/fp16 and, when installed, upstream laya (torch) and laya-cuda on the same GPU and
   checkpoint.

`--device cpu --kind modernbert-tiny` runs the same steps on the CPU (the test suite does, to
keep the script working where no GPU is).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

# scripts/ is on the path when a script runs: the question sets are the CPU benchmark's
from workloads import QUESTIONS1, QUESTIONS4, QUESTIONS10, agreement

REPO = Path(__file__).resolve().parents[1]
TICKETS = [
    "I was charged twice for my subscription this month, please refund one of the payments.",
    "The mobile app crashes every time I open the settings page since the last update.",
    "We would like a quote for 50 more seats and a volume discount for the annual plan.",
    "Your latest invoice lists a product we never ordered; our accounts team needs a correction.",
    "My password reset e-mail never arrives and I am locked out before an important demo.",
    "The parcel arrived damaged and two items are missing from the order.",
    "Please delete my account and all my data as required by GDPR.",
    "Great service last week, the agent solved the sync issue in minutes. Thanks!",
]


def log(message: str) -> None:
    print(f"[gpu_check] {message}", file=sys.stderr, flush=True)


def make_checkpoint(kind: str, out: Path) -> None:
    if (out / "rl_agent_config.json").is_file():
        return
    subprocess.run([sys.executable, "-m", "laya_edge.export.synthetic", "--kind", kind,
                    "--out", str(out)], check=True)


def export(checkpoint: Path, out: Path, exporter: str, verify: bool) -> Dict[str, Any]:
    if (out / "laya_edge.json").is_file():
        return {"reused": True}
    command = [sys.executable, "-m", "laya_edge.export", str(checkpoint), "--out", str(out),
               "--precision", "fp32,fp16", "--exporter", exporter, "--json", "--force"]
    if not verify:
        command.append("--skip-verify")
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"export failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def timed(call: Callable[[], Any], rounds: int) -> Dict[str, float]:
    call()
    call()
    samples = []
    for _ in range(rounds):
        started = time.perf_counter()
        call()
        samples.append((time.perf_counter() - started) * 1000)
    samples.sort()
    return {"p50_ms": round(statistics.median(samples), 2),
            "p90_ms": round(samples[int(0.9 * (len(samples) - 1))], 2)}


def figures(single: Callable[[Any, Dict], Any], batch: Callable[[List[Any], Dict], Any],
            rounds: int) -> Dict[str, Any]:
    one = timed(lambda: single(TICKETS[0], QUESTIONS1), rounds)
    ten = timed(lambda: single(TICKETS[1], QUESTIONS10), rounds)
    states = (TICKETS * 4)[:32]
    many = timed(lambda: batch(states, QUESTIONS4), max(3, rounds // 10))
    return {"1x1": one, "1x10": ten,
            "32x4_questions_per_s": round(32 * 4 / (many["p50_ms"] / 1000), 1)}


def compare(reference: List[Dict], candidate: List[Dict]) -> Dict[str, Any]:
    """scripts/bench.py's agreement of two runs' payloads (state by state)."""
    return agreement([result["answers"] for result in candidate],
                     [result["answers"] for result in reference])


def laya_edge_runtime(bundle: Path, device: str, precision: str):
    import laya_edge

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return laya_edge.load(str(bundle), device=device, precision=precision)


def placement(agent: Any, work: Path) -> Dict[str, Any]:
    """Nodes per execution provider in one profiled run of the agent's graph, and the nodes left
    on the CPU (they break CUDA graphs and cost copies)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.enable_profiling = True
    options.profile_file_prefix = str(work / f"profile-{agent.plan.precision}")
    options.log_severity_level = 3
    session = ort.InferenceSession(str(agent.graph_path), sess_options=options,
                                   providers=agent.plan.providers)
    from laya_edge.encode import collate, encode_rows
    from laya_edge.questions import parse_questions

    parsed = parse_questions(QUESTIONS4)
    heads = {qid: agent.encoder.head(q, agent.head_max_len) for qid, q in parsed.items()}
    rows = [row for rows in encode_rows(agent.encoder, TICKETS[:2], parsed, heads, agent.max_len,
                                        agent.head_max_len) for row in rows]
    session.run(None, collate(rows, agent.encoder.pad.id))
    events = json.loads(Path(session.end_profiling()).read_text())
    providers: Dict[str, set] = {}
    for event in events:
        provider = event.get("args", {}).get("provider")
        if event.get("cat") == "Node" and provider:
            providers.setdefault(provider, set()).add(event["name"].rsplit("_kernel_time", 1)[0])
    return {"nodes_per_provider": {name: len(nodes) for name, nodes in providers.items()},
            "cpu_nodes": sorted(providers.get("CPUExecutionProvider", ()))[:40]}


def gpu_tests() -> Dict[str, Any]:
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "tests/gpu"], cwd=REPO,
                          capture_output=True, text=True)
    return {"exit": done.returncode, "tail": done.stdout.strip().splitlines()[-12:]}


def peers(checkpoint: Path, device: str, rounds: int) -> Dict[str, Any]:
    found: Dict[str, Any] = {}
    try:
        import laya

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            agent = laya.load(str(checkpoint), device=device)
        found["upstream laya (torch)"] = figures(agent.system_one, agent.predict_batch, rounds)
    except Exception as exc:  # a peer that cannot run here is reported, not fatal
        found["upstream laya (torch)"] = {"unavailable": f"{type(exc).__name__}: {exc}"[:300]}
    try:
        from laya_cuda.engine import Engine

        engine = Engine(str(checkpoint), device=device if device != "cpu" else "cuda:0")
        found["laya-cuda"] = figures(engine.predict,
                                     lambda states, q: [engine.predict(s, q) for s in states],
                                     rounds)
    except Exception as exc:
        found["laya-cuda"] = {"unavailable": f"{type(exc).__name__}: {exc}"[:300]}
    return found


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=Path("/tmp/laya_edge_gpu_check"))
    parser.add_argument("--kind", default="modernbert-large")
    parser.add_argument("--device", default="cuda", help="cuda, cuda:N (or cpu for a dry run)")
    parser.add_argument("--exporter", default="torchscript",
                        help="torch.onnx exporter; TorchScript needs no onnxscript on the GPU box")
    parser.add_argument("--verify-export", action="store_true",
                        help="also run the export's CPU verification (slow for large models)")
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--skip-peers", action="store_true")
    parser.add_argument("--tests", action="store_true", help="run tests/gpu first")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    checkpoint, bundle = args.work / f"{args.kind}-ckpt", args.work / f"{args.kind}-bundle"
    report: Dict[str, Any] = {"kind": args.kind, "device": args.device}
    if args.tests:
        log("tests/gpu")
        report["gpu_tests"] = gpu_tests()
    log(f"checkpoint {checkpoint}")
    make_checkpoint(args.kind, checkpoint)
    log(f"export {bundle}")
    started = time.perf_counter()
    report["export"] = dict(export(checkpoint, bundle, args.exporter, args.verify_export),
                            seconds=round(time.perf_counter() - started, 1))
    states = TICKETS * 2
    reference = laya_edge_runtime(bundle, "cpu", "fp32").predict_batch(states, QUESTIONS10)
    report["runs"] = {}
    for precision in ("fp32", "fp16"):
        agent = laya_edge_runtime(bundle, args.device, precision)
        info = agent.runtime_info()
        log(f"laya_edge {precision}: {info['providers']}")
        report["runs"][f"laya_edge {precision}"] = {
            "runtime": {key: info[key] for key in ("device", "precision", "providers")},
            "vs_cpu_fp32": compare(reference, agent.predict_batch(states, QUESTIONS10)),
            "placement": placement(agent, args.work),
            "timings": figures(agent.system_one, agent.predict_batch, args.rounds)}
    if not args.skip_peers:
        report["peers"] = peers(checkpoint, args.device, args.rounds)
    text = json.dumps(report, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    sys.exit(main())
