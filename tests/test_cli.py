"""`python -m laya_edge` / `laya-edge`: predict, route and inspect, with their errors."""
import io
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import laya_edge
from laya_edge import cli

ROOT = Path(__file__).resolve().parents[1]
QUESTIONS = {
    "dept": {"type": "choice", "instructions": "Which team should handle this ticket?",
             "criteria": ["billing", "technical", "sales"]},
    "urgent": {"type": "noul", "instructions": "Is this urgent?"},
    "severity": {"type": "score", "instructions": "How severe?",
                 "criteria": ["minor", "major", "blocking"]},
}
STATE = "I was charged twice for my subscription, please refund one."


@pytest.fixture
def questions_file(tmp_path):
    path = tmp_path / "questions.json"
    path.write_text(json.dumps(QUESTIONS), encoding="utf-8")
    return str(path)


@pytest.fixture
def bundle(bundles):
    return str(bundles["modernbert-tiny"])


def run(capsys, *argv, terminal=False, monkeypatch=None):
    if terminal:
        monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    code = cli.main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_predict_prints_the_agents_payload_as_json(capsys, bundle, questions_file):
    code, out, err = run(capsys, "predict", "--model", bundle, "--state", STATE,
                         "--questions", questions_file)
    assert code == 0 and err == ""
    expected = laya_edge.ONNXAgent(bundle).system_one(STATE, QUESTIONS)
    assert json.loads(out) == json.loads(json.dumps(expected))


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_predict_prints_a_table_on_a_terminal(capsys, monkeypatch, bundle, questions_file):
    code, out, _ = run(capsys, "predict", "--model", bundle, "--state", STATE, "--questions",
                       questions_file, terminal=True, monkeypatch=monkeypatch)
    payload = laya_edge.ONNXAgent(bundle).system_one(STATE, QUESTIONS)["answers"]
    lines = out.splitlines()
    # the column shows answer_confidence and is named so: the payload's confidence differs
    assert code == 0 and lines[0].split() == ["question", "type", "answer", "answer_confidence"]
    dept = next(line for line in lines if line.startswith("dept"))
    assert dept.split()[2] == payload["dept"]["choice"]
    assert dept.split()[3] == f"{payload['dept']['answer_confidence']:.2f}"
    urgent = next(line for line in lines if line.startswith("urgent"))
    assert urgent.split()[2] == ("yes" if payload["urgent"]["noul"] > 0.5 else "no")
    code, out, _ = run(capsys, "predict", "--model", bundle, "--state", STATE, "--questions",
                       questions_file, "--json", terminal=True, monkeypatch=monkeypatch)
    assert json.loads(out)["answers"].keys() == QUESTIONS.keys()


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_state_from_a_file_a_json_file_and_stdin(capsys, monkeypatch, tmp_path, bundle,
                                                 questions_file):
    agent = laya_edge.ONNXAgent(bundle)
    text_file = tmp_path / "ticket.txt"
    text_file.write_text(STATE, encoding="utf-8")
    _, out, _ = run(capsys, "predict", "--model", bundle, "--state-file", str(text_file),
                    "--questions", questions_file)
    assert json.loads(out)["answers"] == json.loads(json.dumps(
        agent.system_one(STATE, QUESTIONS)["answers"]))
    state = {"subject": "Refund", "body": STATE}
    json_file = tmp_path / "ticket.json"
    json_file.write_text(json.dumps(state), encoding="utf-8")
    _, out, _ = run(capsys, "predict", "--model", bundle, "--state-file", str(json_file),
                    "--questions", questions_file)
    assert json.loads(out)["usage"] == agent.system_one(state, QUESTIONS)["usage"]
    monkeypatch.setattr(sys, "stdin", io.StringIO(STATE))
    _, out, _ = run(capsys, "predict", "--model", bundle, "--questions", questions_file)
    assert json.loads(out)["usage"] == agent.system_one(STATE, QUESTIONS)["usage"]


def test_bad_input_is_one_line_with_exit_code_2_before_any_model_loads(capsys, monkeypatch,
                                                                        tmp_path, bundle,
                                                                        questions_file):
    def no_model(*args, **kwargs):
        raise AssertionError("a model was loaded for bad input")

    monkeypatch.setattr(cli, "load_model", no_model)
    bad_json = tmp_path / "bad.json"
    bad_json.write_text('{"dept": ', encoding="utf-8")
    cases = [
        (["--questions", str(bad_json)], "--questions: invalid JSON in"),
        (["--questions", str(tmp_path / "missing.json")], "--questions: no such file"),
        (["--questions", "[]"], "must hold a non-empty JSON object"),
        (["--questions", json.dumps({"q": {"type": "maybe", "instructions": "x"}})],
         "--questions: question 'q'"),
        (["--questions", questions_file, "--state-file", str(tmp_path / "gone.txt")],
         "--state-file: no such file"),
    ]
    for extra, message in cases:
        argv = ["predict", "--model", bundle] + extra
        if "--state-file" not in extra:
            argv += ["--state", STATE]
        code, out, err = run(capsys, *argv)
        assert code == 2 and out == "", (extra, err)
        assert err.startswith("laya-edge: error: ") and message in err and err.count("\n") == 1
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    monkeypatch.setattr(sys.stdin, "isatty", lambda: True)
    code, _, err = run(capsys, "predict", "--model", bundle, "--questions", questions_file)
    assert code == 2 and "no state: pass --state TEXT" in err


