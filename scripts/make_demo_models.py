#!/usr/bin/env python3
"""Write the tiny bundles of `models/`: `tiny-multilingual`, behind the demo's multilingual
route, and `tiny-english`, a small bundle for tests and stress runs.

Two tiny Laya-format checkpoints with random weights (`laya_edge.export.synthetic` kinds
`modernbert-tiny`, English BPE, and `unigram-tiny`, multilingual Unigram) exported by the
project's own pipeline: about 2 MB each. Their answers mean nothing (`models/demo.json` says so);
they show the runtime, routing, hooks and timings. The demo's English route is the trained
`demo-support-en`, which `scripts/train_demo.py` writes together with `models/demo.json`.

    python scripts/make_demo_models.py               # rewrite models/
    python scripts/make_demo_models.py --out /tmp/m  # somewhere else
"""
from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Optional, Sequence

REPO = Path(__file__).resolve().parents[1]
MULTILINGUAL_BUNDLE = "tiny-multilingual"  # behind the demo's multilingual route (demo.json)
BUNDLES = {"tiny-english": "modernbert-tiny", MULTILINGUAL_BUNDLE: "unigram-tiny"}


def write_demo_models(out: Path, seed: int = 0) -> Path:
    """Export the tiny checkpoints into `out`, replacing the bundles of the same names."""
    from laya_edge.export import ExportOptions, Progress, export_bundle, synthetic

    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        for name, kind in BUNDLES.items():
            checkpoint = synthetic.make_checkpoint(kind, Path(scratch) / kind, seed=seed,
                                                   clamp_test=False)
            export_bundle(ExportOptions(source=str(checkpoint), out=out / name, force=True),
                          Progress())
    return out


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=REPO / "models")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    from laya_edge.export.logs import progress_on_stderr

    with progress_on_stderr("laya_edge.export", "laya_edge.export"):
        print(write_demo_models(args.out, args.seed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
