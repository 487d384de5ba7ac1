"""The command line refuses bad input in its own words (issue 30): option values argparse checks
(exit 2), state text in another encoding, a port in use, a bundle missing a file; `verify`
hashes a bundle and `inspect` says what it checked; the runtime's warnings are one line each."""
import io
import json
import shutil
import socket
import sys
import warnings
from pathlib import Path

import pytest

import laya_edge
from laya_edge import cli
from laya_edge.bundle_format import MANIFEST, file_digests
from laya_edge.cli_args import build_parser

QUESTIONS = {"urgent": {"type": "noul", "instructions": "Is this urgent?"},
             "dept": {"type": "choice", "instructions": "Which team?",
                      "criteria": ["billing", "technical"]}}
STATE = "Mon café est arrivé froid, je veux être remboursé."


def run(capsys, *argv):
    code = cli.main([str(arg) for arg in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def usage_error(capsys, *argv):
    """argparse's exit: code 2, its usage and message on stderr, nothing on stdout."""
    with pytest.raises(SystemExit) as raised:
        cli.main([str(arg) for arg in argv])
    captured = capsys.readouterr()
    assert raised.value.code == 2 and captured.out == ""
    return captured.err


@pytest.fixture
def bundle(bundles):
    return bundles["modernbert-tiny"]


@pytest.fixture
def bundle_copy(bundle, tmp_path):
    return Path(shutil.copytree(bundle, tmp_path / "bundle"))


def expected_answers(bundle, state, questions=QUESTIONS):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        payload = laya_edge.ONNXAgent(str(bundle)).system_one(state, questions)
    return json.loads(json.dumps(payload))["answers"]


# -- item 8: option values are usage errors -------------------------------------------------------

@pytest.mark.parametrize("argv, named", [
    (["predict", "--device", "gpu"], "argument --device: invalid device 'gpu'"),
    (["predict", "--device", "cuda:x"], "argument --device: invalid device 'cuda:x'"),
    (["predict", "--precision", "bf16"], "argument --precision: invalid choice: 'bf16'"),
    (["predict", "--encoding", "klingon"], "argument --encoding: unknown encoding 'klingon'"),
    (["predict", "--errors", "ignore"], "argument --errors: invalid choice: 'ignore'"),
    (["inspect", ".", "--device", "npu"], "argument --device: invalid device 'npu'"),
    (["serve", "--port", "-1"], "argument --port: '-1' is not a whole number from 1 to 65535"),
    (["serve", "--port", "65536"], "argument --port: '65536'"),
    (["serve", "--max-concurrent", "0"], "argument --max-concurrent: '0'"),
    (["serve", "--max-body-bytes", "-5"], "argument --max-body-bytes: '-5'"),
    (["serve", "--max-questions", "1.5"], "argument --max-questions: '1.5'"),
    (["serve", "--replicas", "0"], "argument --replicas: '0'"),
    (["serve", "--num-cpus", "-1"], "argument --num-cpus: '-1' is not a number of 0 or more"),
    (["serve", "--num-gpus", "nan"], "argument --num-gpus: 'nan'"),
    (["serve", "--num-cpus", "inf"], "argument --num-cpus: 'inf'"),
])
def test_bad_option_values_are_usage_errors_naming_the_option(capsys, argv, named):
    if argv[0] == "predict":
        argv = argv + ["--model", ".", "--state", "x", "--questions", json.dumps(QUESTIONS)]
    err = usage_error(capsys, *argv)
    assert err.startswith("usage: laya-edge ") and named in err and "Traceback" not in err


def test_a_usage_error_stays_on_one_line_when_an_argument_holds_a_line_break(capsys):
    err = usage_error(capsys, "route", "hello", "x\ny")
    last = err.splitlines()[-1]
    assert last.startswith("laya-edge: error: unrecognized arguments: ") and "x\\ny" in last


def test_every_documented_device_and_precision_is_still_accepted():
    parser = build_parser("")
    for device in ("auto", "cpu", "cuda", "cuda:1", "tensorrt", "tensorrt:0", "CUDA:0"):
        assert parser.parse_args(["inspect", ".", "--device", device]).device == device
    for precision in ("auto", "fp32", "fp16", "int8", "FP16"):
        assert parser.parse_args(["inspect", ".", "--precision", precision]).precision == \
            precision.lower()
    serve = parser.parse_args(["serve", "--port", "65535", "--num-gpus", "0.5",
                               "--max-body-bytes", "1"])
    assert (serve.port, serve.num_gpus, serve.max_body_bytes) == (65535, 0.5, 1)


def test_version(capsys):
    with pytest.raises(SystemExit) as raised:
        cli.main(["--version"])
    assert raised.value.code == 0
    assert capsys.readouterr().out.split() == ["laya-edge", laya_edge.__version__]


# -- item 8: state text in another encoding --------------------------------------------------------

def test_a_state_file_in_another_encoding_names_the_options_that_read_it(capsys, tmp_path,
                                                                         bundle):
    latin = tmp_path / "ticket.txt"
    latin.write_bytes(STATE.encode("latin-1"))
    argv = ["predict", "--model", bundle, "--state-file", latin, "--questions",
            json.dumps(QUESTIONS)]
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == "" and err.count("\n") == 1
    assert f"--state-file {str(latin)!r} is not valid utf-8 text" in err
    assert "--encoding" in err and "--errors replace" in err and "UnicodeDecodeError" not in err
    code, out, _ = run(capsys, *argv, "--encoding", "latin-1")
    assert code == 0 and json.loads(out)["answers"] == expected_answers(bundle, STATE)
    code, out, _ = run(capsys, *argv, "--errors", "replace")
    replaced = STATE.encode("latin-1").decode("utf-8", "replace")
    assert code == 0 and json.loads(out)["answers"] == expected_answers(bundle, replaced)


def test_standard_input_in_another_encoding(capsys, monkeypatch, bundle):
    argv = ["predict", "--model", bundle, "--questions", json.dumps(QUESTIONS)]
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(STATE.encode("utf-16"))))
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == "" and "standard input is not valid utf-8 text" in err
    assert "--encoding" in err and "errors='replace'" not in err
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(STATE.encode("utf-16"))))
    code, out, _ = run(capsys, *argv, "--encoding", "utf-16")
    assert code == 0 and json.loads(out)["answers"] == expected_answers(bundle, STATE)


