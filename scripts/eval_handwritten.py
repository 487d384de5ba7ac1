#!/usr/bin/env python3
"""The demo model on hand-written tickets: accuracy per question kind, baselines and ECE.

`models/eval/handwritten.json` holds support tickets written by hand, not by
`scripts/demo_tickets.py` (none of its templates, phrase pools, products or question wordings),
each with gold answers to questions whose wording and label sets the model never trained on: a
department choice over four new names, the same choice given only as descriptions behind opaque
names ("Group 1"...), two yes/no questions phrased otherwise ("Does this person ask for money
back?", "Is the customer threatening to leave?"), an urgency score with other level names and a
mood choice with other labels.

The bundle answers every question of every ticket (`laya_edge.ONNXAgent`, no torch); the figures
are accuracy (top option right), the majority baseline (always the most frequent gold answer:
for yes/no, always "no"), mean confidence and ECE (top-option probability, 15 equal-width bins,
`train_demo.expected_calibration_error`), per question and per kind. With `--write` they go into
`models/demo-report.json` under `handwritten` (`handwritten_fresh` for the second set,
`models/eval/handwritten-fresh.json`: other tickets, the same questions, written after the first
set had been used to choose between training variants), and the model card `models/README.md` is
rewritten from the report by `train_demo.model_card`, so its hand-written section is generated,
never typed. `scripts/train_demo.py` runs the same evaluation on every bundle it trains.

    python scripts/eval_handwritten.py                    # print the figures (JSON)
    python scripts/eval_handwritten.py --write            # and record them in models/
    python scripts/eval_handwritten.py --bundle DIR       # another bundle, e.g. a scratch run
    python scripts/eval_handwritten.py --checkpoint A --checkpoint B   # PyTorch, averaged
"""
from __future__ import annotations

import argparse
import collections
import hashlib
import json
import sys
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SET_PATH = ROOT / "models" / "eval" / "handwritten.json"
# Written after SET_PATH had been used to choose between training variants: the same questions
# of other tickets, to measure a model without that selection's bias.
FRESH_PATH = ROOT / "models" / "eval" / "handwritten-fresh.json"
SETS = {"handwritten": SET_PATH, "handwritten_fresh": FRESH_PATH}  # by their key in the report

import train_demo  # noqa: E402  (scripts/ is on the path when a script runs)
from train_demo import PredictBatch  # noqa: E402

# the kinds the model card reports, in this order: {kind: questions of the set}
KINDS = {"department (new names)": ["team_names"],
         "department (descriptions only)": ["team_described"],
         "yes/no (reworded)": ["money_back", "leaving"],
         "score (other level names)": ["priority"],
         "choice (other mood labels)": ["mood"]}


def load_set(path: Path = SET_PATH) -> Dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8"))


def gold(spec: Dict[str, Any], ticket: Dict[str, Any]) -> Any:
    """The expected answer to one question of the set, in the form `train_demo.predicted` uses:
    an option label for a choice, a level index for a score, a bool for yes/no."""
    value = ticket[spec["gold"]]
    return spec["labels"][value] if "labels" in spec else value


def rows(data: Dict[str, Any]) -> List[Dict[str, Any]]:
    """`{state, questions, expected}` rows (every question asked of every ticket)."""
    specs = data["questions"]
    return [{"state": ticket["text"],
             "questions": {key: spec["question"] for key, spec in specs.items()},
             "expected": {key: gold(spec, ticket) for key, spec in specs.items()}}
            for ticket in data["tickets"]]


def baselines(table: Sequence[Dict[str, Any]]) -> Dict[str, Dict[str, Any]]:
    """Per question: the accuracy of always answering its most frequent gold answer."""
    out = {}
    for key in table[0]["expected"]:
        counts = collections.Counter(json.dumps(row["expected"][key]) for row in table)
        answer, hits = counts.most_common(1)[0]
        out[key] = {"answer": json.loads(answer), "accuracy": round(hits / len(table), 4)}
    return out


def by_kind(metrics: Dict[str, Any], base: Dict[str, Dict[str, Any]],
            table: Sequence[Dict[str, Any]],
            kinds: Optional[Dict[str, List[str]]] = None) -> Dict[str, Dict[str, Any]]:
    """The per-question figures pooled per kind (weighted by items), with the pooled baseline.
    The pooled ECE is the item-weighted mean of the questions' ECEs."""
    out = {}
    for kind, keys in (kinds or KINDS).items():
        entries = [metrics["by_question"][key] for key in keys]
        n = sum(entry["n"] for entry in entries)
        pooled = {"n": n}
        for field in ("accuracy", "mean_confidence", "ece"):
            pooled[field] = round(sum(e[field] * e["n"] for e in entries) / n, 4)
        pooled["baseline"] = round(sum(base[key]["accuracy"] * e["n"]
                                       for key, e in zip(keys, entries)) / n, 4)
        out[kind] = pooled
    return out


