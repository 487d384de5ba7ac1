"""Model outputs to answers: calibration temperatures, probabilities, confidences and the payload.

The arithmetic follows upstream laya 0.4.15 step for step in float32 numpy, so published numbers
(rounded to 4 decimals) are the ones upstream publishes.
"""
from __future__ import annotations

import math
import warnings
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple


from .encode import Head, Row
from .questions import QTYPES, Question, render_criterion

if TYPE_CHECKING:
    import numpy as np

MODEL_NAME = "laya-rl-agent-onnx"
TEMP_MIN, TEMP_MAX = 0.5, 5.0
QTYPE_NAMES = {value: name for name, value in QTYPES.items()}


def empty_payload() -> Dict[str, Any]:
    return {"model": MODEL_NAME, "answers": {}, "usage": {"input_tokens": 0, "output_tokens": 0}}


def bucket(qtype: int, k: int) -> str:
    """The temperature bucket of a row: `<type>:<2|3-5|6-10|11+>` by its marker count."""
    size = "2" if k <= 2 else "3-5" if k <= 5 else "6-10" if k <= 10 else "11+"
    return f"{QTYPE_NAMES[qtype]}:{size}"


def clamp_temperature(value: Any) -> float:
    """A usable temperature: within [0.5, 5], or the neutral 1.0 for anything not a number."""
    if isinstance(value, bool):
        return 1.0
    try:
        number = float(value)
    except (TypeError, ValueError):
        return 1.0
    if not math.isfinite(number):
        return 1.0
    return min(TEMP_MAX, max(TEMP_MIN, number))


def _rejected(raw: Any, applied: float) -> bool:
    if isinstance(raw, bool):
        return True
    try:
        return float(raw) != applied
    except (TypeError, ValueError):
        return True


def _replaced(entries: Sequence[Tuple[str, Any, float]]) -> List[str]:
    return [f"{name}={raw!r} -> {applied:g}" for name, raw, applied in entries
            if _rejected(raw, applied)]


class Temperatures:
    """The checkpoint's temperatures, clamped, plus optional per-language overrides."""

    def __init__(self, config: Dict[str, Any],
                 lang_temperatures: Optional[Dict[str, Any]] = None):
        raw = config.get("temperature", [1.0, 1.0, 1.0])  # a 3-list: bundle.check_config
        by_options_raw = config.get("temperature_by_options", {})
        self.temperature = [clamp_temperature(t) for t in raw]
        self.temperature_by_options = {key: clamp_temperature(value)
                                       for key, value in by_options_raw.items()}
        replaced = _replaced([(key, value, self.temperature_by_options[key])
                              for key, value in by_options_raw.items()]
                             + [(f"temperature[{i}]", t, self.temperature[i])
                                for i, t in enumerate(raw)])
        if replaced:
            warnings.warn("laya ONNX: this checkpoint ships temperatures outside [0.5, 5] which "
                          f"would distort confidence; clamping {', '.join(replaced)}. Treat "
                          "confidence from the affected buckets as uncalibrated.",
                          RuntimeWarning, stacklevel=3)
        self.lang_temperatures = _resolve_languages(lang_temperatures, raw)

    def language(self, lang: Optional[str]) -> Optional[Dict[str, Any]]:
        """The override that applies to `lang` (`de-AT` -> `de`), if any."""
        if not lang:
            return None
        return self.lang_temperatures.get(lang.split("-")[0].lower())

    def for_row(self, qtype: int, k: int, override: Optional[Dict[str, Any]]) -> float:
        table = override if override is not None else {
            "temperature": self.temperature, "temperature_by_options": self.temperature_by_options}
        return table["temperature_by_options"].get(bucket(qtype, k), table["temperature"][qtype])


def _resolve_languages(raw: Optional[Dict[str, Any]],
                       base: Sequence[Any]) -> Dict[str, Dict[str, Any]]:
    resolved: Dict[str, Dict[str, Any]] = {}
    for lang, entry in (raw or {}).items():
        if not isinstance(lang, str):
            raise ValueError(f"Language override keys must be strings, got {lang!r}")
        entry = {} if entry is None else entry
        if not isinstance(entry, dict):
            raise ValueError(f"Language override {lang!r} must be a mapping, got "
                             f"{type(entry).__name__}")
        temperature_raw = entry.get("temperature")
        inherited = temperature_raw is None
        if inherited:
            temperature_raw = base
        if not isinstance(temperature_raw, (list, tuple)) or len(temperature_raw) != 3:
            raise ValueError(f"Language override {lang!r} temperature must be a list of 3 floats, "
                             f"got {temperature_raw!r}")
        by_options_raw = entry.get("temperature_by_options") or {}
        if not isinstance(by_options_raw, dict):
            raise ValueError(f"Language override {lang!r} temperature_by_options must be a "
                             f"mapping of bucket -> float, got {type(by_options_raw).__name__}")
        temperature = [clamp_temperature(t) for t in temperature_raw]
        by_options = {key: clamp_temperature(value) for key, value in by_options_raw.items()}
        entries = [] if inherited else [(f"temperature[{i}]", t, temperature[i])
                                        for i, t in enumerate(temperature_raw)]
        replaced = _replaced(entries + [(str(key), value, by_options[key])
                                        for key, value in by_options_raw.items()])
        if replaced:
            warnings.warn(f"laya: language override {lang!r} ships invalid temperatures or values "
                          f"outside [0.5, 5]; using {', '.join(replaced)}. Treat confidence from "
                          "the affected entries as uncalibrated.", RuntimeWarning, stacklevel=4)
        resolved[lang.split("-")[0].lower()] = {"temperature": temperature,
                                                "temperature_by_options": by_options}
    return resolved


