"""Question definitions: validation with upstream's exact messages, normalisation, option text.

A question is checked before any inference so a malformed one fails with a message naming it and
what to fix, instead of surfacing later from inside tokenisation or onnxruntime.
"""
from __future__ import annotations

import difflib
import json
import warnings
from typing import Any, Dict, List, NamedTuple, Optional, Tuple

QTYPES = {"choice": 0, "score": 1, "noul": 2}
NOUL_DEFAULT_TEXT = ("no, the statement does not hold", "yes, the statement holds")
OPTION_TOKENS = 48
# Every key a question definition is read for; upstream ignores any other key, and so do we.
QUESTION_KEYS = ("type", "instructions", "criteria", "labels", "option_order")
_LABELS_ERROR = "noul labels must map exactly 'false' and 'true' to distinct non-empty strings"


class Question(NamedTuple):
    """A validated question, ready to render: `crit` is a dict for choice/noul, a list for score."""

    qtype: str
    instructions: str
    crit: Any
    labels: Optional[Dict[str, str]]
    option_order: Optional[List[int]]

    @property
    def qtype_id(self) -> int:
        return QTYPES[self.qtype]


def render_criterion(value: Any) -> str:
    """Option text for a criterion: strings verbatim, anything else as one-line JSON."""
    if isinstance(value, str):
        return value
    return dumps_nested(value, "a criterion", ensure_ascii=False, separators=(", ", ": "),
                        default=str)


def dumps_nested(value: Any, what: str, **options: Any) -> str:
    """`json.dumps`, with a structure too deep to serialise refused as a ValueError naming it."""
    try:
        return json.dumps(value, **options)
    except RecursionError:
        raise ValueError(f"{what} is nested too deeply to serialise as JSON") from None


def noul_labels(labels: Any) -> Tuple[str, str]:
    """`(false_label, true_label)`, stripped; the defaults are `false` / `true`."""
    if labels is None:
        return "false", "true"
    if not isinstance(labels, dict) or set(labels) != {"false", "true"}:
        raise ValueError(_LABELS_ERROR)
    false_label, true_label = labels["false"], labels["true"]
    if not isinstance(false_label, str) or not isinstance(true_label, str):
        raise ValueError(_LABELS_ERROR)
    false_label, true_label = false_label.strip(), true_label.strip()
    if not false_label or not true_label or false_label == true_label:
        raise ValueError(_LABELS_ERROR)
    return false_label, true_label


def _option_count(definition: Dict[str, Any]) -> int:
    if definition.get("type") == "noul":
        return 2
    criteria = definition.get("criteria")
    return len(criteria) if isinstance(criteria, (dict, list, tuple)) else 0


def _check_choice(q: str, criteria: Any) -> None:
    if not isinstance(criteria, (dict, list)):
        raise ValueError(f"question {q}: a choice question takes 'criteria' as a dict of "
                         "label -> description, or a list of labels")
    if not criteria:
        raise ValueError(f"question {q}: a choice question needs at least one criterion")
    for i, label in enumerate(criteria if isinstance(criteria, list) else criteria.keys()):
        if label is None:
            raise ValueError(
                f"question {q}: choice label {i} is null; a label is rendered as option text and "
                "used as the answer key, so it must be a string, number or bool -- a null label "
                'renders as the text "None" while its answer key is "null"')
        if not isinstance(label, (str, int, float, bool)):
            raise ValueError(
                f"question {q}: choice label {i} is a {type(label).__name__}; a label is rendered "
                "as option text and used as the answer key, so it must be a scalar (a string, "
                f"number or bool), got {label!r}")
    if isinstance(criteria, list):
        first_seen: Dict[Any, int] = {}
        for i, label in enumerate(criteria):
            if label in first_seen:
                raise ValueError(
                    f"question {q}: choice label {i} ({label!r}) repeats label {first_seen[label]};"
                    " the labels are the answer keys, so every option needs its own (1, 1.0 and "
                    "True are one key)")
            first_seen[label] = i


def _check_score(q: str, criteria: Any) -> None:
    if not isinstance(criteria, list):
        raise ValueError(f"question {q}: a score question takes 'criteria' as a list of level "
                         "descriptions, index 0 first")
    if not criteria:
        raise ValueError(f"question {q}: a score question needs at least one level")
    if None in criteria:
        raise ValueError(f"question {q}: score level {criteria.index(None)} is null; give every "
                         "level a description, index 0 first")


def _check_noul(q: str, criteria: Any) -> None:
    if criteria is not None and not isinstance(criteria, dict):
        raise ValueError(f"question {q}: a noul question takes 'criteria' as a dict with optional "
                         "'true'/'false' descriptions, or omits it")
    if isinstance(criteria, dict):
        keys = {str(key).lower() for key in criteria}
        if not keys <= {"true", "false"}:
            raise ValueError(
                f"question {q}: a noul question takes 'criteria' keyed only 'true'/'false' "
                f"(either or both, and omitted is fine), got {sorted(keys)}. Those keys are the "
                "option texts the model reads; any other key was silently dropped and replaced "
                "with the defaults. If you want the answer worded differently, keep 'criteria' "
                "keyed 'true'/'false' and set 'labels' instead.")


