"""How the checkpoint generator writes: progress to a logger, stable JSON, sizes, and one seed for
every random number generator it uses."""
from __future__ import annotations

import json
import logging
import random
from pathlib import Path
from typing import Any


LOGGER = "laya_edge.export.synthetic"


def log(message: str) -> None:
    """A progress line (shown on stderr by `python -m laya_edge.export.synthetic`)."""
    logging.getLogger(LOGGER).info(message)


def write_json(path: Path, data: Any) -> None:
    """Write `data` as stable, human-readable JSON (insertion order, 2-space indent, newline)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def round_up(value: int, multiple: int) -> int:
    return ((value + multiple - 1) // multiple) * multiple


def dir_size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def seed_everything(seed: int) -> None:
    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed % (2 ** 32))
    torch.manual_seed(seed)
