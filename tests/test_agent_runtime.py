"""ONNXAgent construction, drop-in compatibility, bundle integrity, a torch-free process and
thread safety (docs/design/bundle-format.md).

Load-time errors and warnings are compared with upstream laya 0.4.15's ONNXAgent where upstream
has the same rule; where laya_edge deliberately differs (docs/design/upstream-differences.md: the
missing-graph text names `python -m laya_edge.export`; the temperature check) our text is
asserted.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any, List

import pytest

from agent_support import (assert_identical, edge_agent, outcome, quietly,
                           upstream_on_our_kernels, upstream_onnx_agent)

REPO = Path(__file__).resolve().parents[1]
KIND = "modernbert-tiny"
QUESTIONS = {
    "dept": {"type": "choice", "instructions": "Which team should handle this ticket?",
             "criteria": ["billing", "tech", "sales"]},
    "urgent": {"type": "noul", "instructions": "Is this urgent?"},
    "sev": {"type": "score", "instructions": "How severe?", "criteria": ["low", "mid", "high"]},
}
STATE = "My invoice was charged twice this month."


@pytest.fixture(scope="module")
def bundle(bundles):
    return bundles[KIND]


@pytest.fixture(scope="module")
def checkpoint(checkpoints):
    return checkpoints[KIND]


@pytest.fixture(scope="module")
def reference(bundle):
    """Upstream's ONNXAgent on the bundle, and its answers to the reference call."""
    agent = upstream_onnx_agent(bundle)
    return agent, agent.system_one(STATE, QUESTIONS)


@pytest.fixture
def bundle_copy(bundle, tmp_path):
    target = tmp_path / "bundle"
    shutil.copytree(bundle, target)
    return target


def checkpoint_copy(checkpoint: Path, target: Path, edit=None) -> Path:
    """A checkpoint directory (config + tokenizer, no manifest), its config edited."""
    target.mkdir(parents=True)
    shutil.copy(checkpoint / "rl_agent_config.json", target)
    shutil.copytree(checkpoint / "tokenizer", target / "tokenizer")
    if edit is not None:
        config = json.loads((target / "rl_agent_config.json").read_text())
        edit(config)
        (target / "rl_agent_config.json").write_text(json.dumps(config))
    return target


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def load_both(path, **kwargs):
    """`(ours, upstream)` outcomes of constructing an ONNXAgent with the same arguments."""
    import laya_edge
    from laya.onnx_agent import ONNXAgent as Upstream

    return (outcome(lambda: laya_edge.ONNXAgent(str(path), **kwargs)),
            outcome(lambda: Upstream(str(path), **kwargs)))


# -- construction and the drop-in surface -------------------------------------------------------

def test_load_returns_an_onnx_agent_and_agent_is_an_alias(bundle, reference):
    import laya_edge
    from laya_edge.onnx_agent import ONNXAgent

    agent = quietly(lambda: laya_edge.load(str(bundle)))
    assert type(agent) is laya_edge.ONNXAgent is ONNXAgent
    assert laya_edge.Agent is laya_edge.ONNXAgent
    assert agent.model_id == str(bundle) and agent.hooks == []
    assert agent.predict is not None and ONNXAgent.predict is ONNXAgent.system_one
    assert_identical(agent.system_one(STATE, QUESTIONS), reference[1])
    by_path = quietly(lambda: laya_edge.load(bundle))          # a Path works too
    assert_identical(by_path.system_one(STATE, QUESTIONS), reference[1])


def test_load_takes_the_constructor_options(bundle):
    import laya_edge

    seen = []
    agent = quietly(lambda: laya_edge.load(str(bundle), on_predict_end=seen.append,
                                           hooks_raise=False, hooks_timeout=2.5,
                                           hooks_concurrent=False, device="cpu"))
    assert (agent.hooks_raise, agent.hooks_timeout, agent.hooks_concurrent) == (False, 2.5, False)
    agent.system_one(STATE, QUESTIONS)
    assert len(seen) == 1 and seen[0].agent is agent
    assert agent.session.get_providers() == ["CPUExecutionProvider"]


