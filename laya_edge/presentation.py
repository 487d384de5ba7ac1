"""Answers in words for people: the label of an answer and the table the CLI prints (the demo
prints the same labels)."""
from __future__ import annotations

from typing import Any, Dict


def answer_label(answer: Dict[str, Any], question: Dict[str, Any]) -> str:
    """The answer in words: the chosen label, the most likely level, or yes/no."""
    if answer.get("type") == "noul":
        return "yes" if answer["noul"] > 0.5 else "no"
    probabilities = answer.get("probabilities") or {}
    if not probabilities:
        return "-"
    top = max(probabilities, key=probabilities.get)
    if answer.get("type") == "score":
        criteria = question.get("criteria")
        level = int(top)
        named = criteria[level] if isinstance(criteria, list) and level < len(criteria) else top
        return f"{named} (score {answer['score']:.2f})"
    return top


def answers_table(payload: Dict[str, Any], questions: Dict[str, Any]) -> str:
    """One row per answer. The last column is the answer's `answer_confidence` and is named so:
    the payload's `confidence` is a different figure (docs/cli.md#predict)."""
    rows = [("question", "type", "answer", "answer_confidence")]
    for key, answer in payload.get("answers", {}).items():
        rows.append((str(key), str(answer.get("type", "")),
                     answer_label(answer, questions.get(key, {})),
                     f"{answer.get('answer_confidence', 0.0):.2f}"))
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip()
             for row in rows]
    routing = payload.get("routing")
    if routing:
        lines.append(f"routed to {routing['model']}: {routing['reason']}")
    return "\n".join(lines)