def test_undecodable_bytes_in_the_state_argument(capsys, bundle):
    """The shell's bytes Python cannot decode reach argv as lone surrogates (PEP 383)."""
    argv = ["predict", "--model", bundle, "--questions", json.dumps(QUESTIONS), "--state",
            "caf\udce9 froid"]
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == "" and "--state is not valid" in err and "--errors replace" in err
    code, out, _ = run(capsys, *argv, "--errors", "replace")
    assert code == 0 and json.loads(out)["answers"] == expected_answers(bundle, "caf\ufffd froid")


def test_a_questions_file_that_is_not_utf8_or_has_a_bom(capsys, tmp_path, bundle):
    questions = tmp_path / "questions.json"
    questions.write_bytes(json.dumps({"q": {"type": "noul", "instructions": "Café?"}},
                                     ensure_ascii=False).encode("latin-1"))
    code, _, err = run(capsys, "predict", "--model", bundle, "--state", "x", "--questions",
                       questions)
    assert code == 2 and "--questions" in err and "UTF-8" in err
    assert "UnicodeDecodeError" not in err
    questions.write_bytes(json.dumps(QUESTIONS).encode("utf-8-sig"))   # as Windows editors save
    code, out, _ = run(capsys, "predict", "--model", bundle, "--state", STATE, "--questions",
                       questions)
    assert code == 0 and json.loads(out)["answers"] == expected_answers(bundle, STATE)


# -- item 8: serve's address ------------------------------------------------------------------------

def test_a_port_in_use_fails_before_any_model_loads_and_before_serving_on(capsys, tmp_path,
                                                                           bundle_copy):
    """Input is checked first (exit 2), then the address (exit 1), then the model loads: a
    bundle that cannot load is not reached while the port is taken."""
    (bundle_copy / "laya.onnx.data").unlink()
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        code, out, err = run(capsys, "serve", "--model", bundle_copy, "--port", port)
        missing, _, missing_err = run(capsys, "serve", "--model", tmp_path / "nowhere",
                                      "--port", port)
    assert code == 1 and out == "" and err.count("\n") == 1
    assert err.startswith("laya-edge: error: ") and f"127.0.0.1:{port}" in err
    assert "--port" in err and "serving" not in err and "laya.onnx.data" not in err
    assert missing == 2 and "--model" in missing_err


# -- item 5 and 6: bundle files --------------------------------------------------------------------

def test_predict_on_a_bundle_missing_its_weights_names_the_file(capsys, bundle_copy):
    (bundle_copy / "laya.onnx.data").unlink()
    code, out, err = run(capsys, "predict", "--model", bundle_copy, "--state", "x",
                         "--questions", json.dumps(QUESTIONS))
    assert code == 1 and out == "" and err.count("\n") == 1
    assert "'laya.onnx.data'" in err and "onnxruntime" not in err.lower()


