"""The bundle format: what an exported directory holds and how its manifest is read and checked.

The export pipeline writes bundles and the runtime reads them; both go through this module, so
the layout, the manifest and the integrity rules are defined once. Standard library only.
"""
from __future__ import annotations

import hashlib
import json
import os
import threading
from pathlib import Path, PurePosixPath
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Union

from . import digest_cache

FORMAT = "laya-edge-bundle"
FORMAT_VERSION = 1
MANIFEST = "laya_edge.json"
CONFIG = "rl_agent_config.json"
TOKENIZER_DIR = "tokenizer"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")
GRAPH = "laya.onnx"
GRAPH_INPUTS = ("input_ids", "attention_mask", "marker_pos", "marker_mask", "qtype")
GRAPH_OUTPUTS = ("logits", "act_logits")
MIN_MARKERS = 2
# Files above this size are also hashed block by block, so a loader can check them in parallel.
BLOCK_BYTES = 16 << 20
READ_BYTES = 1 << 20

PathLike = Union[str, "os.PathLike[str]"]


def sidecar(graph_name: str) -> str:
    """The external-data file holding a graph's weights: `<graph file name>.data` (the name
    onnx and onnxruntime's writers give it and the graph refers to)."""
    return graph_name + ".data"


def sha256_file(path: PathLike, chunk: int = READ_BYTES) -> str:
    """Hex SHA-256 of a file, read in chunks so multi-GB weights need no memory."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(chunk), b""):
            digest.update(block)
    return digest.hexdigest()


def file_digests(path: PathLike, blocks: bool = False) -> Dict[str, Any]:
    """`{"sha256", "bytes"}` of a file; with `blocks`, a file larger than `BLOCK_BYTES` also
    gets the SHA-256 of each block (`"block_bytes"`, `"blocks"`), which a loader can check on
    every core at once. One pass over the file either way."""
    whole, block = hashlib.sha256(), hashlib.sha256()
    size, filled, block_digests = 0, 0, []
    with open(path, "rb") as handle:
        for data in iter(lambda: handle.read(READ_BYTES), b""):
            whole.update(data)
            size += len(data)
            while data:
                take = data[:BLOCK_BYTES - filled]
                block.update(take)
                filled += len(take)
                data = data[len(take):]
                if filled == BLOCK_BYTES:
                    block_digests.append(block.hexdigest())
                    block, filled = hashlib.sha256(), 0
    entry: Dict[str, Any] = {"sha256": whole.hexdigest(), "bytes": size}
    if blocks and size > BLOCK_BYTES:
        if filled:
            block_digests.append(block.hexdigest())
        entry.update(block_bytes=BLOCK_BYTES, blocks=block_digests)
    return entry


def _range_sha256(path: Path, start: int, length: int) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        handle.seek(start)
        while length > 0:
            data = handle.read(min(READ_BYTES, length))
            if not data:
                break
            digest.update(data)
            length -= len(data)
    return digest.hexdigest()


def _on_every_core(jobs: Sequence[Callable[[], Any]]) -> List[Any]:
    """Results of `jobs`, run on as many threads as there are cores (hashing and reading
    release the GIL); the first error is raised once all have stopped."""
    results: List[Any] = [None] * len(jobs)
    errors: List[BaseException] = []
    pending = iter(range(len(jobs)))
    lock = threading.Lock()

    def work() -> None:
        while not errors:
            with lock:
                index = next(pending, None)
            if index is None:
                return
            try:
                results[index] = jobs[index]()
            except BaseException as exc:  # handed to the caller below
                errors.append(exc)

    helpers = [threading.Thread(target=work, daemon=True)
               for _ in range(min(len(jobs), os.cpu_count() or 1) - 1)]
    for helper in helpers:
        helper.start()
    work()
    for helper in helpers:
        helper.join()
    if errors:
        raise errors[0]
    return results


def inside(root: PathLike, relative: str) -> Path:
    """`root/relative`, refusing a path that is absolute or climbs out of `root`.

    Bundles are data from elsewhere: a manifest entry must never name a file outside them.
    """
    pure = PurePosixPath(relative.replace("\\", "/"))
    if (not relative or pure.is_absolute() or os.path.isabs(relative) or ".." in pure.parts
            or (pure.parts and ":" in pure.parts[0])):
        raise ValueError(f"bundle path {relative!r} is absolute or escapes the bundle directory")
    return Path(root).joinpath(*pure.parts)


def digests(root: PathLike, relatives: Iterable[str],
            blocks: bool = False) -> Dict[str, Dict[str, Any]]:
    """`{relative path: file_digests(...)}` for the given files under `root`."""
    return {relative: file_digests(inside(root, relative), blocks)
            for relative in sorted(relatives)}


def files_under(root: PathLike) -> list:
    """Every regular file below `root`, as sorted POSIX-style relative paths."""
    base = Path(root)
    return sorted(path.relative_to(base).as_posix() for path in base.rglob("*") if path.is_file())


def write_manifest(directory: PathLike, manifest: Mapping[str, Any]) -> Path:
    path = Path(directory) / MANIFEST
    path.write_text(json.dumps(manifest, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return path


def read_manifest(directory: PathLike) -> Optional[Dict[str, Any]]:
    """The bundle's manifest, or None for a plain checkpoint directory (no manifest).

    A manifest from a newer format is refused rather than half-understood.
    """
    path = Path(directory) / MANIFEST
    if not path.is_file():
        return None
    try:
        with open(path, encoding="utf-8") as handle:
            manifest = json.load(handle)
    except UnicodeDecodeError as exc:
        raise ValueError(f"{str(path)!r} is not UTF-8 text (byte {exc.object[exc.start]:#04x} at "
                         f"position {exc.start}): not a laya_edge bundle manifest") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"{str(path)!r} is not valid JSON (line {exc.lineno}, column "
                         f"{exc.colno}: {exc.msg}): not a laya_edge bundle manifest") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise ValueError(f"{str(path)!r} is not a laya_edge bundle manifest")
    version = manifest.get("format_version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise ValueError(f"{str(path)!r} has an invalid format_version {version!r}")
    if version > FORMAT_VERSION:
        raise ValueError(f"bundle {str(directory)!r} uses format version {version}, newer than "
                         f"this laya_edge understands ({FORMAT_VERSION}); upgrade laya_edge")
    return manifest


def missing_files(directory: PathLike, manifest: Mapping[str, Any]) -> List[str]:
    """The files the manifest lists that are not in the bundle (a stat each, nothing read)."""
    return [relative for relative in sorted(manifest.get("files") or {})
            if not inside(directory, relative).is_file()]


def check_present(directory: PathLike, manifest: Mapping[str, Any]) -> None:
    """Refuse a bundle missing any file its manifest lists, before anything is parsed: a
    deleted weights sidecar would otherwise surface as onnxruntime's own error mid-load, and a
    bundle missing a file it was exported with is damaged even where this load would not read it."""
    missing = missing_files(directory, manifest)
    if missing:
        raise FileNotFoundError(f"bundle {str(directory)!r} is missing "
                                f"{', '.join(repr(name) for name in missing)}, listed in "
                                f"{MANIFEST}; copy the bundle again or re-export it")


def check_files(directory: PathLike, manifest: Mapping[str, Any], relatives: Iterable[str]) -> None:
    """Compare each file's SHA-256 with the manifest before anything parses it (`check_file`)."""
    for relative in relatives:
        check_file(directory, manifest, relative)


