"""The command line, fuzzed (issue 30): whatever argv, state bytes and questions it is given,
`laya-edge` answers (exit 0), refuses the usage or input (exit 2, a message on stderr), or reports
a runtime problem (exit 1, `laya-edge: error:` lines); never a traceback, a raw onnxruntime or
Python-internals message, or a hang. `cli.main` runs in this process on the exported test bundles;
each model is loaded once. Each strategy runs a fixed number of examples, checked and printed."""
import io
import json
import shutil
import signal
import sys
from collections import Counter
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List
from unittest import mock

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from laya_edge import cli

EXAMPLES = {"predict": 120, "route": 80, "inspect": 50, "verify": 50, "serve": 60}
SECONDS_PER_CALL = 30  # a call that takes longer is a hang
RAW = ("Traceback", "[ONNXRuntimeError]", "UnicodeDecodeError", "errors='replace'",
       "object has no attribute", "unsupported operand", "slice indices")
QUESTIONS = {"urgent": {"type": "noul", "instructions": "Is this urgent?"},
             "dept": {"type": "choice", "instructions": "Which team?",
                      "criteria": ["billing", "technical", "sales"]},
             "severity": {"type": "score", "instructions": "How bad?",
                          "criteria": ["minor", "major", "blocking"]}}


@dataclass
class World:
    """Paths the strategies pick from, and a folder for the files an example writes."""

    paths: Dict[str, str]
    scratch: Path


@pytest.fixture(scope="module")
def world(bundles, tmp_path_factory):
    root = tmp_path_factory.mktemp("fuzz_cli")
    good = bundles["modernbert-tiny"]
    broken, corrupted, garbage, empty = (root / name for name in
                                         ("broken", "corrupted", "garbage", "empty"))
    for copy in (broken, corrupted):
        shutil.copytree(good, copy)
    (broken / "laya.onnx.data").unlink()
    graph = corrupted / "laya.onnx"
    graph.write_bytes(graph.read_bytes()[:-4] + b"\x00\x01\x02\x03")
    garbage.mkdir()
    (garbage / "laya_edge.json").write_bytes(b"\xff{not json")
    empty.mkdir()
    configs = {"router": {"models": {"english": str(good),
                                     "multilingual": str(bundles["unigram-tiny"])}},
               "unknown_key": {"models": {"english": str(good)}, "bogus": 1},
               "not_object": [1, 2]}
    paths = {"bundle": str(good), "broken": str(broken), "corrupted": str(corrupted),
             "garbage": str(garbage), "empty": str(empty), "missing": str(root / "nowhere"),
             "plain_file": str(root / "plain.txt"), "bad_json": str(root / "bad.json")}
    (root / "plain.txt").write_text("not a bundle")
    (root / "bad.json").write_bytes(b'{"models": ')
    for name, config in configs.items():
        (root / f"{name}.json").write_text(json.dumps(config))
        paths[name] = str(root / f"{name}.json")
    scratch = root / "scratch"
    scratch.mkdir()
    return World(paths, scratch)


@pytest.fixture(scope="module", autouse=True)
def models_loaded_once():
    """The CLI builds a model per call; here each (model, device, precision) is built once,
    by the CLI's own `load_model`, and a failure is raised again every time."""
    loaded: Dict[Any, Any] = {}
    real = cli.load_model

    def once(spec, device, precision):
        key = (spec, device, precision)
        if key not in loaded:
            loaded[key] = real(spec, device, precision)
        return loaded[key]

    with mock.patch.object(cli, "load_model", once):
        yield


# -- strategies -----------------------------------------------------------------------------------

# Argument text as a shell hands it over: any characters, or bytes Python could not decode
# (they arrive as lone surrogates, PEP 383).
argv_text = st.one_of(st.text(max_size=30),
                      st.binary(max_size=30).map(lambda b: b.decode("utf-8", "surrogateescape")))
numbers = st.one_of(st.integers(-10**30, 10**30), st.floats(allow_nan=True, allow_infinity=True),
                    st.sampled_from(["0", "-1", "1e309", "0x10", "", " 8 ", "1_000"]))
number_text = st.one_of(numbers.map(str), argv_text)
scalars = st.one_of(st.none(), st.booleans(), st.integers(-10**20, 10**20), st.floats(),
                    st.text(max_size=20))
json_like = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=8), inner, max_size=3)),
    max_leaves=12)


def mostly(usual: st.SearchStrategy, odd: st.SearchStrategy) -> st.SearchStrategy:
    """`usual` about five times in six, so that enough cases get past the first refusal."""
    return st.integers(0, 5).flatmap(lambda pick: odd if pick == 5 else usual)


