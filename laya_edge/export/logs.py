"""Where export progress goes, and keeping third-party chatter quiet, without touching the
process's logging set-up.

The exporter and the checkpoint generator log progress to named loggers (`laya_edge.export`,
`laya_edge.export.synthetic`); their command lines show those on stderr (`progress_on_stderr`).
torch.onnx, onnxscript, onnx_ir and onnxruntime's optimisers log notes at INFO and WARNING that the
export's own progress lines already cover, and onnxruntime's quantisers log straight to the root
logger. While `third_party_quiet` is open those libraries' named loggers are raised to ERROR and
their root-logger records are filtered out; the root logger's level, handlers and the process's
stderr stay as the user set them.
"""
from __future__ import annotations

import logging
import os
import sys
from contextlib import contextmanager
from typing import Iterator

THIRD_PARTY_LOGGERS = ("torch.onnx", "torch.export", "torch._dynamo", "onnxscript", "onnx_ir",
                       "onnxruntime")
# Packages whose records logged to the root logger directly (`logging.warning(...)`) are dropped.
ROOT_CALLERS = tuple(f"{os.sep}{package}{os.sep}" for package in ("onnxruntime", "onnxscript",
                                                                   "onnx_ir"))


class _DropThirdParty(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.ERROR or not any(
            caller in record.pathname for caller in ROOT_CALLERS)


@contextmanager
def third_party_quiet() -> Iterator[None]:
    """Below ERROR, nothing from the export's third-party libraries while open.

    A module-level `logging.warning` call on a root logger without handlers would run
    `basicConfig` and leave a stderr handler behind; a NullHandler sits on such a root while
    this is open, so the user's logging set-up is never changed behind their back."""
    root = logging.getLogger()
    named = [logging.getLogger(name) for name in THIRD_PARTY_LOGGERS]
    levels = [logger.level for logger in named]
    drop = _DropThirdParty()
    placeholder = logging.NullHandler() if not root.handlers else None
    for logger in named:
        logger.setLevel(max(logger.getEffectiveLevel(), logging.ERROR))
    root.addFilter(drop)
    if placeholder is not None:
        root.addHandler(placeholder)
    try:
        yield
    finally:
        if placeholder is not None:
            root.removeHandler(placeholder)
        root.removeFilter(drop)
        for logger, level in zip(named, levels):
            logger.setLevel(level)


@contextmanager
def progress_on_stderr(name: str, label: str) -> Iterator[None]:
    """INFO records of logger `name` on stderr as `[label] message` while open (a command line's
    progress); the handler goes again afterwards, so repeated in-process runs print once."""
    logger = logging.getLogger(name)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(f"[{label}] %(message)s"))
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
