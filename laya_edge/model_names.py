"""Names of Laya checkpoints: the built-ins and their published sources, aliases, and the
typed-decisions workflows recognised by their question ids.

Pure Python and loads nothing: `laya_edge.load` and the Router both read their names here.
"""
from __future__ import annotations

import re
from typing import Any, Dict, List, Optional, Sequence, Tuple

BUNDLE_REPO = "convaiinnovations/laya"
DEFAULT_MODELS: Dict[str, Any] = {
    "english": (BUNDLE_REPO, None),
    "multilingual": (BUNDLE_REPO, "multilingual"),
    "typed-decisions": (BUNDLE_REPO, "typed-decisions"),
}
STANDALONE_MODELS: Dict[str, Any] = {
    "english": "convaiinnovations/laya",
    "multilingual": "convaiinnovations/laya-multilingual",
    "typed-decisions": "convaiinnovations/laya-typed-decisions",
}
ALIASES = {
    "en": "english", "laya": "english", "default": "english",
    "multi": "multilingual", "ml": "multilingual", "laya-multilingual": "multilingual",
    "typed": "typed-decisions", "typed_decisions": "typed-decisions",
    "laya-typed-decisions": "typed-decisions", "decisions": "typed-decisions",
}
TYPED_DECISION_WORKFLOWS = {
    "agent_trace_observability": {"action", "needs_review", "outcome", "risk", "urgency"},
    "customer_service": {"action", "category", "churn_risk", "needs_human", "urgency"},
    "invoice_processing": {"discrepancy_severity", "disposition", "duplicate", "matches_order",
                           "urgency"},
    "security_incidents": {"credential_compromise", "disposition", "severity", "true_positive",
                           "urgency"},
}
NAME = re.compile(r"^[a-z0-9][a-z0-9._-]*$")


def split_source(source: Any) -> Tuple[Any, Optional[str]]:
    if isinstance(source, (tuple, list)):
        repo, subfolder = (list(source) + [None])[:2]
        return repo, subfolder
    return source, None


def display(source: Any) -> Optional[str]:
    """`repo/subfolder` or `repo`: how a checkpoint source is shown in decisions."""
    if source is None:
        return None
    repo, subfolder = split_source(source)
    return f"{repo}/{subfolder}" if subfolder else repo


def canonical_name(name: Any) -> str:
    """Trimmed, lower-cased, alias resolved; never validates."""
    key = str(name).strip().lower()
    return ALIASES.get(key, key)


def unknown_model(name: Any, choices: Sequence[str]) -> ValueError:
    return ValueError(f"unknown model {name!r}; choose one of {sorted(choices)} (or an alias: "
                      f"{sorted(ALIASES)})")


def normalise_name(name: Any) -> str:
    """The built-in checkpoint a name or alias means, or ValueError listing the choices."""
    key = canonical_name(name)
    if key not in DEFAULT_MODELS:
        raise unknown_model(name, list(DEFAULT_MODELS))
    return key


def resolve_model_spec(name: Any) -> Optional[Tuple[str, Optional[str]]]:
    """The built-in `(repo, subfolder)` of a name or alias, else None."""
    key = canonical_name(name)
    return tuple(split_source(DEFAULT_MODELS[key])) if key in DEFAULT_MODELS else None


def match_typed_decisions_workflow(questions: Any) -> Optional[str]:
    """The workflow whose question-id set equals these ids exactly, else None."""
    ids = set(questions or {})
    return next((name for name, signature in TYPED_DECISION_WORKFLOWS.items()
                 if ids == signature), None)


def _edit_distance(left: str, right: str) -> int:
    """Insertions, deletions, substitutions and adjacent swaps turning `left` into `right`."""
    previous2: Optional[List[int]] = None
    previous = list(range(len(right) + 1))
    for i in range(1, len(left) + 1):
        current = [i]
        for j in range(1, len(right) + 1):
            best = min(current[j - 1] + 1, previous[j] + 1,
                       previous[j - 1] + (left[i - 1] != right[j - 1]))
            if (previous2 is not None and j > 1 and left[i - 1] == right[j - 2]
                    and left[i - 2] == right[j - 1]):
                best = min(best, previous2[j - 2] + 1)
            current.append(best)
        previous2, previous = previous, current
    return previous[-1]


def near_builtin(key: str) -> Optional[str]:
    """The built-in name one edit (or one swap) away from `key`: a likely typo."""
    return next((builtin for builtin in DEFAULT_MODELS
                 if abs(len(key) - len(builtin)) <= 1 and _edit_distance(key, builtin) == 1),
                None)