def _entropy_confidence(p: np.ndarray, k: int) -> float:
    import numpy as np

    if k < 2:
        return 1.0
    entropy = -float((p * np.log(np.clip(p, 1e-12, 1.0))).sum())
    return min(1.0, max(0.0, 1.0 - entropy / math.log(k)))


def _answer(question: Question, p: np.ndarray, k: int, act_probability: float) -> Dict[str, Any]:
    import numpy as np

    top = 1.0 if k < 1 else min(1.0, max(0.0, float(p[:k].max())))
    action = {"act_probability": round(act_probability, 4)}
    if question.qtype == "noul":
        p_true = float(p[1])
        return {"type": "noul", "noul": round(p_true, 4),
                "confidence": round(max(p_true, 1.0 - p_true), 4),
                "answer_confidence": round(top, 4), "action": action}
    confidence = round(_entropy_confidence(p, k), 4)
    if question.qtype == "choice":
        labels = list(question.crit.keys())
        return {"type": "choice", "choice": labels[int(p.argmax())],
                "probabilities": {label: round(float(v), 4) for label, v in zip(labels, p)},
                "confidence": confidence, "answer_confidence": round(top, 4), "action": action}
    return {"type": "score", "score": round(float((np.arange(k) * p).sum()), 4),
            "legend": {str(i): render_criterion(level) for i, level in enumerate(question.crit)},
            "probabilities": {str(i): round(float(v), 4) for i, v in enumerate(p)},
            "confidence": confidence, "answer_confidence": round(top, 4), "action": action}


def _usage(rows: Sequence[Row], qids: Sequence[Any], heads: Dict[Any, Head]) -> Dict[str, Any]:
    dropped = max(row.state_tokens_dropped for row in rows)
    usage: Dict[str, Any] = {
        "input_tokens": sum(len(row.ids) for row in rows), "output_tokens": 0,
        "state_tokens": rows[0].state_tokens, "state_tokens_dropped": dropped,
        "truncated": dropped > 0,
        "truncated_questions": [qid for qid, row in zip(qids, rows) if row.state_tokens_dropped],
    }
    collapsed = {qid: {"total": heads[qid].options, "distinct": heads[qid].options_distinct,
                       "tokens_per_option": heads[qid].tokens_per_option}
                 for qid in qids if heads[qid].options_distinct < heads[qid].options}
    if collapsed:
        usage["options"] = collapsed
    return usage


def act_probabilities(act_logits: np.ndarray) -> np.ndarray:
    """P(act) per row: the softmax of the act head, index 0."""
    import numpy as np

    shifted = np.exp(act_logits - np.max(act_logits, axis=-1, keepdims=True))
    return (shifted / np.sum(shifted, axis=-1, keepdims=True))[:, 0]


def decode_state(logits: np.ndarray, act: np.ndarray, offset: int, rows: Sequence[Row],
                 questions: Dict[Any, Question], heads: Dict[Any, Head],
                 temperatures: Temperatures, lang: Optional[str]) -> Dict[str, Any]:
    """One state's payload from its rows, which start at `offset` in the batch outputs.

    `act` is `act_probabilities` of the whole batch."""
    import numpy as np

    override = temperatures.language(lang)
    answers = {}
    for j, (qid, question) in enumerate(zip(questions, questions.values())):
        r = offset + j
        k = len(rows[j].markers)
        z = logits[r, :k] / temperatures.for_row(question.qtype_id, k, override)
        p = np.exp(z - z.max())
        p /= p.sum()
        if question.option_order is not None and len(question.option_order) == len(p):
            in_option_order = np.empty_like(p)
            in_option_order[np.asarray(question.option_order, dtype=int)] = p
            p = in_option_order
        answers[qid] = _answer(question, p, k, float(act[r]))
    return {"model": MODEL_NAME, "answers": answers, "usage": _usage(rows, list(questions), heads)}