stray = mostly(st.just([]), st.lists(st.one_of(st.sampled_from(
    ["--json", "--bogus", "-x", "--", "--state", "--questions", "--device", "-1", "1e309",
     "--precision", "--model", "--errors"]), argv_text), min_size=1, max_size=2))


def optional(flag: str, values: st.SearchStrategy) -> st.SearchStrategy:
    """`[]` or `[flag, value]`."""
    return st.one_of(st.just([]), values.map(lambda value: [flag, value]))


def choice_or_text(*valid: str) -> st.SearchStrategy:
    return mostly(st.sampled_from(valid), argv_text)


def device_flags() -> st.SearchStrategy:
    return st.tuples(optional("--device", choice_or_text("auto", "cpu", "cuda", "cuda:1",
                                                         "tensorrt:0", "gpu", "cpu:0")),
                     optional("--precision", choice_or_text("auto", "fp32", "fp16", "int8",
                                                            "FP32", "bf16"))
                     ).map(lambda pair: pair[0] + pair[1])


def as_file(raw: bytes) -> Any:
    """Bytes the example writes to a file, passing its path."""
    return ("file", raw)


questions_arg = mostly(
    st.one_of(st.just(json.dumps(QUESTIONS)),
              st.builds(lambda keys, key: json.dumps({k: QUESTIONS[k] for k in keys} | {
                  "urgent": dict(QUESTIONS["urgent"], **{key: "x"})}),
                  st.lists(st.sampled_from(sorted(QUESTIONS)), max_size=3), st.sampled_from(
                      ["critera", "lables", "instructions", "option_order"])),
              st.builds(lambda codec: json.dumps(QUESTIONS, ensure_ascii=False).encode(codec),
                        st.sampled_from(["utf-8", "utf-8-sig"])).map(as_file)),
    st.one_of(json_like.map(json.dumps), st.text(max_size=30).map(lambda text: "{" + text),
              argv_text, st.binary(max_size=60).map(as_file),
              st.sampled_from(["latin-1", "utf-16"]).map(lambda codec: as_file(json.dumps(
                  {"q": {"type": "noul", "instructions": "Café ouvert ?"}},
                  ensure_ascii=False).encode(codec)))))
state_bytes = st.one_of(st.binary(max_size=80),
                        st.builds(lambda text, codec: text.encode(codec, "replace"),
                                  st.text(max_size=40),
                                  st.sampled_from(["utf-8", "latin-1", "utf-16", "cp1252"])),
                        json_like.map(lambda value: json.dumps(value).encode()))
state_source = st.one_of(argv_text.map(lambda text: ("--state", text)),
                         st.tuples(st.sampled_from([".txt", ".json", ""]), state_bytes)
                         .map(lambda pair: ("--state-file", pair)),
                         state_bytes.map(lambda raw: ("stdin", raw)))
predict_case = st.fixed_dictionaries({
    "model": st.sampled_from(["bundle", "bundle", "bundle", "router", "broken", "missing",
                              "plain_file", "unknown_key", "not_object", "bad_json"]),
    "state": state_source, "questions": questions_arg, "device": device_flags(),
    "encoding": optional("--encoding", choice_or_text("utf-8", "latin-1", "utf-16", "cp1252")),
    "errors": optional("--errors", choice_or_text("strict", "replace", "ignore")),
    "json": st.booleans(), "stray": stray})
route_case = st.fixed_dictionaries({
    "text": argv_text, "lang": optional("--lang", choice_or_text("en", "de", "fr", "zh-Hant",
                                                                 "xx", "")),
    "model": optional("--model", st.sampled_from(["router", "bad_json", "not_object",
                                                  "unknown_key", "missing", "bundle"])),
    "json": st.booleans(), "stray": stray})
bundle_case = st.fixed_dictionaries({
    "bundle": st.sampled_from(["bundle", "broken", "corrupted", "garbage", "empty", "missing",
                               "plain_file"]),
    "device": device_flags(), "json": st.booleans(), "stray": stray})
serve_case = st.fixed_dictionaries({
    "model": st.sampled_from(["missing", "broken"]),
    "host": optional("--host", st.sampled_from(["127.0.0.1", "::1", "localhost", ""])),
    "numbers": st.lists(st.tuples(st.sampled_from(
        ["--port", "--max-body-bytes", "--max-questions", "--max-concurrent", "--replicas",
         "--num-cpus", "--num-gpus"]), number_text), max_size=4),
    "device": device_flags(), "stray": stray})


# -- running a case ------------------------------------------------------------------------------

