"""Digest records: an unchanged bundle file is hashed once, any change to it is hashed (and
refused) again, and a missing, damaged or unwritable record only costs a hash."""
import json
import os
import time

import pytest

from laya_edge import bundle_format as fmt
from laya_edge import digest_cache
from laya_edge.bundle_source import verify_expected

BLOCK = 16 << 10


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """Records in a fresh directory; a file counts as settled at once (the settle delay has its
    own test), so a check right after writing a file may record it."""
    root = tmp_path / "digests"
    monkeypatch.setenv(digest_cache.ENVIRONMENT, str(root))
    monkeypatch.setattr(digest_cache, "SETTLE_NS", 0)
    return root


@pytest.fixture
def hashes(monkeypatch):
    """How many times a whole file or a block was hashed."""
    counts = {"files": 0, "blocks": 0}
    whole, block = fmt.sha256_file, fmt._range_sha256

    def count_file(*args, **kwargs):
        counts["files"] += 1
        return whole(*args, **kwargs)

    def count_block(*args):
        counts["blocks"] += 1
        return block(*args)

    monkeypatch.setattr(fmt, "sha256_file", count_file)
    monkeypatch.setattr(fmt, "_range_sha256", count_block)
    return counts


@pytest.fixture
def bundle_dir(tmp_path, monkeypatch):
    """A small config and a 100 KiB weights file listed block by block (7 blocks)."""
    monkeypatch.setattr(fmt, "BLOCK_BYTES", BLOCK)
    root = tmp_path / "bundle"
    root.mkdir()
    (root / "config.json").write_text('{"max_len": 512}', encoding="utf-8")
    (root / "laya.onnx.data").write_bytes(bytes(range(256)) * 400)
    return root


def manifest_of(root):
    return {"files": fmt.digests(root, ["config.json", "laya.onnx.data"], blocks=True)}


def rewrite_in_place(path, data):
    """Write `data` over `path` and return only once its stat differs from before: writes
    inside one timestamp tick of the file's last change are what the settle delay is for."""
    before = digest_cache.look_up(path).signature
    time.sleep(0.05)
    with open(path, "r+b") as handle:
        handle.write(data)
    assert digest_cache.look_up(path).signature != before


def test_an_unchanged_file_is_hashed_once(cache, hashes, bundle_dir):
    manifest = manifest_of(bundle_dir)
    fmt.check_files(bundle_dir, manifest, ["config.json", "laya.onnx.data"])
    assert hashes == {"files": 1, "blocks": 7}
    assert len(list(cache.glob("*.json"))) == 2
    fmt.check_files(bundle_dir, manifest, ["config.json", "laya.onnx.data"])
    assert hashes == {"files": 1, "blocks": 7}


@pytest.mark.parametrize("name", ["config.json", "laya.onnx.data"])
def test_a_file_changed_after_its_record_is_hashed_again_and_refused(cache, hashes, bundle_dir,
                                                                      name):
    manifest = manifest_of(bundle_dir)
    fmt.check_files(bundle_dir, manifest, [name])
    path = bundle_dir / name
    rewrite_in_place(path, b"[" if name == "config.json" else b"\xff" * 10)
    with pytest.raises(ValueError, match=f"SHA-256 mismatch for '{name}'"):
        fmt.check_files(bundle_dir, manifest, [name])
    assert hashes["files" if name == "config.json" else "blocks"] == (
        2 if name == "config.json" else 14)


def test_a_file_replaced_by_a_copy_of_itself_is_hashed_again(cache, hashes, bundle_dir):
    manifest = manifest_of(bundle_dir)
    fmt.check_files(bundle_dir, manifest, ["laya.onnx.data"])
    path = bundle_dir / "laya.onnx.data"
    copy = bundle_dir / "copy"
    copy.write_bytes(path.read_bytes())
    os.replace(copy, path)
    fmt.check_files(bundle_dir, manifest, ["laya.onnx.data"])
    assert hashes["blocks"] == 14


