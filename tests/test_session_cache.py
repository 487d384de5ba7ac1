"""The session cache: a CPU session's optimised graph and prepacked weights are written on the
first load and mapped by later ones, with the same answers; a changed, damaged or unwritable
entry only costs the speed-up; accelerators and unlisted graphs never use it."""
import json
import os
import shutil
import time
from pathlib import Path

import pytest

import laya_edge
from laya_edge import session_cache
from laya_edge.bundle_source import Source

BUNDLE = Path(__file__).resolve().parents[1] / "models" / "tiny-english"
QUESTIONS = {
    "team": {"type": "choice", "instructions": "Which team should answer?",
             "criteria": ["billing", "shipping", "technical"]},
    "urgent": {"type": "noul", "instructions": "The customer needs an answer today."},
    "anger": {"type": "score", "instructions": "How upset is the customer?",
              "criteria": ["calm", "annoyed", "angry"]},
}
STATES = ["My parcel has been stuck in transit for nine days.",
          "I was charged twice this month and want a refund today, this is unacceptable."]


def answers(agent):
    return agent.predict_batch(STATES, QUESTIONS)


def last_reason(agent):
    return agent.runtime_info()["reasons"][-1]


def entries(root):
    return sorted(path for path in root.iterdir() if not path.name.startswith("."))


@pytest.fixture(scope="module")
def uncached():
    return answers(laya_edge.load(str(BUNDLE), device="cpu", session_cache=False))


def test_first_load_writes_the_entry_and_later_loads_use_it(tmp_path, uncached):
    root = tmp_path / "sessions"
    first = laya_edge.load(str(BUNDLE), device="cpu", session_cache=str(root))
    assert last_reason(first).startswith("session cache: wrote")
    [entry] = entries(root)
    assert sorted(p.name for p in entry.iterdir()) == ["entry.json", "graph.onnx",
                                                        "graph.onnx.data"]
    second = laya_edge.load(str(BUNDLE), device="cpu", session_cache=str(root))
    assert last_reason(second) == ("session cache: optimised graph and prepacked weights from "
                                   f"{entry}")
    assert answers(first) == uncached
    assert answers(second) == uncached
    assert second.runtime_info()["graph"] == str(BUNDLE / "laya.onnx")


def test_the_cached_graph_holds_the_prepacked_weights(tmp_path):
    """The entry's external data is more than the bundle's weights: the packed copies."""
    root = tmp_path / "sessions"
    laya_edge.load(str(BUNDLE), device="cpu", session_cache=str(root))
    [entry] = entries(root)
    assert (entry / "graph.onnx.data").stat().st_size > (BUNDLE / "laya.onnx.data").stat().st_size


def test_an_entry_changed_after_it_was_written_is_not_used(tmp_path, uncached):
    root = tmp_path / "sessions"
    laya_edge.load(str(BUNDLE), device="cpu", session_cache=str(root))
    [entry] = entries(root)
    time.sleep(0.05)
    with open(entry / "graph.onnx.data", "ab") as handle:
        handle.write(b"\0")
    agent = laya_edge.load(str(BUNDLE), device="cpu", session_cache=str(root))
    assert last_reason(agent).startswith("session cache: wrote")
    assert answers(agent) == uncached
    assert session_cache.cached_graph(entry) == entry / "graph.onnx"


def test_a_damaged_entry_is_rebuilt(tmp_path, uncached):
    """An entry whose record matches but whose graph onnxruntime cannot load is written again."""
    root = tmp_path / "sessions"
    laya_edge.load(str(BUNDLE), device="cpu", session_cache=str(root))
    [entry] = entries(root)
    (entry / "graph.onnx").write_bytes(b"not a graph")
    session_cache._seal(entry)
    agent = laya_edge.load(str(BUNDLE), device="cpu", session_cache=str(root))
    reasons = agent.runtime_info()["reasons"]
    assert reasons[-2].startswith(f"session cache: entry {entry} failed to load")
    assert reasons[-1].startswith("session cache: wrote")
    assert answers(agent) == uncached
    again = laya_edge.load(str(BUNDLE), device="cpu", session_cache=str(root))
    assert last_reason(again).startswith("session cache: optimised graph")


@pytest.mark.parametrize("damage", ["no record", "bad json", "missing weights"])
def test_an_entry_without_a_matching_record_is_not_used(tmp_path, damage):
    root = tmp_path / "sessions"
    laya_edge.load(str(BUNDLE), device="cpu", session_cache=str(root))
    [entry] = entries(root)
    if damage == "no record":
        (entry / "entry.json").unlink()
    elif damage == "bad json":
        (entry / "entry.json").write_text("{", encoding="utf-8")
    else:
        (entry / "graph.onnx.data").unlink()
    assert session_cache.cached_graph(entry) is None


def test_an_unwritable_cache_only_costs_the_speed_up(tmp_path, uncached):
    root = tmp_path / "sessions"
    root.write_text("a file, not a directory", encoding="utf-8")
    agent = laya_edge.load(str(BUNDLE), device="cpu", session_cache=str(root))
    assert "is not writable" in last_reason(agent)
    assert answers(agent) == uncached


def test_a_failed_write_still_answers_and_leaves_no_partial_entry(tmp_path, uncached,
                                                                   monkeypatch):
    root = tmp_path / "sessions"

    def fail(entry_dir):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(session_cache, "_seal", fail)
    agent = laya_edge.load(str(BUNDLE), device="cpu", session_cache=str(root))
    assert "could not write" in last_reason(agent) and "No space left" in last_reason(agent)
    assert answers(agent) == uncached
    assert list(root.iterdir()) == []