def materialise(value: Any, world: World, suffix: str = ".json") -> str:
    """A ("file", bytes) value becomes the path of a new file holding them."""
    if isinstance(value, tuple) and value[0] == "file":
        path = world.scratch / f"{len(list(world.scratch.iterdir()))}{suffix}"
        path.write_bytes(value[1])
        return str(path)
    return value


def predict_argv(case: Dict[str, Any], world: World):
    argv = ["predict", "--model", world.paths[case["model"]], "--questions",
            materialise(case["questions"], world)]
    source, value = case["state"]
    stdin = b""
    if source == "--state":
        argv += ["--state", value]
    elif source == "--state-file":
        argv += ["--state-file", materialise(("file", value[1]), world, value[0])]
    else:
        stdin = value
    argv += case["device"] + case["encoding"] + case["errors"] + ["--json"] * case["json"]
    return argv + case["stray"], stdin


def route_argv(case: Dict[str, Any], world: World):
    model = ["--model", world.paths[case["model"][1]]] if case["model"] else []
    return (["route", case["text"]] + case["lang"] + model + ["--json"] * case["json"]
            + case["stray"], b"")


def bundle_argv(command: str) -> Callable[[Dict[str, Any], World], Any]:
    def build(case: Dict[str, Any], world: World):
        options = case["device"] if command == "inspect" else []
        return ([command, world.paths[case["bundle"]]] + options + ["--json"] * case["json"]
                + case["stray"], b"")
    return build


def serve_argv(case: Dict[str, Any], world: World):
    """Always a --model that is no bundle or cannot load, so the command stops before serving:
    at the usage, the model path, the address, or the load."""
    argv = ["serve", "--model", world.paths[case["model"]]] + case["host"] + case["device"]
    for flag, value in case["numbers"]:
        argv += [flag, value]
    return argv + case["stray"], b""


class Hang(Exception):
    pass


def on_alarm(signum, frame):
    raise Hang(f"a command ran past {SECONDS_PER_CALL} s")


def invoke(argv: List[str], stdin: bytes):
    """`cli.main(argv)` with `stdin` on standard input: (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(SECONDS_PER_CALL)
    try:
        with redirect_stdout(out), redirect_stderr(err), \
                mock.patch.object(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin))):
            try:
                code = cli.main(argv)
            except SystemExit as exc:
                code = exc.code
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    return code, out.getvalue(), err.getvalue()


def check_outcome(argv: List[str], code: Any, out: str, err: str) -> None:
    """An answer, a usage or input error (2), or a runtime problem (1), each said cleanly."""
    assert not any(raw in err for raw in RAW), (argv, err)
    said = [line for line in err.split("\n")  # not splitlines: \x0c in an argument is no break
            if line and not line.startswith("laya-edge: warning: ")]
    if code == 0:
        assert out.strip() and said == [], (argv, err)
        return
    assert code in (1, 2) and said, (argv, code, err)
    if said[0].startswith("usage: laya-edge"):      # argparse: usage, then its one-line error
        assert code == 2 and said[-1].startswith("laya-edge") and ": error: " in said[-1]
        return
    assert all(line.startswith("laya-edge: error: ") for line in said), (argv, err)
    assert len(said) == 1 or argv[0] == "verify", (argv, err)   # verify names each problem


def fuzz(command: str, case_strategy: st.SearchStrategy, build: Callable, world: World,
         capsys) -> Counter:
    """Run `EXAMPLES[command]` generated cases; the exit codes seen, counted."""
    codes: Counter = Counter()

    @settings(max_examples=EXAMPLES[command], deadline=None, derandomize=True, database=None,
              phases=[Phase.generate, Phase.shrink],
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(case=case_strategy)
    def check(case):
        argv, stdin = build(case, world)
        code, out, err = invoke(argv, stdin)
        check_outcome(argv, code, out, err)
        codes[code] += 1

    check()
    with capsys.disabled():
        print(f"\n[fuzz cli] {command}: {sum(codes.values())} examples, exit codes "
              f"{dict(sorted(codes.items()))}")
    return codes


@pytest.mark.parametrize("command", ["predict", "route", "inspect", "verify", "serve"])
def test_the_command_line_answers_or_refuses_cleanly(command, world, capsys):
    strategy, build = {"predict": (predict_case, predict_argv),
                       "route": (route_case, route_argv),
                       "inspect": (bundle_case, bundle_argv("inspect")),
                       "verify": (bundle_case, bundle_argv("verify")),
                       "serve": (serve_case, serve_argv)}[command]
    codes = fuzz(command, strategy, build, world, capsys)
    assert sum(codes.values()) == EXAMPLES[command]
    if command in ("predict", "route", "inspect", "verify"):
        assert codes[0] and codes[2], codes  # the strategy reaches answers and refusals