def averaged(predicts: Sequence[PredictBatch]) -> PredictBatch:
    """One `predict_batch` answering with the mean of several models' probabilities (for yes/no
    the mean probability of "yes"), its confidence the mean's top probability: a
    probability-averaged ensemble. Of three demo runs that differed only by seed, it scored
    better than each (the notes on seeds in scripts/train_demo.py)."""
    def predict_batch(states: List[Any], questions: Dict[str, Any]) -> List[Dict[str, Any]]:
        results = [predict(states, questions) for predict in predicts]
        return [{"answers": {key: _mean_answer([result["answers"][key] for result in per_state])
                             for key in questions}}
                for per_state in zip(*results)]

    return predict_batch


def _mean_answer(answers: Sequence[Dict[str, Any]]) -> Dict[str, Any]:
    if "probabilities" in answers[0]:
        probabilities = {option: sum(answer["probabilities"][option] for answer in answers)
                         / len(answers) for option in answers[0]["probabilities"]}
        return {"probabilities": probabilities,
                "answer_confidence": max(probabilities.values())}
    yes = sum(answer["noul"] for answer in answers) / len(answers)
    return {"noul": yes, "answer_confidence": max(yes, 1.0 - yes)}


def checkpoints_predict(checkpoints: Sequence[Path]) -> PredictBatch:
    """PyTorch checkpoints (upstream laya, fp32) answering as one: the first alone, or the
    ensemble of all (`averaged`)."""
    import laya

    predicts = [laya.load(str(checkpoint)).predict_batch for checkpoint in checkpoints]
    return predicts[0] if len(predicts) == 1 else averaged(predicts)


def evaluate(bundle: Path, path: Path = SET_PATH) -> Dict[str, Any]:
    """The report's entry for `bundle` on the set at `path` (`handwritten` for SET_PATH)."""
    return measure(lambda table: train_demo.evaluate_bundle(bundle, table), path)


def evaluate_checkpoints(checkpoints: Sequence[Path], path: Path = SET_PATH) -> Dict[str, Any]:
    """`evaluate`'s figures for PyTorch checkpoints: one, or the ensemble of several."""
    predict = checkpoints_predict(checkpoints)
    answered_by = ("fp32 (PyTorch)" if len(checkpoints) == 1
                   else f"ensemble of {len(checkpoints)} (PyTorch)")
    return measure(lambda table: dict(train_demo.evaluate(predict, table),
                                      precision=answered_by), path)


def measure(score: Callable[[List[Dict[str, Any]]], Dict[str, Any]],
            path: Path) -> Dict[str, Any]:
    """The entry `evaluate` makes, from `score`: the figures (`train_demo.evaluate`'s, with the
    `precision` that answered) of some model on a list of rows."""
    data = load_set(path)
    table = rows(data)
    metrics = score(table)
    base = baselines(table)
    for key, entry in metrics["by_question"].items():
        entry["baseline"] = base[key]["accuracy"]
    resolved = path.resolve()
    name = (resolved.relative_to(ROOT).as_posix() if resolved.is_relative_to(ROOT)
            else str(resolved))
    return {"set": name, "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
            "tickets": len(table), "precision": metrics["precision"],
            "questions": {key: {"kind": spec["kind"], "question": spec["question"]}
                          for key, spec in data["questions"].items()},
            "overall": metrics["overall"], "by_question": metrics["by_question"],
            "by_kind": by_kind(metrics, base, table)}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bundle", type=Path, default=ROOT / "models" / train_demo.BUNDLE_NAME)
    parser.add_argument("--checkpoint", type=Path, action="append", default=[],
                        help="a PyTorch checkpoint (upstream laya) instead of the bundle; given "
                             "more than once, the ensemble averaging their probabilities")
    parser.add_argument("--set", type=Path, default=SET_PATH,
                        help="the hand-written set (default models/eval/handwritten.json; "
                             "models/eval/handwritten-fresh.json is the second one)")
    parser.add_argument("--write", action="store_true",
                        help="record the figures in models/demo-report.json and rewrite the "
                             "model card models/README.md from it (the shipped bundle and the "
                             "sets in models/eval/ only)")
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    models = ROOT / "models"
    keys = [key for key, path in SETS.items() if path.resolve() == args.set.resolve()]
    if args.write and args.bundle.resolve() != (models / train_demo.BUNDLE_NAME).resolve():
        raise SystemExit("--write records the shipped bundle's figures only")
    if args.write and not keys:
        raise SystemExit(f"--write records the sets in models/eval/ only, not {args.set}")
    if args.write and args.checkpoint:
        raise SystemExit("--write records the shipped bundle's figures, not a checkpoint's")
    result = (evaluate_checkpoints(args.checkpoint, args.set) if args.checkpoint
              else evaluate(args.bundle, args.set))
    print(json.dumps(result, indent=2))
    if args.write:
        report_path = models / train_demo.REPORT_NAME
        report = json.loads(report_path.read_text(encoding="utf-8"))
        report[keys[0]] = result
        report_path.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
        (models / "README.md").write_text(train_demo.model_card(report), encoding="utf-8")
    for kind, entry in result["by_kind"].items():
        print(f"{kind:<32} accuracy {entry['accuracy']:.3f}  baseline {entry['baseline']:.3f}  "
              f"ECE {entry['ece']:.3f}  (n={entry['n']})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