def upstream_style_program(laya, path, graph):
    """Code written for upstream laya, run unchanged with either module bound to `laya`
    (`from laya.onnx_agent import ONNXAgent`; upstream has no top-level `laya.ONNXAgent`)."""
    import importlib

    ONNXAgent = importlib.import_module(f"{laya.__name__}.onnx_agent").ONNXAgent
    agent = ONNXAgent(path, onnx_path=graph)
    one = agent.system_one(STATE, QUESTIONS)
    same = agent.predict(STATE, QUESTIONS)
    batch = agent.predict_batch([STATE, "The app crashes."], QUESTIONS, batch_size=1)
    long = agent.predict_long(STATE, QUESTIONS)
    decision = one["answers"]["dept"]["choice"]
    return {"one": one, "same": same, "batch": batch, "long": long, "decision": decision}


def test_code_written_for_upstream_runs_with_laya_edge(bundle):
    import laya
    import laya_edge

    graph = str(bundle / "laya.onnx")
    ours = quietly(lambda: upstream_style_program(laya_edge, str(bundle), graph))
    with upstream_on_our_kernels():
        theirs = quietly(lambda: upstream_style_program(laya, str(bundle), graph))
    assert_identical(ours, theirs)
    # and the other spellings of loading it
    import laya_edge as laya_alias
    for build in (lambda: laya_alias.load(str(bundle), device="cpu"),
                  lambda: laya_alias.ONNXAgent(str(bundle), onnx_path=graph),
                  lambda: laya_alias.Agent(str(bundle))):
        assert_identical(quietly(build).system_one(STATE, QUESTIONS), ours["one"])


def test_checkpoint_directory_with_a_graph_exported_elsewhere(checkpoint, bundle, tmp_path,
                                                              reference, monkeypatch):
    """Upstream-style: the checkpoint (config + tokenizer) plus `onnx_path` to a graph."""
    elsewhere = tmp_path / "graphs"
    elsewhere.mkdir()
    shutil.copy(bundle / "laya.onnx", elsewhere / "model.onnx")
    # the weights travel with the graph, under the name the graph gives them
    shutil.copy(bundle / "laya.onnx.data", elsewhere / "laya.onnx.data")
    ours = edge_agent(checkpoint, onnx_path=str(elsewhere / "model.onnx"))
    assert ours.manifest is None
    assert_identical(ours.system_one(STATE, QUESTIONS), reference[1])
    # a relative onnx_path is looked up in the directory first, then in the working directory
    monkeypatch.chdir(elsewhere)
    relative = edge_agent(checkpoint, onnx_path="model.onnx")
    assert relative.graph_path.resolve() == (elsewhere / "model.onnx").resolve()
    inside = edge_agent(bundle, onnx_path="laya.onnx")
    assert inside.graph_path.resolve() == (bundle / "laya.onnx").resolve()


def test_missing_graph(checkpoint, bundle_copy, tmp_path):
    ours, theirs = load_both(checkpoint)
    assert ours[:3] == (
        "error", FileNotFoundError,
        "ONNX model not found at 'laya.onnx'. Please run python -m laya_edge.export first.")
    # upstream names its own export script here (docs/design/upstream-differences.md#wording)
    assert theirs[:3] == ("error", FileNotFoundError,
                          "ONNX model not found at 'laya.onnx'. Please run export_onnx.py first.")
    missing = str(tmp_path / "nowhere.onnx")
    ours, _ = load_both(checkpoint, onnx_path=missing)
    assert ours[:3] == ("error", FileNotFoundError, f"ONNX model not found at {missing!r}. "
                                                    "Please run python -m laya_edge.export first.")
    (bundle_copy / "laya.onnx").unlink()                        # a bundle without its graph
    ours, _ = load_both(bundle_copy)
    assert ours[:3] == (
        "error", FileNotFoundError,
        "ONNX model not found at 'laya.onnx'. Please run python -m laya_edge.export first.")


@pytest.mark.parametrize("path", ["./no/such/bundle", "../no-such-bundle", "/no/such/bundle"])
def test_missing_local_path(path):
    ours, theirs = load_both(path)
    assert ours[:3] == ("error", FileNotFoundError, f"Local model path not found: {path!r}.")
    assert ours[:3] == theirs[:3]


def test_missing_subfolder(bundle):
    ours, theirs = load_both(bundle.parent, subfolder="no-such-kind")
    assert ours[:3] == ("error", FileNotFoundError,
                        f"Subfolder 'no-such-kind' not found in {str(bundle.parent)!r}.")
    assert ours[:3] == theirs[:3]
    assert_identical(edge_agent(bundle.parent, subfolder=bundle.name).system_one(STATE, QUESTIONS),
                     edge_agent(bundle).system_one(STATE, QUESTIONS))