def check_file(directory: PathLike, manifest: Mapping[str, Any], relative: str,
               records: bool = True) -> None:
    """Compare one file's SHA-256 with the manifest: block by block, on every core, where the
    manifest lists blocks; else the whole file. With `records`, a file unchanged since an
    earlier check is not hashed again (`digest_cache`); without, every byte is read."""
    entry = (manifest.get("files") or {}).get(relative)
    if not isinstance(entry, dict) or "sha256" not in entry:
        raise ValueError(f"bundle {str(directory)!r}: {relative!r} is not listed in "
                         f"{MANIFEST}; refusing to load an unlisted file")
    path = inside(directory, relative)
    if not path.is_file():
        raise FileNotFoundError(f"bundle {str(directory)!r} is missing {relative!r}")

    def mismatch(detail: str) -> ValueError:
        return ValueError(f"bundle {str(directory)!r}: SHA-256 mismatch for {relative!r} "
                          f"({detail}); the file changed after export, refusing to load it")

    seen = (digest_cache.look_up(path) if records else
            digest_cache.Seen(digest_cache.stat_signature(path), False, {}))
    if "blocks" not in entry:
        actual = seen.digests.get("sha256")
        if actual is None:
            actual = sha256_file(path)
            digest_cache.remember(path, seen, {"sha256": actual})
        if actual != entry["sha256"]:
            raise mismatch(f"manifest {entry['sha256']}, file {actual}")
        return
    block, wanted, listed_size = entry.get("block_bytes"), entry["blocks"], entry.get("bytes")
    if not (_count(block) and block > 0 and _count(listed_size)
            and isinstance(wanted, list) and len(wanted) == -(-listed_size // block)):
        raise ValueError(f"bundle {str(directory)!r}: {MANIFEST} lists malformed blocks for "
                         f"{relative!r}; refusing to load it")
    size = seen.size
    if size != listed_size:
        raise mismatch(f"manifest {listed_size} bytes, file {size}")
    actual_blocks = seen.digests.get("blocks")
    if seen.digests.get("block_bytes") != block or len(actual_blocks) != len(wanted):
        actual_blocks = _on_every_core([
            lambda start=start: _range_sha256(path, start, block)
            for start in range(0, size, block)])
        digest_cache.remember(path, seen, {"block_bytes": block, "blocks": actual_blocks})
    for index, (want, got) in enumerate(zip(wanted, actual_blocks)):
        if want != got:
            raise mismatch(f"block {index + 1} of {len(wanted)}: manifest {want}, file {got}")


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def default_bundle_dir(name: str) -> Path:
    """Where the bundle of a published checkpoint lives on this machine.

    `$LAYA_EDGE_MODELS/<name>`, else `~/.cache/laya_edge/bundles/<name>`: the export command
    writes there by default for a recipe, and the Router reads built-in names from there.
    """
    root = os.environ.get("LAYA_EDGE_MODELS") or os.path.join("~", ".cache", "laya_edge", "bundles")
    return Path(os.path.expanduser(root)) / name


def builtin_bundle_dir(name: str) -> Path:
    """The bundle directory of a published checkpoint, or FileNotFoundError saying how to make
    it."""
    path = default_bundle_dir(name)
    if not path.is_dir():
        raise FileNotFoundError(
            f"no bundle for the built-in checkpoint {name!r} at {str(path)!r}; export it with "
            f"`python -m laya_edge.export --recipe export/{name}.json` (needs the export extra "
            f"and hub access), or pass a bundle directory instead of {name!r}")
    return path


def check_config(config: Mapping[str, Any], label: Any) -> None:
    """Refuse a checkpoint config the ONNX graph cannot serve (shared by export and runtime)."""
    layout = config.get("option_layout", "sequential")
    if layout != "sequential":
        raise ValueError(f"option_layout={layout!r} is not supported by the ONNX runtime; load "
                         "this checkpoint with laya.Agent")
    temperature = config.get("temperature", [1.0, 1.0, 1.0])
    if not isinstance(temperature, (list, tuple)) or len(temperature) != 3:
        raise ValueError(f"Incompatible model: {label!r} temperature must be a list of 3 floats, "
                         f"got {temperature!r}")


def slower_than_fp32(manifest: Optional[Mapping[str, Any]]) -> frozenset:
    """The variants the exporter timed at no faster than fp32 on its CPU (their manifest entry's
    `speed`), which `precision="auto"` passes over on the CPU. Bundles without the timing (older
    exports, `--skip-verify`) list none."""
    variants = (manifest or {}).get("variants") or {}
    return frozenset(name for name, entry in variants.items()
                     if isinstance(entry, Mapping) and isinstance(entry.get("speed"), Mapping)
                     and isinstance(entry["speed"].get("speedup"), (int, float))
                     and entry["speed"]["speedup"] <= 1.0)
