"""The bundle format: what an exported directory holds and how its manifest is read and checked.

The export pipeline writes bundles and the runtime reads them; both go through this module, so
the layout, the manifest and the integrity rules are defined once. Standard library only.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path, PurePosixPath
from typing import Any, Dict, Iterable, Mapping, Optional, Union

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

PathLike = Union[str, "os.PathLike[str]"]


def sha256_file(path: PathLike, chunk: int = 1 << 20) -> str:
    """Hex SHA-256 of a file, read in chunks so multi-GB weights need no memory."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(chunk), b""):
            digest.update(block)
    return digest.hexdigest()


def inside(root: PathLike, relative: str) -> Path:
    """`root/relative`, refusing a path that is absolute or climbs out of `root`.

    Bundles are data from elsewhere: a manifest entry must never name a file outside them.
    """
    pure = PurePosixPath(relative.replace("\\", "/"))
    if (not relative or pure.is_absolute() or os.path.isabs(relative) or ".." in pure.parts
            or (pure.parts and ":" in pure.parts[0])):
        raise ValueError(f"bundle path {relative!r} is absolute or escapes the bundle directory")
    return Path(root).joinpath(*pure.parts)


def digests(root: PathLike, relatives: Iterable[str]) -> Dict[str, Dict[str, Any]]:
    """`{relative path: {"sha256", "bytes"}}` for the given files under `root`."""
    table = {}
    for relative in sorted(relatives):
        path = inside(root, relative)
        table[relative] = {"sha256": sha256_file(path), "bytes": path.stat().st_size}
    return table


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
    with open(path, encoding="utf-8") as handle:
        manifest = json.load(handle)
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise ValueError(f"{str(path)!r} is not a laya_edge bundle manifest")
    version = manifest.get("format_version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise ValueError(f"{str(path)!r} has an invalid format_version {version!r}")
    if version > FORMAT_VERSION:
        raise ValueError(f"bundle {str(directory)!r} uses format version {version}, newer than "
                         f"this laya_edge understands ({FORMAT_VERSION}); upgrade laya_edge")
    return manifest


def check_files(directory: PathLike, manifest: Mapping[str, Any], relatives: Iterable[str]) -> None:
    """Compare each file's SHA-256 with the manifest before anything parses it."""
    listed = manifest.get("files") or {}
    for relative in relatives:
        entry = listed.get(relative)
        if not isinstance(entry, dict) or "sha256" not in entry:
            raise ValueError(f"bundle {str(directory)!r}: {relative!r} is not listed in "
                             f"{MANIFEST}; refusing to load an unlisted file")
        path = inside(directory, relative)
        if not path.is_file():
            raise FileNotFoundError(f"bundle {str(directory)!r} is missing {relative!r}")
        actual = sha256_file(path)
        if actual != entry["sha256"]:
            raise ValueError(f"bundle {str(directory)!r}: SHA-256 mismatch for {relative!r} "
                             f"(manifest {entry['sha256']}, file {actual}); the file changed "
                             "after export, refusing to load it")


def default_bundle_dir(name: str) -> Path:
    """Where the bundle of a published checkpoint lives on this machine.

    `$LAYA_EDGE_MODELS/<name>`, else `~/.cache/laya_edge/bundles/<name>`: the export command
    writes there by default for a recipe, and the Router reads built-in names from there.
    """
    root = os.environ.get("LAYA_EDGE_MODELS") or os.path.join("~", ".cache", "laya_edge", "bundles")
    return Path(os.path.expanduser(root)) / name


def builtin_bundle_dir(name: str) -> Path:
    """The bundle directory of a published checkpoint, or FileNotFoundError saying how to make it."""
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