def test_missing_config(tmp_path, bundle_copy):
    empty = tmp_path / "empty"
    empty.mkdir()
    ours, theirs = load_both(empty, onnx_path=str(bundle_copy / "laya.onnx"))
    assert ours[:3] == ("error", FileNotFoundError,
                        f"Incompatible model: {str(empty)!r} does not contain "
                        "'rl_agent_config.json'.")
    assert ours[:3] == theirs[:3]
    (bundle_copy / "rl_agent_config.json").unlink()
    ours, _ = load_both(bundle_copy)
    assert ours[:3] == ("error", FileNotFoundError,
                        f"Incompatible model: {str(bundle_copy)!r} does not contain "
                        "'rl_agent_config.json'.")


def test_option_layout_parallel_is_refused(checkpoint, bundle, tmp_path):
    directory = checkpoint_copy(checkpoint, tmp_path / "parallel",
                                lambda config: config.update(option_layout="parallel"))
    ours, theirs = load_both(directory, onnx_path=str(bundle / "laya.onnx"))
    assert ours[:3] == ("error", ValueError,
                        "option_layout='parallel' is not supported by the ONNX runtime; load this "
                        "checkpoint with laya.Agent")
    assert ours[:3] == theirs[:3]
    sequential = checkpoint_copy(checkpoint, tmp_path / "sequential",
                                 lambda config: config.update(option_layout="sequential"))
    assert load_both(sequential, onnx_path=str(bundle / "laya.onnx"))[0][0] == "ok"


@pytest.mark.parametrize("temperature", [[1.0, 2.0], "1.0", 1.5, [1, 2, 3, 4]])
def test_temperature_must_be_a_three_list(checkpoint, bundle, tmp_path, temperature):
    """A laya_edge decision (docs/design/upstream-differences.md): upstream's ONNX runtime skips
    this check; its torch
    Agent refuses the same config with the same text."""
    directory = checkpoint_copy(checkpoint, tmp_path / "ckpt",
                                lambda config: config.update(temperature=temperature))
    ours, theirs = load_both(directory, onnx_path=str(bundle / "laya.onnx"))
    assert ours[:3] == ("error", ValueError,
                        f"Incompatible model: {str(directory)!r} temperature must be a list of 3 "
                        f"floats, got {temperature!r}")
    shutil.copy(checkpoint / "model.safetensors", directory)
    shutil.copytree(checkpoint / "encoder", directory / "encoder")
    import laya
    torch_outcome = outcome(lambda: laya.load(str(directory), device="cpu"))
    assert torch_outcome[:3] == ours[:3]


def test_clamp_warning_equals_upstream(bundle):
    """docs/design/bundle-format.md#temperatures-at-load, on the test checkpoint that ships
    choice:11+ = 0.1."""
    ours, theirs = load_both(bundle, onnx_path=str(bundle / "laya.onnx"))
    assert ours[-1] == theirs[-1] == [
        (RuntimeWarning, "laya ONNX: this checkpoint ships temperatures outside [0.5, 5] which "
                         "would distort confidence; clamping choice:11+=0.10058280825614929 -> "
                         "0.5. Treat confidence from the affected buckets as uncalibrated.")]


def test_clamping_of_unusable_temperatures_equals_upstream(checkpoint, bundle, tmp_path):
    def edit(config):
        config["temperature"] = [True, "warm", float("nan")]
        config["temperature_by_options"] = {"choice:2": 9, "choice:3-5": "1.5",
                                            "noul:2": float("-inf"), "score:3-5": 1e-9,
                                            "choice:11+": 0.75}

    directory = checkpoint_copy(checkpoint, tmp_path / "ckpt", edit)
    ours, theirs = load_both(directory, onnx_path=str(bundle / "laya.onnx"))
    assert ours[0] == theirs[0] == "ok"
    assert ours[-1] == theirs[-1] and len(ours[-1]) == 1
    assert ours[-1][0][1] == (
        "laya ONNX: this checkpoint ships temperatures outside [0.5, 5] which would distort "
        "confidence; clamping choice:2=9 -> 5, noul:2=-inf -> 1, score:3-5=1e-09 -> 0.5, "
        "temperature[0]=True -> 1, temperature[1]='warm' -> 1, temperature[2]=nan -> 1. Treat "
        "confidence from the affected buckets as uncalibrated.")
    assert ours[1].temperatures.temperature == theirs[1].temperature
    assert ours[1].temperatures.temperature_by_options == theirs[1].temperature_by_options
    questions = {**QUESTIONS,
                 "two": {"type": "choice", "instructions": "x", "criteria": ["a", "b"]},
                 "four": {"type": "choice", "instructions": "y", "criteria": list("abcd")}}
    assert_identical(ours[1].predict_batch([STATE, "other"], questions),
                     theirs[1].predict_batch([STATE, "other"], questions))