def check_question(qid: Any, definition: Any) -> None:
    """Raise ValueError naming `qid` if `definition` cannot be answered."""
    if qid is None:
        raise ValueError("question id must not be None")
    if not isinstance(qid, (str, int)) or (isinstance(qid, str) and not qid.strip()):
        raise ValueError(f"question id must be a non-empty string, got {qid!r}")
    q = repr(qid)
    if not isinstance(definition, dict):
        raise ValueError(f"question {q}: definition must be a dict, got "
                         f"{type(definition).__name__}")
    qtype = definition.get("type")
    if not isinstance(qtype, str) or qtype not in QTYPES:
        raise ValueError(f"question {q}: unknown type {qtype!r}; use one of {sorted(QTYPES)}")
    if "instructions" not in definition:
        raise ValueError(f"question {q}: no 'instructions'; add the text the model should answer")
    instructions = definition["instructions"]
    if instructions is None:
        raise ValueError(f"question {q}: 'instructions' must not be None; add the text the model "
                         "should answer")
    if ((isinstance(instructions, str) and not instructions.strip())
            or (isinstance(instructions, (list, dict)) and not instructions)):
        raise ValueError(f"question {q}: 'instructions' must not be empty; add the text the "
                         "model should answer")
    if not isinstance(instructions, (str, dict, list, int, float)):
        raise ValueError(f"question {q}: 'instructions' must be a string, dict, or list, got "
                         f"{type(instructions).__name__}")
    criteria = definition.get("criteria")
    {"choice": _check_choice, "score": _check_score, "noul": _check_noul}[qtype](q, criteria)
    if "option_order" in definition:
        order, n = definition["option_order"], _option_count(definition)
        if (not isinstance(order, (list, tuple)) or len(order) != n
                or sorted(i for i in order if isinstance(i, int) and not isinstance(i, bool))
                != list(range(n))):
            raise ValueError(f"question {q}: 'option_order' must be a permutation of range({n}) "
                             f"-- one slot per option, each option once -- got {order!r}")
    if "labels" in definition:
        if qtype != "noul":
            raise ValueError(f"question {q}: 'labels' is only supported for noul questions")
        try:
            noul_labels(definition["labels"])
        except ValueError as exc:
            raise ValueError(f"question {q}: {exc}") from exc


def unknown_key_warnings(questions: Any) -> List[str]:
    """One message per key a question definition carries that nothing reads (upstream ignores
    them too, so a misspelt `"critera"` would silently drop the criteria), with the nearest
    valid key. Pure, so the HTTP service can pass the messages on without catching warnings."""
    if not isinstance(questions, dict):
        return []
    messages = []
    for qid, definition in questions.items():
        if not isinstance(definition, dict):
            continue
        for key in definition:
            if key in QUESTION_KEYS:
                continue
            nearest = difflib.get_close_matches(str(key), QUESTION_KEYS, n=1, cutoff=0.6)
            hint = f"did you mean {nearest[0]!r}?" if nearest else \
                f"a question reads only {', '.join(QUESTION_KEYS)}"
            messages.append(f"question {qid!r}: key {key!r} is not a question key and is "
                            f"ignored; {hint}")
    return messages


def warn_unknown_keys(questions: Any) -> None:
    """`unknown_key_warnings` as RuntimeWarnings (each distinct message once per process)."""
    for message in unknown_key_warnings(questions):
        warnings.warn(message, RuntimeWarning, stacklevel=3)


def normalise(definition: Dict[str, Any]) -> Question:
    """The internal form of a validated definition."""
    qtype = definition["type"]
    criteria = definition.get("criteria")
    if qtype == "choice" and isinstance(criteria, list):
        criteria = {label: None for label in criteria}
    elif qtype == "noul" and isinstance(criteria, dict):
        criteria = {str(key).lower(): value for key, value in criteria.items()}
    instructions = definition["instructions"]
    if not isinstance(instructions, str):
        instructions = dumps_nested(instructions, "instructions", ensure_ascii=False)
    order = definition.get("option_order")
    return Question(qtype, instructions, criteria, definition.get("labels"),
                    None if order is None else [int(i) for i in order])


def check_unicode(text: str, where: str) -> str:
    """`text` if the tokenizer can take it. A lone surrogate is not a Unicode character: refuse it
    by name here rather than let the tokenizer fail with a message about its own types."""
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise TypeError(f"{where} contains a lone surrogate {text[exc.start]!r} at index "
                            f"{exc.start}, which is not valid Unicode text; decode the source "
                            "bytes with errors='replace' first") from None
    return text


def parse_questions(questions: Dict[Any, Any]) -> Dict[Any, Question]:
    """Validate every question in order (the first failure raises), then normalise each once."""
    for qid, definition in questions.items():
        check_question(qid, definition)
    parsed = {qid: normalise(definition) for qid, definition in questions.items()}
    for qid, question in parsed.items():
        for text in [question.instructions] + render_options(question):
            check_unicode(text, f"question {qid!r}")
    return parsed


def render_options(question: Question) -> List[str]:
    """Option texts in option order (noul is always `[false, true]`)."""
    crit = question.crit
    if question.qtype == "choice":
        return [str(label) if value is None or value == "" else
                f"{label}: {render_criterion(value)}" for label, value in crit.items()]
    if question.qtype == "score":
        return [f"level {i}: {render_criterion(level)}" for i, level in enumerate(crit)]
    crit = crit or {}
    texts = []
    for label, key, default in zip(noul_labels(question.labels), ("false", "true"),
                                   NOUL_DEFAULT_TEXT):
        value = crit.get(key)
        texts.append(f"{label}: {default if value in (None, '') else render_criterion(value)}")
    return texts