def test_a_file_modified_moments_ago_gets_no_record(cache, hashes, bundle_dir, monkeypatch):
    monkeypatch.setattr(digest_cache, "SETTLE_NS", 3600 * 10**9)
    manifest = manifest_of(bundle_dir)
    for _ in range(2):
        fmt.check_files(bundle_dir, manifest, ["config.json"])
    assert hashes["files"] == 2 and not cache.exists()


def test_records_can_be_turned_off(cache, hashes, bundle_dir, monkeypatch):
    monkeypatch.setenv(digest_cache.ENVIRONMENT, "off")
    manifest = manifest_of(bundle_dir)
    for _ in range(2):
        fmt.check_files(bundle_dir, manifest, ["config.json"])
    assert hashes["files"] == 2 and not cache.exists()
    assert digest_cache.cache_dir() is None


def test_windows_keeps_no_records(cache, monkeypatch):
    """Windows' st_ctime is the creation time: a write does not move it."""
    monkeypatch.setattr(digest_cache.os, "name", "nt")
    assert digest_cache.cache_dir() is None


@pytest.mark.parametrize("damage", ["not json", '{"signature": 3}', "[1, 2]",
                                    'wrong signature', "short block list", "blocks not text"])
def test_a_damaged_record_is_ignored(cache, hashes, bundle_dir, damage):
    manifest = manifest_of(bundle_dir)
    fmt.check_files(bundle_dir, manifest, ["laya.onnx.data"])
    (record,) = cache.glob("*.json")
    content = json.loads(record.read_text(encoding="utf-8"))
    if damage == "wrong signature":
        content["signature"][1] += 1
        text = json.dumps(content)
    elif damage in ("short block list", "blocks not text"):
        blocks = content["digests"]["blocks"]
        content["digests"]["blocks"] = blocks[:1] if damage == "short block list" else [
            None] * len(blocks)
        text = json.dumps(content)
    else:
        text = damage
    record.write_text(text, encoding="utf-8")
    fmt.check_files(bundle_dir, manifest, ["laya.onnx.data"])
    assert hashes["blocks"] == 14


def test_a_record_whose_digest_is_not_text_is_hashed_again(cache, hashes, bundle_dir):
    manifest = manifest_of(bundle_dir)
    fmt.check_files(bundle_dir, manifest, ["config.json"])
    (record,) = cache.glob("*.json")
    content = json.loads(record.read_text(encoding="utf-8"))
    content["digests"]["sha256"] = 42
    record.write_text(json.dumps(content), encoding="utf-8")
    fmt.check_files(bundle_dir, manifest, ["config.json"])
    assert hashes["files"] == 2


def test_an_unwritable_cache_only_costs_a_hash(cache, hashes, bundle_dir, monkeypatch):
    blocker = cache.parent / "a-file"
    blocker.write_text("not a directory", encoding="utf-8")
    monkeypatch.setenv(digest_cache.ENVIRONMENT, str(blocker / "digests"))
    manifest = manifest_of(bundle_dir)
    for _ in range(2):
        fmt.check_files(bundle_dir, manifest, ["config.json"])
    assert hashes["files"] == 2


def test_pins_are_always_hashed(cache, hashes, bundle_dir, monkeypatch):
    """A caller's expected_sha256 is a reviewed digest: it is checked against the bytes on disk
    every time, never against a record."""
    import laya_edge.bundle_source as source

    monkeypatch.setattr(source, "sha256_file", fmt.sha256_file)
    manifest = manifest_of(bundle_dir)
    fmt.check_files(bundle_dir, manifest, ["config.json"])
    pin = {"config.json": manifest["files"]["config.json"]["sha256"]}
    for _ in range(2):
        verify_expected(bundle_dir, pin, bundle_dir / "laya.onnx")
    assert hashes["files"] == 3