LANG_ERRORS = [
    ({1: {"temperature": [1, 1, 1]}}, "Language override keys must be strings, got 1"),
    ({"de": [1.0, 1.0, 1.0]}, "Language override 'de' must be a mapping, got list"),
    ({"de": {"temperature": [1.0, 2.0]}},
     "Language override 'de' temperature must be a list of 3 floats, got [1.0, 2.0]"),
    ({"de": {"temperature": "hot"}},
     "Language override 'de' temperature must be a list of 3 floats, got 'hot'"),
    ({"de": {"temperature_by_options": [("choice:2", 1.0)]}},
     "Language override 'de' temperature_by_options must be a mapping of bucket -> float, got "
     "list"),
]


@pytest.mark.parametrize("overrides,message", LANG_ERRORS)
def test_lang_temperature_errors_equal_upstream(bundle, overrides, message):
    ours, theirs = load_both(bundle, onnx_path=str(bundle / "laya.onnx"),
                             lang_temperatures=overrides)
    assert ours[:3] == ("error", ValueError, message)
    assert ours[:3] == theirs[:3]


def test_lang_temperature_warnings_and_resolution_equal_upstream(bundle):
    overrides = {"de-AT": {"temperature": [0.1, True, "x"],
                           "temperature_by_options": {"choice:2": 99, "noul:2": 1.25}},
                 "FR": None,
                 "es": {"temperature": None, "temperature_by_options": {"noul:2": 0.2}},
                 "it": {"temperature": (1.5, 2, 2.5)}}
    ours, theirs = load_both(bundle, onnx_path=str(bundle / "laya.onnx"),
                             lang_temperatures=overrides)
    assert ours[0] == theirs[0] == "ok"
    language_warnings = [w for w in ours[-1] if "language override" in w[1]]
    assert language_warnings == [w for w in theirs[-1] if "language override" in w[1]]
    assert language_warnings == [
        (RuntimeWarning, "laya: language override 'de-AT' ships invalid temperatures or values "
                         "outside [0.5, 5]; using temperature[0]=0.1 -> 0.5, temperature[1]=True "
                         "-> 1, temperature[2]='x' -> 1, choice:2=99 -> 5. Treat confidence from "
                         "the affected entries as uncalibrated."),
        (RuntimeWarning, "laya: language override 'es' ships invalid temperatures or values "
                         "outside [0.5, 5]; using noul:2=0.2 -> 0.5. Treat confidence from the "
                         "affected entries as uncalibrated.")]
    assert ours[1].lang_temperatures == theirs[1].lang_temperatures
    assert sorted(ours[1].lang_temperatures) == ["de", "es", "fr", "it"]
    for lang in ("de", "de-CH", "fr", "ES", "it", "de_AT", None):
        assert_identical(ours[1].predict_batch([STATE], QUESTIONS, lang=lang),
                         theirs[1].predict_batch([STATE], QUESTIONS, lang=lang))
    plain = edge_agent(bundle)
    assert plain.lang_temperatures == {} and not plain.lang_temperatures


# -- bundle integrity ------------------------------------------------------------------------------

@pytest.fixture
def nothing_parsed(monkeypatch):
    """Fail the test if the graph or the tokenizer is parsed."""
    import onnxruntime
    import tokenizers

    def refuse(*args, **kwargs):
        raise AssertionError("a file was parsed before its digest was checked")

    monkeypatch.setattr(onnxruntime, "InferenceSession", refuse)
    monkeypatch.setattr(tokenizers.Tokenizer, "from_file", refuse)


def flip_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("relative", ["laya.onnx", "laya.onnx.data", "rl_agent_config.json",
                                      "tokenizer/tokenizer.json",
                                      "tokenizer/tokenizer_config.json",
                                      "tokenizer/special_tokens_map.json"])
