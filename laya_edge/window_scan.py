"""Scanning states longer than one sequence: window sizing, the start-hook probe, aggregation.

`ONNXAgent.predict_long` splits the tokenised state into overlapping windows, scores them all in
one shared `predict_batch` and keeps, per question, the answer of the window that decided it.
The window is capped at the room the questions leave for the state, so every window reaches the
model whole; what the start hooks did is recorded so the answer never claims a window that was
not scored.
"""
from __future__ import annotations

import warnings
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from .decode import MODEL_NAME

WARN_CLAMP_RATIO = 2
BATCH_BLOWUP = 2
MIN_DEFAULT_WINDOW = 64


def default_window(max_len: int, head_max_len: int) -> int:
    """The state budget the config leaves, with a floor so a wide head cannot starve it."""
    return max(MIN_DEFAULT_WINDOW, max_len - head_max_len - 8)


def window_budget(rooms: Sequence[int], max_len: int, head_max_len: int,
                  window: Optional[int] = None, stride: Optional[int] = None
                  ) -> Tuple[int, int, int]:
    """`(size, step, room)` of the scan, given each question's state room."""
    requested = window if window and window > 0 else default_window(max_len, head_max_len)
    size = requested
    room = min(rooms) if rooms else size
    if room <= 0:
        raise ValueError(f"predict_long: the questions' options fill the whole sequence "
                         f"(max_len={max_len}, head_max_len={head_max_len}), leaving no room for "
                         "the state; no window can carry any of it.")
    if size > room:
        if window and window > 0:
            warnings.warn(f"laya: predict_long: window={size} is wider than the {room} state "
                          f"tokens these questions leave inside max_len={max_len}, so every window "
                          f"would be truncated to {room} on the way to the model; scanning with "
                          f"window={room} instead", RuntimeWarning, stacklevel=3)
        elif size >= room * WARN_CLAMP_RATIO:
            warnings.warn(f"laya: predict_long: these questions leave only {room} of "
                          f"max_len={max_len} for the state (their heads take the rest), so the "
                          f"scan window is capped {size} -> {room} and roughly "
                          f"{size / room:.1f}x as many windows -- each a full forward pass -- are "
                          "needed to read the document. Fewer or shorter options or a larger "
                          "max_len will cost less than scanning at this width",
                          RuntimeWarning, stacklevel=3)
        size = room
    step = stride if stride and stride > 0 else max(1, size // 2)
    if step > size:
        if size < requested and stride and stride <= requested:
            warnings.warn(f"laya: predict_long: stride={step} was a 50% step for the "
                          f"window={requested} you asked for, but the window was reduced to "
                          f"{size} to fit the room these questions leave; scanning with "
                          f"stride={max(1, size // 2)} instead", RuntimeWarning, stacklevel=3)
            step = max(1, size // 2)
        else:
            where = " these questions leave room for" if size < requested else ""
            raise ValueError(f"predict_long: stride={step} steps past the {size}-token "
                             f"window{where}, so {step - size} tokens between every pair of "
                             f"windows would be read by no window at all; pass stride <= {size}")
    return size, step, room


def window_batch_cap(count: int, size: int, default_size: int,
                     batch_size: Optional[int]) -> Optional[int]:
    """Windows per session run: one run unless capping the window multiplied their number."""
    if batch_size and batch_size > 0:
        return batch_size
    if size >= default_size:
        return None
    uncapped = max(1, -(-count * max(1, size // 2) // max(1, default_size // 2)))
    return None if count <= uncapped * BATCH_BLOWUP else uncapped


def window_starts(n: int, size: int, step: int) -> List[int]:
    starts, i = [], 0
    while True:
        starts.append(i)
        if i + size >= n:
            return starts
        i += step


class StartProbe:
    """Records what the start-hook chain left for inference (appended after the caller's hooks)."""

    def __init__(self) -> None:
        self.ran = False
        self.answered = False
        self.states: Optional[List[Any]] = None
        self.question_types: Optional[Dict[Any, Any]] = None
        self.max_len: Optional[int] = None
        self.head_max_len: Optional[int] = None
        self.questions: Dict[Any, Any] = {}

    def __call__(self, ctx: Any) -> None:
        self.ran = True
        self.answered = ctx.results is not None
        self.states = list(ctx.states)
        if ctx.results is None and isinstance(ctx.questions, dict):
            self.question_types = {qid: definition.get("type") if isinstance(definition, dict)
                                   else None for qid, definition in ctx.questions.items()}
        self.max_len, self.head_max_len = ctx.max_len, ctx.head_max_len
        self.questions = dict(ctx.questions) if ctx.questions else {}


def check_scan_budget(probe: StartProbe, sized: int, max_len: int, head_max_len: int,
                      asked: Dict[Any, Any],
                      min_room: Callable[[Dict[Any, Any], int, int], Optional[int]]) -> None:
    """Refuse a scan whose windows the start hooks made too wide to reach the model whole.

    `min_room(questions, max_len, head_max_len)` is the smallest state room under the budgets
    the hooks left, or None when those questions cannot be normalised (the validator reports
    those).
    """
    if probe.answered or not probe.questions:
        return
    eff_max_len = max_len if probe.max_len is None else probe.max_len
    eff_head = head_max_len if probe.head_max_len is None else probe.head_max_len
    if eff_max_len == max_len and eff_head == head_max_len and probe.questions == asked:
        return
    room = min_room(probe.questions, eff_max_len, eff_head)
    if room is None or room >= sized:
        return
    raise ValueError(
        f"predict_long: after the start hooks ran, the questions and token budget "
        f"(max_len={eff_max_len} head_max_len={eff_head}) leave {room} state tokens per window, "
        f"but the scan was sized for {sized} from the agent's config (max_len={max_len} "
        f"head_max_len={head_max_len}). Every window would be re-truncated and parts of the "
        "document would reach no model. Pass window=/stride= explicitly, or call predict_batch "
        "directly, if you need a start hook to change either.")


def merge_usage(results: Sequence[Dict[str, Any]]) -> Dict[str, Any]:
    """Window usages combined: numbers summed, dicts merged, anything else the last one's."""
    usage: Dict[str, Any] = {}
    for result in results:
        for key, value in result["usage"].items():
            previous = usage.get(key)
            if isinstance(value, (int, float)):
                usage[key] = (previous if isinstance(previous, (int, float)) else 0) + value
            elif isinstance(value, dict) and isinstance(previous, dict):
                usage[key] = {**previous, **value}
            else:
                usage[key] = value
    usage["output_tokens"] = 0
    usage["windows"] = len(results)
    return usage


def aggregate_windows(results: Sequence[Dict[str, Any]], question_types: Dict[Any, Any],
              asked: Dict[Any, Any], probed: bool,
              spans: Optional[Sequence[Tuple[int, int]]]) -> Dict[str, Any]:
    """Per question, the deciding window's answer (`spans` given: labelled with its window)."""
    answers = {}
    for qid, qtype in question_types.items():
        missing = sum(qid not in result["answers"] for result in results)
        if missing:
            if missing == len(results) and qid not in asked and probed:
                continue
            raise ValueError(f"predict_long: answer {qid!r} is missing from {missing} of "
                             f"{len(results)} windows after prediction hooks")
        per_window = [result["answers"][qid] for result in results]
        field = "noul" if qtype == "noul" else "answer_confidence"
        best = max(range(len(per_window)), key=lambda j: float(per_window[j][field]))
        answer = per_window[best]
        if spans is not None:
            answer["window"] = {"index": best, "token_start": spans[best][0],
                                "token_end": spans[best][1], "count": len(results)}
        answers[qid] = answer
    return {"model": MODEL_NAME, "answers": answers, "usage": merge_usage(results)}
