"""Where a runtime's files come from: a bundle directory, a checkpoint plus a graph, or the hub.

Integrity is checked here, before any file is parsed: the manifest's SHA-256 of every file the
runtime will read, and the caller's `expected_sha256` pins.
"""
from __future__ import annotations

import hashlib
import json
import ntpath
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from .bundle_format import (CONFIG, GRAPH, MANIFEST, TOKENIZER_DIR, TOKENIZER_FILES, check_files,
                            check_present, inside, read_manifest, sha256_file, sidecar)

HUB_FILES = (CONFIG, f"{TOKENIZER_DIR}/*", MANIFEST, "laya*.onnx", "laya*.onnx.data")


@dataclass
class Source:
    """A located model: its directory, its manifest when it is a bundle, and its graphs.

    `variants` maps precision to graph file: the bundle's variants, or just the graph the caller
    named (as "fp32"). Nothing in it has been parsed yet; `verify` checks what will be.
    """

    directory: Path
    manifest: Optional[Dict[str, Any]]
    variants: Dict[str, Path]
    revision: Optional[str]

    def graph_sha256(self, graph: Path) -> str:
        """A digest of `graph` and its external data from the manifest's hashes ('' when they
        are not listed bundle files): the graph file alone, or the SHA-256 of both hashes when
        the weights live in a sidecar (the graph file then holds only their offsets, the same
        for every checkpoint of one architecture)."""
        listed = (self.manifest or {}).get("files") or {}
        hashes = [listed.get(name, {}).get("sha256", "")
                  for name in _graph_files(self.directory, graph)]
        if not hashes or not all(hashes):
            return ""
        return hashes[0] if len(hashes) == 1 else hashlib.sha256(
            "\n".join(hashes).encode("ascii")).hexdigest()


def _looks_local(name: str) -> bool:
    return name.startswith(("/", "./", "../")) or os.path.isabs(name)


def locate(name: str, subfolder: Optional[str], revision: Optional[str], token: Optional[str],
           hub_files: Sequence[str]) -> Tuple[Path, Optional[str]]:
    """`(directory, commit)`: a local directory as is, otherwise a hub snapshot of `hub_files`.

    The download goes through huggingface_hub, so its cache, `HF_HUB_OFFLINE` and `HF_TOKEN`
    behave as everywhere else; only the listed files are fetched (a repo may hold several
    checkpoints). `commit` is None for a local directory.
    """
    commit = None
    if os.path.exists(name):
        directory = Path(name)
    elif _looks_local(name):
        raise FileNotFoundError(f"Local model path not found: {name!r}.")
    else:
        from huggingface_hub import snapshot_download

        prefix = f"{subfolder}/" if subfolder else ""
        directory = Path(snapshot_download(name, revision=revision,
                                           token=token or os.environ.get("HF_TOKEN") or None,
                                           allow_patterns=[prefix + f for f in hub_files]))
        commit = directory.name  # a snapshot folder is named after the commit it holds
    if subfolder:
        directory = directory / subfolder
        if not directory.is_dir():
            raise FileNotFoundError(f"Subfolder {subfolder!r} not found in {name!r}.")
    return directory, commit


def _missing_graph(onnx_path: Any) -> FileNotFoundError:
    return FileNotFoundError(f"ONNX model not found at {str(onnx_path)!r}. Please run python -m "
                             "laya_edge.export first.")


def _variants(directory: Path, onnx_path: Optional[str],
              manifest: Optional[Dict[str, Any]]) -> Dict[str, Path]:
    if onnx_path is None and manifest is not None:
        listed = manifest.get("variants") or {}
        variants = {precision: inside(directory, entry["files"][0])
                    for precision, entry in listed.items()}
        present = {precision: graph for precision, graph in variants.items() if graph.is_file()}
        # fp32 is the bundle's reference graph: listed but gone means a damaged bundle. A
        # bundle exported with --ship may leave it out and carry only reduced variants; then
        # the missing graph named is the first of those.
        if ("fp32" in variants and "fp32" not in present) or not present:
            gone = "fp32" if "fp32" in variants else next(iter(variants), None)
            raise _missing_graph(listed[gone]["files"][0] if gone else GRAPH)
        return present
    candidate = Path(onnx_path or GRAPH)
    if not candidate.is_absolute() and (directory / candidate).is_file():
        candidate = directory / candidate
    if not candidate.is_file():
        raise _missing_graph(onnx_path or GRAPH)
    return {"fp32": candidate}