def test_a_flipped_byte_is_refused_before_parsing(bundle_copy, nothing_parsed, relative):
    flip_byte(bundle_copy / relative)
    import laya_edge

    with pytest.raises(ValueError) as raised:
        laya_edge.load(str(bundle_copy))
    message = str(raised.value)
    assert f"SHA-256 mismatch for {relative!r}" in message
    assert str(bundle_copy) in message and "refusing to load it" in message


def test_a_flipped_byte_in_a_block_checked_file_is_refused(bundles, tmp_path, nothing_parsed):
    """MiniLM's weights are listed block by block; a change anywhere in them is refused."""
    copy = tmp_path / "minilm"
    shutil.copytree(bundles["minilm"], copy)
    entry = json.loads((copy / "laya_edge.json").read_text())["files"]["laya.onnx.data"]
    assert len(entry["blocks"]) > 1
    flip_byte(copy / "laya.onnx.data")
    import laya_edge

    with pytest.raises(ValueError, match=r"SHA-256 mismatch for 'laya.onnx.data' \(block \d+ "
                                         rf"of {len(entry['blocks'])}: .*refusing to load it"):
        laya_edge.load(str(copy), precision="fp32")


def test_an_intact_copy_loads(bundle_copy, reference):
    """The copies the integrity tests tamper with load fine untouched."""
    assert_identical(edge_agent(bundle_copy).system_one(STATE, QUESTIONS), reference[1])


def test_a_newer_manifest_format_is_refused(bundle_copy, nothing_parsed):
    manifest = json.loads((bundle_copy / "laya_edge.json").read_text())
    manifest["format_version"] = 2
    (bundle_copy / "laya_edge.json").write_text(json.dumps(manifest))
    import laya_edge

    with pytest.raises(ValueError, match=r"uses format version 2, newer than this laya_edge "
                                         r"understands \(1\); upgrade laya_edge"):
        laya_edge.load(str(bundle_copy))


def test_an_unlisted_file_is_refused(bundle_copy, nothing_parsed):
    manifest = json.loads((bundle_copy / "laya_edge.json").read_text())
    del manifest["files"]["tokenizer/tokenizer.json"]
    (bundle_copy / "laya_edge.json").write_text(json.dumps(manifest))
    import laya_edge

    with pytest.raises(ValueError, match="'tokenizer/tokenizer.json' is not listed in "
                                         "laya_edge.json; refusing to load an unlisted file"):
        laya_edge.load(str(bundle_copy))


def test_expected_sha256_behaves_as_upstream(bundle, bundle_copy):
    graph = str(bundle / "laya.onnx")
    good = {"rl_agent_config.json": sha256(bundle / "rl_agent_config.json"),
            "tokenizer/tokenizer.json": sha256(bundle / "tokenizer" / "tokenizer.json").upper(),
            "onnx": " " + sha256(bundle / "laya.onnx") + " "}
    ours, theirs = load_both(bundle, onnx_path=graph, expected_sha256=good)
    assert ours[0] == theirs[0] == "ok"
    assert_identical(ours[1].system_one(STATE, QUESTIONS), theirs[1].system_one(STATE, QUESTIONS))
    assert edge_agent(bundle, expected_sha256=good).graph_path == bundle / "laya.onnx"

    wrong = "0" * 64
    cases = [
        ({"rl_agent_config.json": wrong}, ValueError,
         f"laya: SHA-256 mismatch for rl_agent_config.json: expected {wrong}, got "
         f"{sha256(bundle / 'rl_agent_config.json')}. The artifact does not match the reviewed "
         "digest; refusing to load it."),
        ({"onnx": wrong}, ValueError,
         f"laya: SHA-256 mismatch for onnx: expected {wrong}, got {sha256(bundle / 'laya.onnx')}. "
         "The artifact does not match the reviewed digest; refusing to load it."),
        ({"tokenizer/vocab.txt": wrong}, FileNotFoundError,
         f"laya: cannot verify 'tokenizer/vocab.txt': no such file under {bundle}"),
        ({"../x": wrong}, ValueError, "laya: unsafe path in expected digests: '../x'"),
        ({"a/../../x": wrong}, ValueError, "laya: unsafe path in expected digests: 'a/../../x'"),
        ({"/etc/passwd": wrong}, ValueError,
         "laya: unsafe absolute path in expected digests: '/etc/passwd'"),
        (["not", "a", "dict"], ValueError,
         "expected_sha256 must be a mapping of artifact paths to digests"),
    ]
    for expected, error, message in cases:
        ours, theirs = load_both(bundle, onnx_path=graph, expected_sha256=expected)
        assert ours[:3] == ("error", error, message), expected
        assert ours[:3] == theirs[:3], expected


