"""The trained demo bundle shipped in models/ (scripts/train_demo.py): what it answers on the
README's duplicate-charge ticket, that it is the int8 variant within 35 MB, and that its report,
model card and models/demo.json are what the script computes from the shipped bundle."""
import json
from pathlib import Path

import pytest

import laya_edge
from laya_edge.demo import DEMO_QUESTIONS, DUPLICATE_CHARGE, demo_setup
from modules import load_file

ROOT = Path(__file__).resolve().parents[1]
MODELS = ROOT / "models"
train_demo = load_file(ROOT / "scripts" / "train_demo.py", "train_demo")
BUNDLE = MODELS / train_demo.BUNDLE_NAME


@pytest.fixture(scope="module")
def report():
    return json.loads((MODELS / train_demo.REPORT_NAME).read_text(encoding="utf-8"))


def test_the_shipped_bundle_answers_the_readme_ticket():
    """Department, urgency, churn risk and refund of the README's duplicate-charge ticket
    ("... refund the duplicate payment today. If this isn't fixed I'm cancelling ...")."""
    answers = laya_edge.ONNXAgent(str(BUNDLE)).system_one(DUPLICATE_CHARGE,
                                                           DEMO_QUESTIONS)["answers"]
    decided = {key: train_demo.predicted(answers[key], DEMO_QUESTIONS[key])
               for key in ("department", "urgency", "churn_risk", "refund")}
    high = DEMO_QUESTIONS["urgency"]["criteria"].index("high: needed today")
    assert decided == {"department": "billing", "urgency": high, "churn_risk": True,
                       "refund": True}


def test_the_shipped_bundle_is_int8_and_within_35_mb():
    manifest = json.loads((BUNDLE / "laya_edge.json").read_text(encoding="utf-8"))
    assert list(manifest["variants"]) == ["int8"]
    size = sum(path.stat().st_size for path in BUNDLE.rglob("*") if path.is_file())
    assert size <= 35_000_000  # the demo bundle's size budget


def test_the_demo_runs_the_trained_bundle_on_its_english_route():
    setup = demo_setup(MODELS)
    assert setup["routes"]["english"] == BUNDLE
    assert setup["trained"] == {"english": True, "multilingual": False}


def test_report_card_and_demo_json_are_what_the_script_writes(report):
    assert (MODELS / "README.md").read_text(encoding="utf-8") == train_demo.model_card(report)
    assert (json.loads((MODELS / "demo.json").read_text(encoding="utf-8"))
            == train_demo.demo_manifest(report["seed"]))
    # the script's defaults are the shipped run, as demo.json's "made_by" (a seed only) says
    assert train_demo.reproduce_command(report) == \
        f"python scripts/train_demo.py --seed {report['seed']}"
    for kind in ("choice", "score", "noul"):
        entry = report["evaluation"]["bundle"]["by_type"][kind]
        assert entry["n"] > 0 and 0.0 <= entry["ece"] <= 1.0


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_the_reported_held_out_figures_are_the_shipped_bundles(report):
    """Re-measure the shipped bundle on the first rows of the held-out test split the report
    was computed on (the whole split takes minutes): the report's figures for those rows,
    computed in the same evaluation as the whole split's, are what the bundle answers now."""
    data = report["data"]
    test_rows = train_demo.splits(report["seed"], 0, data["calib_rows"], data["test_rows"])["test"]
    reported = report["evaluation"]["bundle"]
    first = reported["first_rows"]
    assert first["rows"] == train_demo.CHECK_ROWS < data["test_rows"] == len(test_rows)
    again = train_demo.evaluate_bundle(BUNDLE, test_rows[:first["rows"]])
    assert again["precision"] == reported["precision"] == "int8"
    assert again["by_question"].keys() == first["by_question"].keys()
    assert first["by_question"].keys() == reported["by_question"].keys()
    for key, entry in first["by_question"].items():
        assert again["by_question"][key]["n"] == entry["n"] == first["rows"]
        assert again["by_question"][key]["accuracy"] == pytest.approx(entry["accuracy"], abs=0.02)
        assert again["by_question"][key]["ece"] == pytest.approx(entry["ece"], abs=0.02)


@pytest.mark.parametrize("key, size", [("handwritten", 150), ("handwritten_fresh", 100)])
def test_the_handwritten_figures_are_of_the_current_set_and_bundle(report, key, size):
    """The model card's hand-written sections (scripts/eval_handwritten.py --write) were
    measured on each set as it is now, with the shipped bundle's precision; every kind has a
    baseline."""
    import hashlib

    hand = report[key]
    path = ROOT / hand["set"]
    assert hand["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    data = json.loads(path.read_text(encoding="utf-8"))
    assert hand["tickets"] == len(data["tickets"]) >= size
    assert set(hand["by_question"]) == set(data["questions"])
    assert hand["precision"] == report["evaluation"]["bundle"]["precision"]
    assert all(entry["n"] == hand["tickets"] and 0 <= entry["baseline"] <= 1
               for entry in hand["by_question"].values())
    assert "## Hand-written tickets" in (MODELS / "README.md").read_text(encoding="utf-8")