def test_unknown_models_and_missing_bundles(capsys, tmp_path, questions_file):
    code, _, err = run(capsys, "predict", "--model", str(tmp_path / "nowhere"), "--state", STATE,
                       "--questions", questions_file)
    assert code == 2 and "neither a bundle directory nor a router config" in err
    config = tmp_path / "router.json"
    config.write_text(json.dumps({"models": {"english": str(tmp_path)}, "default": "nope"}))
    code, _, err = run(capsys, "predict", "--model", str(config), "--state", STATE,
                       "--questions", questions_file)
    assert code == 2 and "unknown model 'nope'" in err
    config.write_text(json.dumps({"models": {"english": str(tmp_path)}, "bogus": 1}))
    code, _, err = run(capsys, "route", "hello", "--model", str(config))
    assert code == 2 and "unexpected keyword argument 'bogus'" in err
    config.write_text(json.dumps({"models": {"english": str(tmp_path / "gone"),
                                             "multilingual": str(tmp_path / "gone")}}))
    code, _, err = run(capsys, "predict", "--model", str(config), "--state", STATE,
                       "--questions", questions_file)
    assert code == 1 and err.startswith("laya-edge: error: FileNotFoundError")
    code, _, err = run(capsys, "inspect", str(tmp_path))
    assert code == 2 and "laya-edge: error:" in err


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_predict_through_a_router_config(capsys, tmp_path, bundles, questions_file):
    config = tmp_path / "router.json"
    config.write_text(json.dumps({"models": {"english": str(bundles["modernbert-tiny"]),
                                             "multilingual": str(bundles["unigram-tiny"])}}))
    code, out, _ = run(capsys, "predict", "--model", str(config), "--state",
                       "Meine Rechnung wurde doppelt abgebucht.", "--questions", questions_file)
    payload = json.loads(out)
    assert code == 0 and payload["routing"]["model"] == "multilingual"
    expected = laya_edge.ONNXAgent(str(bundles["unigram-tiny"])).system_one(
        "Meine Rechnung wurde doppelt abgebucht.", QUESTIONS)
    assert payload["answers"] == json.loads(json.dumps(expected["answers"]))


def test_route_explains_the_decision_and_loads_nothing(capsys, monkeypatch):
    code, out, _ = run(capsys, "route", "Meine Rechnung wurde doppelt abgebucht.")
    decision = json.loads(out)
    assert code == 0 and decision["model"] == "multilingual"
    assert decision["detection"]["language"] == "de" and "de" in decision["reason"]
    assert decision == json.loads(json.dumps(laya_edge.Router().route(
        "Meine Rechnung wurde doppelt abgebucht.", explain=True)))
    code, out, _ = run(capsys, "route", "My invoice is wrong", "--lang", "fr", terminal=True,
                       monkeypatch=monkeypatch)
    lines = dict(line.split(None, 1) for line in out.splitlines())
    assert lines["model"] == "multilingual" and "fr" in lines["reason"]
    # routing loads no model machinery
    probe = subprocess.run([sys.executable, "-c", (
        "import sys; from laya_edge.cli import main; main(['route', 'hello there, my order']);"
        "print(sorted(m for m in ('onnxruntime', 'tokenizers', 'numpy') if m in sys.modules))")],
        capture_output=True, text=True, check=True)
    assert probe.stdout.strip().splitlines()[-1] == "[]"


def test_inspect_reports_variants_verification_and_the_plan(capsys, monkeypatch, bundle):
    code, out, _ = run(capsys, "inspect", bundle)
    report = json.loads(out)
    manifest = json.loads((Path(bundle) / "laya_edge.json").read_text())
    assert code == 0 and report["variants"].keys() == manifest["variants"].keys()
    fp32 = report["variants"]["fp32"]
    assert fp32["verification"]["argmax_agreement"] == \
        manifest["variants"]["fp32"]["verification"]["argmax_agreement"]
    assert fp32["present"] and fp32["bytes"] == manifest["variants"]["fp32"]["bytes"]
    assert "CPUExecutionProvider" in report["providers_available"]
    assert report["would_run"]["device"] == "cpu" and report["would_run"]["reasons"]
    code, out, _ = run(capsys, "inspect", bundle, "--precision", "fp32", terminal=True,
                       monkeypatch=monkeypatch)
    assert code == 0 and "would run  fp32 on cpu" in out and "passed: agreement" in out


def test_the_module_and_the_console_script_run(tmp_path):
    done = subprocess.run([sys.executable, "-m", "laya_edge", "--help"], capture_output=True,
                          text=True)
    assert done.returncode == 0
    for command in ("predict", "route", "inspect"):
        assert command in done.stdout
    script = shutil.which("laya-edge", path=str(Path(sys.executable).parent))
    assert script, "the laya-edge console script is not installed"
    done = subprocess.run([script, "route", "Bonjour, ma commande est en retard"],
                          capture_output=True, text=True)
    assert done.returncode == 0 and json.loads(done.stdout)["model"] == "multilingual"
    done = subprocess.run([script, "predict"], capture_output=True, text=True)
    assert done.returncode == 2 and "required" in done.stderr
