"""The limits a bundle's manifest records about its graph: the shape ranges a TensorRT profile is
built for, and the length of a learned position table (docs/design/bundle-format.md)."""
from __future__ import annotations

from typing import Any, Dict

DEFAULT_SHAPES = {"batch": {"min": 1, "opt": 8, "max": 64},
                  "markers": {"min": 2, "opt": 4, "max": 64}}


def shape_ranges(requested: Dict[str, Dict[str, int]], reference: Any) -> Dict[str, Dict[str, int]]:
    """The TensorRT optimisation profile per axis: the defaults, the sequence axis bounded by the
    checkpoint's max_len and position table, then what the caller asked for."""
    config = reference.agent.cfg
    positions = getattr(reference.model.encoder.config, "max_position_embeddings", None)
    longest = int(config.get("max_len", 512))
    if positions:
        longest = min(longest, int(positions))
    ranges = {"batch": dict(DEFAULT_SHAPES["batch"]),
              "sequence": {"min": 4, "opt": min(256, longest), "max": longest},
              "markers": dict(DEFAULT_SHAPES["markers"])}
    for axis, values in requested.items():
        ranges.setdefault(axis, {}).update(values)
    return ranges


def position_limit(reference: Any) -> Dict[str, int]:
    """`{"max_positions": n}` when the encoder reads positions from a learned table of n rows
    (BERT-style: a longer row fails inside the graph, so the runtime refuses it first); nothing
    for rotary encoders such as ModernBERT, which have no such table."""
    embeddings = getattr(reference.model.encoder, "embeddings", None)
    rows = getattr(getattr(embeddings, "position_embeddings", None), "num_embeddings", None)
    return {"max_positions": int(rows)} if rows else {}
