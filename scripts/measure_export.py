#!/usr/bin/env python3
"""Measure exporting a ModernBERT-base-sized checkpoint: wall time, stages, peak memory, size.

Not run in CI (minutes, several GB of memory). Writes a random ModernBERT-base-shaped Laya
checkpoint with laya_edge.export.synthetic (kind ``modernbert-base``) into a temporary directory,
unless ``--checkpoint`` names one, then runs ``python -m laya_edge.export CHECKPOINT --out DIR
--json`` in a subprocess and reports:

* the export's wall time and its per-stage durations (from the ``--json`` summary);
* the subprocess's peak resident memory (``getrusage(RUSAGE_CHILDREN).ru_maxrss``; the checkpoint
  is generated in this process, so no other child is counted);
* the bundle's size on disk, and the verification figures.

It prints one markdown table row (for docs / the issue) and the full JSON record.

Examples::

    python scripts/measure_export.py
    python scripts/measure_export.py --exporter torchscript --keep
    python scripts/measure_export.py --checkpoint /tmp/mb-base -- --skip-verify
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

REPO = Path(__file__).resolve().parents[1]
KIND = "modernbert-base"


def log(message: str) -> None:
    print(f"[measure_export] {message}", file=sys.stderr, flush=True)


def dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def peak_rss_children_bytes() -> int:
    """Peak RSS of the largest waited-for child; ru_maxrss is KiB on Linux, bytes on macOS."""
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return int(peak) if sys.platform == "darwin" else int(peak) * 1024


def make_checkpoint(out: Path, seed: int) -> float:
    """Generate the checkpoint in this process (so it does not count as a child); seconds."""
    from laya_edge.export import synthetic

    started = time.perf_counter()
    synthetic.make_checkpoint(KIND, out, seed=seed)
    return time.perf_counter() - started


def run_export(checkpoint: Path, out: Path, exporter: str, extra: Sequence[str]) -> Dict[str, Any]:
    command = [sys.executable, "-m", "laya_edge.export", str(checkpoint), "--out", str(out),
               "--force", "--json", "--exporter", exporter, *extra]
    env = dict(os.environ, HF_HUB_OFFLINE="1",
               PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    log("running: " + " ".join(command))
    started = time.perf_counter()
    # stderr (stage progress) streams through; stdout is the --json summary
    done = subprocess.run(command, cwd=REPO, env=env, stdout=subprocess.PIPE, text=True)
    wall = time.perf_counter() - started
    lines = done.stdout.strip().splitlines()
    summary = json.loads(lines[-1]) if lines else {}
    return {"returncode": done.returncode, "wall_s": round(wall, 2),
            "peak_rss_bytes": peak_rss_children_bytes(), "summary": summary}


def markdown_row(record: Dict[str, Any]) -> str:
    stages = ", ".join(f"{name} {seconds:.1f}s" for name, seconds in record["stages"].items())
    report = record.get("verification") or {}
    verdict = ("skipped" if report.get("skipped") else
               f"argmax {report.get('argmax_agreement')}, "
               f"max |dp| {report.get('max_abs_p', 0):.1e}")
    return (f"| {KIND} ({record['parameters'] / 1e6:.0f}M params, random) | {record['exporter']} "
            f"| {record['wall_s']:.1f} s | {stages} | {record['peak_rss_bytes'] / 2**30:.2f} GiB "
            f"| {record['bundle_bytes'] / 1e6:.0f} MB | {verdict} | {record['cpus']} CPUs |")


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="Arguments after `--` go to the export command.")
    parser.add_argument("--checkpoint", type=Path,
                        help="use this checkpoint instead of generating a random one")
    parser.add_argument("--out", type=Path,
                        help="bundle directory (default: a temporary one, removed afterwards)")
    parser.add_argument("--exporter", default="auto", choices=("auto", "dynamo", "torchscript"))
    parser.add_argument("--seed", type=int, default=0, help="seed of the generated checkpoint")
    parser.add_argument("--keep", action="store_true",
                        help="keep the generated checkpoint and bundle (paths are printed)")
    parser.add_argument("extra", nargs=argparse.REMAINDER,
                        help="further export arguments, after `--`")
    args = parser.parse_args(argv)
    extra: List[str] = args.extra[1:] if args.extra[:1] == ["--"] else args.extra

    workdir = Path(tempfile.mkdtemp(prefix="laya-measure-"))
    try:
        generated_s = None
        checkpoint = args.checkpoint
        if checkpoint is None:
            checkpoint = workdir / KIND
            log(f"generating a random {KIND} checkpoint in {checkpoint}")
            generated_s = round(make_checkpoint(checkpoint, args.seed), 2)
        out = args.out or workdir / "bundle"
        result = run_export(checkpoint, out, args.exporter, extra)
        summary = result["summary"]
        if result["returncode"] != 0 or not summary.get("ok"):
            log(f"export failed (exit {result['returncode']}): {summary.get('error')}")
            print(json.dumps(result, indent=2))
            return 1
        manifest = json.loads((out / "laya_edge.json").read_text(encoding="utf-8"))
        files = {name: entry["bytes"] for name, entry in manifest["files"].items()}
        record = {
            "kind": KIND if args.checkpoint is None else str(args.checkpoint),
            "exporter": summary["exporter"],
            "parameters": manifest["graph"]["parameter_bytes"] // 4,
            "wall_s": result["wall_s"],
            "stages": summary["stages"],
            "peak_rss_bytes": result["peak_rss_bytes"],
            "checkpoint_bytes": dir_bytes(checkpoint),
            "bundle_bytes": dir_bytes(out),
            "bundle_files": files,
            "external_data": manifest["graph"]["external_data"],
            "verification": summary["verification"],
            "checkpoint_generation_s": generated_s,
            "cpus": os.cpu_count(),
            "machine": f"{platform.system()} {platform.machine()}, "
                       f"Python {platform.python_version()}",
            "versions": manifest["versions"],
        }
        if args.keep:
            record["checkpoint_path"], record["bundle_path"] = str(checkpoint), str(out)
        print(markdown_row(record))
        print(json.dumps(record, indent=2))
        return 0
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
