"""Block digests in the manifest: large files are checked block by block on every core, and any
change to them is still refused before anything parses them."""
import hashlib
import threading

import pytest

from laya_edge import bundle_format as fmt

BLOCK = 16 << 10


@pytest.fixture
def weights(tmp_path, monkeypatch):
    """A 100 KiB file with 16 KiB blocks (7 of them, the last one short), and its manifest."""
    monkeypatch.setattr(fmt, "BLOCK_BYTES", BLOCK)
    monkeypatch.setattr(fmt, "READ_BYTES", 4 << 10)
    path = tmp_path / "laya.onnx.data"
    path.write_bytes(bytes(range(256)) * 400)
    return path, {"files": fmt.digests(tmp_path, [path.name], blocks=True)}


def test_a_large_file_gets_its_blocks_and_whole_digest_in_one_pass(weights):
    path, manifest = weights
    entry = manifest["files"][path.name]
    data = path.read_bytes()
    assert entry["sha256"] == hashlib.sha256(data).hexdigest() and entry["bytes"] == len(data)
    assert entry["block_bytes"] == BLOCK and len(entry["blocks"]) == 7
    assert entry["blocks"] == [hashlib.sha256(data[i:i + BLOCK]).hexdigest()
                               for i in range(0, len(data), BLOCK)]
    small = fmt.file_digests(path, blocks=False)
    assert small == {"sha256": entry["sha256"], "bytes": entry["bytes"]}


def test_a_file_of_one_block_or_less_has_no_block_list(tmp_path, monkeypatch):
    monkeypatch.setattr(fmt, "BLOCK_BYTES", BLOCK)
    (tmp_path / "exact").write_bytes(b"x" * BLOCK)
    assert "blocks" not in fmt.file_digests(tmp_path / "exact", blocks=True)


def test_blocks_are_checked_on_several_threads(weights, monkeypatch):
    path, manifest = weights
    monkeypatch.setattr(fmt.os, "cpu_count", lambda: 3)
    seen = set()
    second_thread = threading.Event()
    real = fmt._range_sha256

    def recording(*args):
        """The first thread in waits (up to 10 s) for another one, so a fast machine cannot
        finish every block on one thread before the helpers start."""
        seen.add(threading.get_ident())
        if len(seen) >= 2:
            second_thread.set()
        second_thread.wait(timeout=10)
        return real(*args)

    monkeypatch.setattr(fmt, "_range_sha256", recording)
    fmt.check_files(path.parent, manifest, [path.name])
    assert len(seen) >= 2


def test_a_changed_block_is_refused_and_named(weights):
    path, manifest = weights
    data = bytearray(path.read_bytes())
    data[2 * BLOCK + 5] ^= 1
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match=r"SHA-256 mismatch for 'laya.onnx.data' \(block 3 of "
                                         r"7: manifest [0-9a-f]{64}, file [0-9a-f]{64}\); the "
                                         "file changed after export, refusing to load it"):
        fmt.check_files(path.parent, manifest, [path.name])


def test_a_truncated_or_extended_file_is_refused(weights):
    path, manifest = weights
    data = path.read_bytes()
    for changed in (data[:-1], data + b"\0"):
        path.write_bytes(changed)
        with pytest.raises(ValueError, match=rf"SHA-256 mismatch for 'laya.onnx.data' \(manifest "
                                             rf"{len(data)} bytes, file {len(changed)}\)"):
            fmt.check_files(path.parent, manifest, [path.name])


@pytest.mark.parametrize("damage", [
    {"blocks": "abc"}, {"blocks": ["0" * 64]}, {"block_bytes": 0}, {"block_bytes": True},
    {"block_bytes": "16384"}, {"bytes": None}])
def test_malformed_block_entries_are_refused(weights, damage):
    path, manifest = weights
    manifest["files"][path.name].update(damage)
    with pytest.raises(ValueError, match="lists malformed blocks for 'laya.onnx.data'"):
        fmt.check_files(path.parent, manifest, [path.name])
