"""Every file a bundle's manifest lists is there before anything is parsed, and a missing one is
named (issue 30, item 5); `check_bundle`, behind `laya-edge verify`, hashes every byte of every
file and names every problem (item 6). Real bundles on disk: the exported test bundles and the
shipped int8-only demo bundle."""
import json
import shutil
from pathlib import Path

import pytest

import laya_edge
from laya_edge import bundle_format as fmt
from laya_edge import bundle_source as src
from laya_edge import digest_cache
from laya_edge.bundle_report import check_bundle

ROOT = Path(__file__).resolve().parents[1]
SHIPPED_INT8 = ROOT / "models" / "demo-support-en"
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


@pytest.fixture
def fp32_copy(bundles, tmp_path):
    return Path(shutil.copytree(bundles["modernbert-tiny"], tmp_path / "fp32"))


@pytest.fixture
def int8_copy(tmp_path):
    """The shipped demo bundle (exported with --ship int8: no fp32 graph)."""
    return Path(shutil.copytree(SHIPPED_INT8, tmp_path / "int8"))


@pytest.fixture
def no_session(monkeypatch):
    """Fail the test if onnxruntime is asked to open a graph."""
    import onnxruntime

    def refuse(*args, **kwargs):
        raise AssertionError("onnxruntime opened a graph of a bundle missing a file")

    monkeypatch.setattr(onnxruntime, "InferenceSession", refuse)


@pytest.mark.parametrize("which", ["fp32", "int8"])
def test_a_deleted_weights_file_is_named_before_onnxruntime_opens_the_graph(
        which, fp32_copy, int8_copy, no_session):
    bundle, weights = ((fp32_copy, "laya.onnx.data") if which == "fp32" else
                       (int8_copy, "laya.int8.onnx.data"))
    (bundle / weights).unlink()
    with pytest.raises(FileNotFoundError) as raised:
        laya_edge.load(str(bundle))
    message = str(raised.value)
    assert repr(weights) in message and str(bundle) in message and fmt.MANIFEST in message


def test_the_missing_graph_of_an_int8_only_bundle_is_named(int8_copy, no_session):
    (int8_copy / "laya.int8.onnx").unlink()
    with pytest.raises(FileNotFoundError, match="ONNX model not found at 'laya.int8.onnx'"):
        laya_edge.load(str(int8_copy))


def test_every_missing_file_is_named_at_once(fp32_copy, no_session):
    for name in ("laya.onnx.data", "tokenizer/special_tokens_map.json"):
        (fp32_copy / name).unlink()
    with pytest.raises(FileNotFoundError) as raised:
        laya_edge.load(str(fp32_copy))
    assert "'laya.onnx.data', 'tokenizer/special_tokens_map.json'" in str(raised.value)


def test_a_complete_bundle_checks_clean(bundles):
    report = check_bundle(bundles["modernbert-tiny"])
    listed = fmt.read_manifest(bundles["modernbert-tiny"])["files"]
    assert report["ok"] and report["problems"] == [] and report["unlisted"] == []
    assert report["files"] == {name: "ok" for name in listed}


def flip_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


def test_check_bundle_names_every_problem(fp32_copy):
    flip_byte(fp32_copy / "laya.onnx")
    (fp32_copy / "laya.onnx.data").unlink()
    (fp32_copy / "notes.txt").write_text("added after export")
    manifest = json.loads((fp32_copy / fmt.MANIFEST).read_text())
    del manifest["files"]["tokenizer/tokenizer_config.json"]
    (fp32_copy / fmt.MANIFEST).write_text(json.dumps(manifest))
    report = check_bundle(fp32_copy)
    assert not report["ok"] and len(report["problems"]) == 3
    files = report["files"]
    assert "SHA-256 mismatch for 'laya.onnx'" in files["laya.onnx"]
    assert "missing 'laya.onnx.data'" in files["laya.onnx.data"]
    assert "'tokenizer/tokenizer_config.json' is not listed" in \
        files["tokenizer/tokenizer_config.json"]
    assert files["rl_agent_config.json"] == "ok" and report["unlisted"] == ["notes.txt"]


def test_check_bundle_hashes_every_byte_even_where_a_load_would_trust_its_records(
        bundles, monkeypatch):
    """A load trusts the digest records of unchanged files and hashes nothing the second time;
    verify reads every byte of every listed file."""
    bundle = bundles["minilm"]  # its weights are listed block by block
    monkeypatch.setattr(digest_cache, "SETTLE_NS", 0)
    source = src.resolve(str(bundle))
    src.verify(source, bundle / fmt.GRAPH, None)       # records every file's digests
    hashed: dict = {}
    whole, ranges = fmt.sha256_file, fmt._range_sha256

    def counting(path, *args, **kwargs):
        hashed[Path(path).name] = hashed.get(Path(path).name, 0) + Path(path).stat().st_size
        return whole(path, *args, **kwargs)

    def counting_range(path, start, length):
        size = min(length, Path(path).stat().st_size - start)
        hashed[Path(path).name] = hashed.get(Path(path).name, 0) + size
        return ranges(path, start, length)

    monkeypatch.setattr(fmt, "sha256_file", counting)
    monkeypatch.setattr(fmt, "_range_sha256", counting_range)
    src.verify(source, bundle / fmt.GRAPH, None)
    assert hashed == {}                                 # the load trusted its records
    assert check_bundle(bundle)["ok"]
    listed = fmt.read_manifest(bundle)["files"]
    assert hashed == {Path(name).name: entry["bytes"] for name, entry in listed.items()}


@pytest.mark.parametrize("content, named", [(b"\xff{", "is not UTF-8 text (byte 0xff"),
                                            (b"{not json", "is not valid JSON (line 1, column 2")])
def test_an_unreadable_manifest_is_named(fp32_copy, content, named):
    (fp32_copy / fmt.MANIFEST).write_bytes(content)
    with pytest.raises(ValueError) as raised:
        laya_edge.load(str(fp32_copy))
    assert named in str(raised.value) and repr(str(fp32_copy / fmt.MANIFEST)) in str(raised.value)
    assert check_bundle(fp32_copy)["problems"] == [str(raised.value)]
