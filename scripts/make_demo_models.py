#!/usr/bin/env python3
"""Write `models/`: the tiny bundles `laya-edge demo` runs, and `models/demo.json`.

Two tiny Laya-format checkpoints with random weights (`make_checkpoint.py` kinds
`modernbert-tiny`, English BPE, and `unigram-tiny`, multilingual Unigram) exported by the
project's own pipeline: about 2 MB each, so the demo runs anywhere, offline, in a second. Their
answers mean nothing and `demo.json` says so; they show the runtime, routing, hooks and timings.
`scripts/train_demo.py` replaces them with a trained model when it ships one.

    python scripts/make_demo_models.py               # rewrite models/
    python scripts/make_demo_models.py --out /tmp/m  # somewhere else
"""
from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Optional, Sequence

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

ROUTES = {"english": ("tiny-english", "modernbert-tiny"),
          "multilingual": ("tiny-multilingual", "unigram-tiny")}
ABOUT = ["These demo weights are tiny (about 2 MB) and random: NOT a trained Laya checkpoint.",
         "Their answers mean nothing; the demo shows the runtime, routing, hooks and timings."]


def write_demo_models(out: Path, seed: int = 0) -> Path:
    """Export the tiny checkpoints into `out` (replacing what is there) and write demo.json."""
    import make_checkpoint
    from laya_edge.export import ExportOptions, Progress, export_bundle

    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        for name, kind in ROUTES.values():
            checkpoint = make_checkpoint.make_checkpoint(kind, Path(scratch) / kind, seed=seed,
                                                         clamp_test=False)
            export_bundle(ExportOptions(source=str(checkpoint), out=out / name, force=True),
                          Progress())
    setup = {"routes": {route: name for route, (name, _kind) in ROUTES.items()},
             "trained": False, "about": ABOUT,
             "made_by": f"scripts/make_demo_models.py --seed {seed}"}
    (out / "demo.json").write_text(json.dumps(setup, indent=2) + "\n", encoding="utf-8")
    return out


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=HERE.parent / "models")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    print(write_demo_models(args.out, args.seed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