def test_verify_passes_an_intact_bundle(capsys, monkeypatch, bundle):
    code, out, err = run(capsys, "verify", bundle)
    report = json.loads(out)
    assert code == 0 and err == "" and report["ok"] and report["problems"] == []
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    code, out, _ = run(capsys, "verify", bundle)
    listed = json.loads((bundle / MANIFEST).read_text())["files"]
    assert code == 0 and out.splitlines()[-1].startswith(f"verified: all {len(listed)} files")


def test_verify_names_each_problem_and_exits_1(capsys, bundle_copy):
    graph = bundle_copy / "laya.onnx"
    graph.write_bytes(graph.read_bytes()[:-10] + b"0123456789")
    (bundle_copy / "tokenizer" / "special_tokens_map.json").unlink()
    code, out, err = run(capsys, "verify", bundle_copy, "--json")
    report = json.loads(out)
    assert code == 1 and not report["ok"] and len(report["problems"]) == 2
    lines = err.splitlines()
    assert len(lines) == 2 and all(line.startswith("laya-edge: error: ") for line in lines)
    assert "'laya.onnx'" in lines[0] and "'tokenizer/special_tokens_map.json'" in lines[1]


def test_verify_of_no_bundle(capsys, tmp_path):
    code, _, err = run(capsys, "verify", tmp_path / "nowhere")
    assert code == 2 and "is not a bundle directory" in err
    code, out, err = run(capsys, "verify", tmp_path)
    assert code == 1 and not json.loads(out)["ok"] and MANIFEST in err


def test_inspect_says_it_hashed_nothing_and_names_missing_files(capsys, monkeypatch,
                                                               bundle_copy):
    graph = bundle_copy / "laya.onnx"
    graph.write_bytes(graph.read_bytes()[:-10] + b"0123456789")   # changed: inspect cannot tell
    (bundle_copy / "laya.onnx.data").unlink()
    code, out, _ = run(capsys, "inspect", bundle_copy)
    checked = json.loads(out)["files_checked"]
    assert code == 0 and checked["missing"] == ["laya.onnx.data"]
    assert checked["hashes"].startswith("not checked") and "laya-edge verify" in checked["hashes"]
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    code, out, _ = run(capsys, "inspect", bundle_copy)
    files = next(line for line in out.splitlines() if line.startswith("files "))
    assert "MISSING laya.onnx.data" in files and "hashes not checked" in files
    fp32 = next(line for line in out.splitlines() if line.strip().startswith("fp32"))
    assert "export check passed" in fp32


# -- item 4 (CLI half): the runtime's warnings, one line each --------------------------------------

def hot_bundle(bundle_copy):
    """The bundle with a temperature the runtime clamps, and warns about, at load."""
    config_path = bundle_copy / "rl_agent_config.json"
    config = json.loads(config_path.read_text())
    config["temperature"][0] = 10.0
    config_path.write_text(json.dumps(config))
    manifest = json.loads((bundle_copy / MANIFEST).read_text())
    manifest["files"]["rl_agent_config.json"] = file_digests(config_path)
    (bundle_copy / MANIFEST).write_text(json.dumps(manifest))
    return bundle_copy


def test_a_runtime_warning_is_one_line_on_stderr_and_stdout_is_unchanged(capsys, bundle_copy):
    bundle = hot_bundle(bundle_copy)
    display = warnings.showwarning
    code, out, err = run(capsys, "predict", "--model", bundle, "--state", STATE, "--questions",
                         json.dumps(QUESTIONS))
    assert code == 0 and json.loads(out)["answers"] == expected_answers(bundle, STATE)
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("laya-edge: warning: ")
    assert "temperature[0]=10.0" in lines[0]
    assert "RuntimeWarning" not in err and ".py:" not in err
    assert warnings.showwarning is display          # put back once the command is done


def test_an_unknown_question_key_is_warned_about_on_stderr(capsys, bundle):
    questions = {"urgent": {"type": "noul", "instructions": "Is this urgent?",
                            "critera": {"true": "the customer cannot work"}}}
    code, out, err = run(capsys, "predict", "--model", bundle, "--state", STATE, "--questions",
                         json.dumps(questions))
    assert code == 0 and json.loads(out)["answers"] == expected_answers(bundle, STATE, questions)
    lines = [line for line in err.splitlines() if "'critera'" in line]
    assert len(lines) == 1 and lines[0].startswith("laya-edge: warning: ")
    assert "'criteria'" in lines[0] and "RuntimeWarning" not in err