def test_expected_sha256_is_checked_before_parsing(bundle, nothing_parsed):
    import laya_edge

    with pytest.raises(ValueError, match="SHA-256 mismatch for onnx"):
        laya_edge.load(str(bundle), expected_sha256={"onnx": "0" * 64})


def test_the_integrity_check_hashes_every_byte_it_loads(bundles, monkeypatch, capsys):
    """Loading hashes config, tokenizer files, the graph and its weights' sidecar, every byte of
    each exactly once (whole, or block by block), and nothing else; the cost is printed. Digest
    records are off: with them a second load hashes nothing (tests/test_digest_cache.py)."""
    from laya_edge import bundle_format as fmt
    from laya_edge import digest_cache
    from laya_edge import bundle_source as src

    monkeypatch.setenv(digest_cache.ENVIRONMENT, "off")

    hashed: dict = {}
    whole, ranges = fmt.sha256_file, fmt._range_sha256

    def counting(path, *args, **kwargs):
        hashed[Path(path)] = hashed.get(Path(path), 0) + Path(path).stat().st_size
        return whole(path, *args, **kwargs)

    def counting_range(path, start, length):
        covered = min(length, Path(path).stat().st_size - start)
        hashed[Path(path)] = hashed.get(Path(path), 0) + covered
        return ranges(path, start, length)

    lines = []
    for kind, path in sorted(bundles.items()):
        manifest = fmt.read_manifest(path)
        graph = manifest["variants"]["fp32"]["files"]
        assert graph == [fmt.GRAPH, fmt.sidecar(fmt.GRAPH)]
        source = src.resolve(str(path))
        src.verify(source, path / fmt.GRAPH, None)                  # warm the page cache
        hashed.clear()
        monkeypatch.setattr(fmt, "sha256_file", counting)
        monkeypatch.setattr(fmt, "_range_sha256", counting_range)
        start = time.perf_counter()
        src.verify(source, path / fmt.GRAPH, None)
        check = time.perf_counter() - start
        monkeypatch.setattr(fmt, "sha256_file", whole)
        monkeypatch.setattr(fmt, "_range_sha256", ranges)
        expected = {name: (path / name).stat().st_size for name in manifest["files"]
                    if name.startswith("tokenizer/") or name == fmt.CONFIG or name in graph}
        assert {p.relative_to(path).as_posix(): n for p, n in hashed.items()} == expected
        size = sum(expected.values())
        start = time.perf_counter()
        quietly(lambda: edge_agent(path))
        load = time.perf_counter() - start
        lines.append(f"{kind}: {size / 1e6:.1f} MB hashed in {check * 1000:.1f} ms "
                     f"({size / 1e6 / max(check, 1e-9):.0f} MB/s), {check / load:.0%} of a "
                     f"{load * 1000:.0f} ms load")
    with capsys.disabled():
        print("\n[sha256 check on load] " + "; ".join(lines))


# -- a torch-free process ----------------------------------------------------------------------

TORCH_FREE = textwrap.dedent('''
    import importlib.abc
    import json
    import sys
    import warnings

    BLOCKED = ("torch", "transformers")


    class Refuse(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in BLOCKED:
                raise ImportError(f"{name} is not allowed in this process")
            return None


    sys.meta_path.insert(0, Refuse())
    for name in BLOCKED:
        try:
            __import__(name)
        except ImportError:
            pass
        else:
            raise SystemExit(f"the import blocker let {name} through")

    warnings.simplefilter("ignore", RuntimeWarning)
    import laya_edge

    agent = laya_edge.load(sys.argv[1])
    questions = json.loads(sys.argv[2])
    result = agent.system_one(sys.argv[3], questions)
    long = agent.predict_long(sys.argv[3] * 40, questions, window=64)
    print(json.dumps({"result": result, "long_windows": long["usage"]["windows"],
                      "loaded": sorted(name for name in ("torch", "transformers",
                                                         "huggingface_hub", "safetensors")
                                       if name in sys.modules)}))
''')


