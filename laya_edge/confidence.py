"""The opt-in `min_confidence` abstention gate: validation and application.

A gate that ran is always visible in the payload (`abstention`, `abstention_threshold`); with no
gate requested nothing is written, so an ungated payload is byte-for-byte what it was.
"""
from __future__ import annotations

import math
from typing import Any, Dict, List, Optional, Union

Threshold = Union[float, Dict[str, float]]
BUCKETS = {f"{qtype}:{size}" for qtype in ("choice", "score", "noul")
           for size in ("2", "3-5", "6-10", "11+")}
DEFAULT = "default"


def _usable(value: Any) -> Optional[float]:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def _one(value: Any) -> float:
    if _usable(value) is None or not 0.0 <= value <= 1.0:
        raise ValueError(f"min_confidence must be a float in [0.0, 1.0], got {value!r}")
    return float(value)


def check_min_confidence(value: Any) -> Threshold:
    """A threshold in [0, 1], or a non-empty map of option-count bucket (or 'default') to one."""
    if not isinstance(value, dict):
        return _one(value)
    if not value:
        raise ValueError("a min_confidence map must be a non-empty dict of bucket -> float, got "
                         f"{value!r}")
    checked = {}
    for key, threshold in value.items():
        if not isinstance(key, str) or key not in BUCKETS | {DEFAULT}:
            raise ValueError("min_confidence map keys must be a bucket like 'choice:3-5' or "
                             f"'default', got {key!r}")
        checked[key] = _one(threshold)
    return checked


def _answer_bucket(answer: Dict[str, Any]) -> Optional[str]:
    qtype = answer.get("type")
    if qtype not in ("choice", "score", "noul"):
        return None
    probabilities = answer.get("probabilities")
    if isinstance(probabilities, dict) and probabilities:
        k = len(probabilities)
    elif qtype == "noul":
        k = 2
    else:
        return None
    return f"{qtype}:{'2' if k <= 2 else '3-5' if k <= 5 else '6-10' if k <= 10 else '11+'}"


def _threshold(answer: Dict[str, Any], gate: Threshold) -> float:
    if not isinstance(gate, dict):
        return gate
    key = _answer_bucket(answer)
    if key is not None and key in gate:
        return gate[key]
    return gate.get(DEFAULT, 0.0)


def apply_gate(results: List[Any], gate: Optional[Threshold]) -> None:
    """Mark every answer `passed`, `abstained` (with `low_confidence`) or `unevaluated`."""
    if gate is None:
        return
    for result in results:
        answers = result.get("answers") if isinstance(result, dict) else None
        if not isinstance(answers, dict):
            continue
        for answer in answers.values():
            if not isinstance(answer, dict):
                continue
            value = _usable(answer.get("answer_confidence"))
            if value is None:
                value = _usable(answer.get("confidence"))
            threshold = _threshold(answer, gate)
            if value is not None and value < threshold:
                answer["low_confidence"] = True
                answer["abstention"] = "abstained"
            else:
                answer.pop("low_confidence", None)
                answer["abstention"] = "unevaluated" if value is None else "passed"
            answer["abstention_threshold"] = float(threshold)


def jev_confidence(answer: Dict[str, Any]) -> Optional[float]:
    """The confidence a Jev client expects for a choice or score answer, or None for a noul
    answer or malformed probabilities.

    Laya's own `confidence` is one minus normalised entropy; Jev's `/v1/systemone` defines a
    different number, so the HTTP service adds this one as `x_jev_confidence` and thresholds
    ported from Jev keep their meaning. Choice: how far the top probability sits between uniform
    and certain. Score: one minus the expected distance from the modal level, relative to that
    distance under a uniform distribution (floored at 0).
    """
    kind, probabilities = answer.get("type"), answer.get("probabilities")
    if kind not in ("choice", "score") or not isinstance(probabilities, dict) or not probabilities:
        return None
    try:
        keys = sorted(probabilities, key=int) if kind == "score" else list(probabilities)
    except (TypeError, ValueError):
        return None
    values = [_usable(probabilities[key]) for key in keys]
    if any(value is None or value < 0.0 for value in values):
        return None
    n = len(values)
    if n == 1:
        return 1.0
    total = sum(values)
    p = [value / total for value in values] if total else [1.0 / n] * n
    if kind == "choice":
        return (max(p) - 1.0 / n) / (1.0 - 1.0 / n)
    mode = p.index(max(p))
    spread = sum(value * abs(i - mode) for i, value in enumerate(p))
    centre = (n - 1) / 2
    uniform_spread = sum(abs(i - centre) for i in range(n)) / n
    return max(0.0, 1.0 - spread / uniform_spread)