def test_abandoned_partial_entries_are_removed(tmp_path):
    root = tmp_path / "sessions"
    key = "k" * 32
    old, fresh, other = root / f".{key}.old", root / f".{key}.fresh", root / ".other.old"
    for path in (old, fresh, other):
        path.mkdir(parents=True)
    stale = time.time() - session_cache.ABANDONED_S - 60
    os.utime(old, (stale, stale))
    os.utime(other, (stale, stale))
    session_cache._remove_abandoned(root, key)
    assert not old.exists() and fresh.exists() and other.exists()


def test_accelerator_sessions_do_not_use_the_cache_but_their_cpu_fallback_does(tmp_path):
    """A session asked to run on an accelerator is never cached; when the accelerator cannot run
    (this machine's onnxruntime has no CUDA) the plan falls back to an ordinary CPU session,
    which is cached like any other."""
    root = tmp_path / "sessions"
    with pytest.warns(RuntimeWarning, match="CUDAExecutionProvider is not offered"):
        agent = laya_edge.load(str(BUNDLE), session_cache=str(root),
                               providers=["CUDAExecutionProvider", "CPUExecutionProvider"])
    assert agent.runtime_info()["device"] == "cpu"
    assert any("cache" in reason for reason in agent.runtime_info()["reasons"])
    assert [entry.name for entry in root.iterdir()]


def test_a_graph_outside_a_bundle_is_not_cached(tmp_path, checkpoints):
    """A checkpoint plus a graph named by `onnx_path` has no manifest digest to key on."""
    root = tmp_path / "sessions"
    graph = tmp_path / "graph"
    graph.mkdir()
    for name in ("laya.onnx", "laya.onnx.data"):
        shutil.copy(BUNDLE / name, graph / name)
    agent = laya_edge.load(str(checkpoints["modernbert-tiny"]), device="cpu",
                           onnx_path=str(graph / "laya.onnx"), session_cache=str(root))
    assert not last_reason(agent).startswith("session cache")
    assert not root.exists()


def test_the_key_follows_graph_optimisers_onnxruntime_and_cpu(monkeypatch):
    import onnxruntime

    base = session_cache.entry_key("a" * 64, ["SkipLayerNormFusion"])
    assert session_cache.entry_key("a" * 64, ["SkipLayerNormFusion"]) == base
    assert session_cache.entry_key("b" * 64, ["SkipLayerNormFusion"]) != base
    assert session_cache.entry_key("a" * 64, []) != base
    monkeypatch.setattr(onnxruntime, "__version__", "0.0.1")
    assert session_cache.entry_key("a" * 64, ["SkipLayerNormFusion"]) != base
    monkeypatch.undo()
    monkeypatch.setattr(session_cache, "_cpu_description", lambda: "another cpu")
    assert session_cache.entry_key("a" * 64, ["SkipLayerNormFusion"]) != base


def test_the_cpu_description_names_the_instruction_set():
    description = session_cache._cpu_description()
    if os.path.exists("/proc/cpuinfo"):
        fields = json.loads(description)
        assert fields.get("flags") or fields.get("Features")


@pytest.mark.parametrize("setting, environment, expected", [
    (None, None, None), (None, "", None), (None, "off", None),
    (None, "on", "~/.cache/laya_edge/sessions"), (None, "/srv/cache", "/srv/cache"),
    (True, "off", "~/.cache/laya_edge/sessions"), (False, "/srv/cache", None),
    ("/elsewhere", "off", "/elsewhere"), (Path("/p"), None, "/p"),
])
def test_cache_root_settings(monkeypatch, setting, environment, expected):
    if environment is None:
        monkeypatch.delenv(session_cache.ENVIRONMENT, raising=False)
    else:
        monkeypatch.setenv(session_cache.ENVIRONMENT, environment)
    wanted = None if expected is None else Path(os.path.expanduser(expected))
    assert session_cache.cache_root(setting) == wanted


def test_windows_keeps_no_entries(monkeypatch):
    monkeypatch.setattr(session_cache.os, "name", "nt")
    assert session_cache.cache_root(True) is None


@pytest.mark.parametrize("setting", [3, "", "  ", b"/bytes"])
def test_bad_settings_are_refused_on_every_platform(monkeypatch, setting):
    with pytest.raises(ValueError, match="session_cache must be"):
        session_cache.cache_root(setting)
    monkeypatch.setattr(session_cache.os, "name", "nt")
    with pytest.raises(ValueError, match="session_cache must be"):
        session_cache.cache_root(setting)


def test_a_bad_setting_is_refused_before_anything_is_loaded(monkeypatch):
    def no_session(*args, **kwargs):
        raise AssertionError("a session was created")

    monkeypatch.setattr("laya_edge.onnx_agent.create_session", no_session)
    with pytest.raises(ValueError, match="session_cache must be"):
        laya_edge.load(str(BUNDLE), device="cpu", session_cache=3)


def test_the_graph_digest_covers_the_external_weights(tmp_path):
    """Two bundles of one architecture share the graph file (it holds only offsets into the
    sidecar); their digests, which key this cache and TensorRT's, must still differ."""
    (tmp_path / "laya.onnx").write_bytes(b"graph")
    (tmp_path / "laya.onnx.data").write_bytes(b"weights")

    def digest(weights_sha):
        manifest = {"files": {"laya.onnx": {"sha256": "1" * 64},
                              "laya.onnx.data": {"sha256": weights_sha}}}
        return Source(tmp_path, manifest, {}, None).graph_sha256(tmp_path / "laya.onnx")

    assert digest("2" * 64) != digest("3" * 64)
    assert len(digest("2" * 64)) == 64
    assert digest("") == ""
    (tmp_path / "laya.onnx.data").unlink()
    assert digest("2" * 64) == "1" * 64