def test_a_full_predict_runs_where_torch_and_transformers_cannot_be_imported(bundle, tmp_path):
    script = tmp_path / "torch_free.py"
    script.write_text(TORCH_FREE)
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run([sys.executable, str(script), str(bundle), json.dumps(QUESTIONS), STATE],
                          capture_output=True, text=True, env=env, cwd=str(tmp_path), timeout=120)
    assert done.returncode == 0, done.stderr
    printed = json.loads(done.stdout)
    assert printed["loaded"] == []
    assert printed["long_windows"] > 1
    expected = json.loads(json.dumps(edge_agent(bundle).system_one(STATE, QUESTIONS)))
    assert printed["result"] == expected


def test_the_import_blocker_really_blocks(tmp_path):
    """The subprocess above would not prove anything if the finder let torch through."""
    script = tmp_path / "blocked.py"
    script.write_text(TORCH_FREE.split("warnings.simplefilter")[0]
                      + "import torch\n")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode != 0
    assert "ImportError: torch is not allowed in this process" in done.stderr


# -- concurrency -------------------------------------------------------------------------------

THREADS, CALLS_PER_THREAD = 8, 200


class Counter:
    """An installed hook: counts events under its own lock and checks each context's state."""

    def __init__(self):
        self.lock = threading.Lock()
        self.started = self.ended = 0
        self.mismatches: List[str] = []

    def on_predict_start(self, ctx):
        with self.lock:
            self.started += 1
        ctx.tag = (threading.get_ident(), len(ctx.states))

    def on_predict_end(self, ctx):
        with self.lock:
            self.ended += 1
            if getattr(ctx, "tag", None) is None or ctx.tag[0] != threading.get_ident():
                self.mismatches.append(ctx.run_id)


def shrink_budget(ctx):
    ctx.max_len, ctx.head_max_len = 64, 24


def call_table(kind_mask: str) -> List[Any]:
    """Mixed calls: (description, function of an agent). Each has one right answer."""
    states = ["My invoice was charged twice this month.", "The app crashes when I open settings.",
              {"subject": "refund", "amount": 12.5}, ["hi", "please cancel my plan"],
              f"ignore {kind_mask} this", "", "日本語のテキスト 😀"]
    question_sets = [
        QUESTIONS,
        {"n": {"type": "noul", "instructions": "Spam?", "labels": {"false": "ok", "true": "spam"}}},
        {0: {"type": "choice", "instructions": "Which?", "criteria": {"a": 1, 2: "b", True: None},
             "option_order": [2, 0, 1]}},
        {"s": {"type": "score", "instructions": "Rate", "criteria": [[1], {"x": 2}, 3, "four"]}},
    ]
    long_state = " ".join(f"line {i} of a long complaint about billing" for i in range(30))
    table = []
    for i, questions in enumerate(question_sets):
        table.append(lambda a, s=states[i], q=questions: a.system_one(s, q))
        table.append(lambda a, q=questions: a.predict_batch(states, q))
        table.append(lambda a, q=questions: a.predict_batch(states[::-1], q, batch_size=2,
                                                            sort_by_length=True))
        table.append(lambda a, q=questions: a.predict_batch(states[:3], q,
                                                            on_predict_start=shrink_budget))
        table.append(lambda a, q=questions: a.system_one(states[4], q, min_confidence=0.6))
        table.append(lambda a, q=questions: a.predict_long(long_state, q, window=64))
    table.append(lambda a: a.predict_batch([], QUESTIONS))
    table.append(lambda a: a.predict_batch(states, {}))
    return table


def test_threads_get_exactly_the_serial_answers(bundle):
    counter = Counter()
    agent = edge_agent(bundle, hooks=[counter])
    table = call_table(agent.encoder.mask.text)
    serial = [call(agent) for call in table]
    serial_repr = [repr(answer) for answer in serial]     # key order and key types included
    counter.started = counter.ended = 0
    failures: List[str] = []
    done = []

    def worker(thread: int):
        try:
            for n in range(CALLS_PER_THREAD):
                index = (thread * 7 + n * 3) % len(table)
                if repr(table[index](agent)) != serial_repr[index]:
                    failures.append(f"thread {thread} call {n} (table {index})")
        except Exception as exc:                          # noqa: BLE001 -- reported below
            failures.append(f"thread {thread}: {exc!r}")
        done.append(thread)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(THREADS)]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    took = time.perf_counter() - start
    assert sorted(done) == list(range(THREADS)), f"threads still running after {took:.0f} s"
    assert failures == []
    total = THREADS * CALLS_PER_THREAD
    assert counter.started == counter.ended == total
    assert counter.mismatches == []
    print(f"{total} concurrent calls in {took:.1f} s")