def _graph_files(directory: Path, graph: Path) -> List[str]:
    """The graph and its external-data sidecar, relative to the bundle, when they live in it."""
    try:
        relative = graph.resolve().relative_to(directory.resolve()).as_posix()
    except ValueError:
        return []
    weights = graph.with_name(sidecar(graph.name))
    return [relative] + ([sidecar(relative)] if weights.is_file() else [])


def _digests_from_environment() -> Optional[Dict[str, str]]:
    raw = os.environ.get("LAYA_SHA256_DIGESTS", "").strip()
    if not raw:
        return None
    try:
        pins = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ValueError("LAYA_SHA256_DIGESTS must be a JSON object of artifact->sha256") from exc
    if isinstance(pins, dict) and pins and all(isinstance(v, dict) for v in pins.values()):
        return None
    return pins


def verify_expected(directory: Path, expected: Optional[Dict[str, str]], graph: Path) -> None:
    """The caller's pins `{relative path: sha256}`; the keys `onnx`/`onnx_path` name the graph.

    Without pins, a flat `LAYA_SHA256_DIGESTS` JSON object in the environment pins every load
    (a nested per-checkpoint one is the Router's to apply).
    """
    if expected is None:
        expected = _digests_from_environment()
    if expected is None:
        return
    if not isinstance(expected, dict):
        raise ValueError("expected_sha256 must be a mapping of artifact paths to digests")
    for relative, wanted in expected.items():
        if relative in ("onnx", "onnx_path"):
            path = graph
        else:
            name = str(relative).replace("\\", "/")
            if name.startswith("/") or os.path.isabs(name) or ntpath.isabs(name):
                raise ValueError(f"laya: unsafe absolute path in expected digests: {relative!r}")
            try:
                path = inside(directory, name)
            except ValueError:
                raise ValueError(f"laya: unsafe path in expected digests: {relative!r}") from None
        if not path.is_file():
            raise FileNotFoundError(f"laya: cannot verify {relative!r}: no such file under "
                                    f"{directory}")
        actual = sha256_file(path)
        if actual != str(wanted).strip().lower():
            raise ValueError(f"laya: SHA-256 mismatch for {relative}: expected {wanted}, got "
                             f"{actual}. The artifact does not match the reviewed digest; "
                             "refusing to load it.")


def resolve(model_id_or_path: str, onnx_path: Optional[str] = None,
            subfolder: Optional[str] = None, revision: Optional[str] = None,
            token: Optional[str] = None) -> Source:
    """Locate the model and its graphs; only the manifest has been read when this returns."""
    name = os.fspath(model_id_or_path)
    directory, commit = locate(name, subfolder, revision, token, HUB_FILES)
    manifest = read_manifest(directory)
    if not (directory / CONFIG).is_file():
        raise FileNotFoundError(f"Incompatible model: {name!r} does not contain '{CONFIG}'.")
    return Source(directory, manifest, _variants(directory, onnx_path, manifest), commit)


def verify(source: Source, graph: Path, expected_sha256: Optional[Dict[str, str]]) -> None:
    """Check every file about to be parsed (config, tokenizer, `graph`) before it is parsed:
    the caller's pins, then that every file the bundle manifest lists is there, then the
    manifest's hashes."""
    directory, manifest = source.directory, source.manifest
    verify_expected(directory, expected_sha256, graph)
    if manifest is None:
        return
    check_present(directory, manifest)
    check_files(directory, manifest, [*read_files(directory, manifest),
                                      *_graph_files(directory, graph)])


def read_files(directory: Path, manifest: Dict[str, Any]) -> List[str]:
    """The bundle files every load parses besides a graph: the config and every tokenizer file
    the runtime reads, listed or not (tokenizer.json always; the two JSON configs when present),
    plus every listed tokenizer file; each must be listed and match."""
    listed = manifest.get("files") or {}
    read = [f"{TOKENIZER_DIR}/{name}" for name in TOKENIZER_FILES
            if name == "tokenizer.json" or (directory / TOKENIZER_DIR / name).is_file()]
    return [CONFIG, *sorted({*read, *(path for path in listed
                                      if path.startswith(f"{TOKENIZER_DIR}/"))})]
