"""Per-machine cache of CPU sessions: onnxruntime's optimised graph with its prepacked weights.

Much of a CPU session's construction is onnxruntime optimising the graph and prepacking the
weights of every matrix multiplication into the layout its kernels read (for ModernBERT-base's
656 MB on two cores, agent construction measured 0.88 s without this cache and 0.46 s with
it). Both depend only on the graph, the onnxruntime build and the CPU, so the first load with a
cache lets onnxruntime write them out (`optimized_model_filepath` with
`session.save_external_prepacked_constant_initializers`), and later loads map that graph with
optimisation off instead of redoing the work. The answers are the same bits: the kernels and
their packed weights are the ones the first session computed.

Opt-in (`session_cache=` on the agent, or `$LAYA_EDGE_SESSION_CACHE`): an entry holds the
weights and their packed copy, 1.4-1.8x the variant's weight file on disk, and the first load
pays for writing it. An entry is keyed by the graph files' digests from the bundle manifest, the
disabled optimisers, the onnxruntime version and the CPU's model and feature flags (the packed
layout follows the instruction set the kernels chose), and is used only while its files keep the
stat (device, inode, size, modification and change times) recorded when they were written, so a
file changed afterwards sends the load back to the bundle. Entries are written in a temporary
directory and renamed into place; an unwritable cache only costs the speed-up. Not on Windows,
where a file's change time is its creation time.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Union

from .digest_cache import stat_signature

ENVIRONMENT = "LAYA_EDGE_SESSION_CACHE"
DEFAULT_ROOT = os.path.join("~", ".cache", "laya_edge", "sessions")
GRAPH = "graph.onnx"
WEIGHTS = GRAPH + ".data"
RECORD = "entry.json"
# A half-written entry this old belongs to a process that died writing it.
ABANDONED_S = 3600

Setting = Union[None, bool, str, "os.PathLike[str]"]


def cache_root(setting: Setting = None) -> Optional[Path]:
    """Where entries live, or None when caching is off.

    `setting` None defers to `$LAYA_EDGE_SESSION_CACHE` (unset, empty or `off`: off; `on`: the
    default directory; anything else: that directory); True is the default directory
    `~/.cache/laya_edge/sessions`, False is off, a path is that directory.
    """
    if setting is None:
        setting = os.environ.get(ENVIRONMENT, "").strip() or False
        if setting == "off":
            setting = False
        elif setting == "on":
            setting = True
    if setting is True:
        setting = DEFAULT_ROOT
    if setting is not False and (not isinstance(setting, (str, os.PathLike))
                                 or not os.fspath(setting).strip()):
        raise ValueError("session_cache must be None, True, False or a directory path, got "
                         f"{setting!r}")
    if setting is False or os.name == "nt":
        return None
    return Path(os.path.expanduser(os.fspath(setting)))


def cpuinfo_fields(names: Sequence[str]) -> Optional[Dict[str, str]]:
    """The first value of each of `names` in /proc/cpuinfo; None where it cannot be read."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return None
    found: Dict[str, str] = {}
    for line in lines:
        name, _, value = line.partition(":")
        if name.strip() in names:
            found.setdefault(name.strip(), value.strip())
    return found


def _cpu_description() -> str:
    """The CPU as its packed-weight layout depends on it: model name and feature flags."""
    fields = cpuinfo_fields(("model name", "flags", "Features", "CPU implementer", "CPU part"))
    if fields is None:
        return platform.processor()
    return json.dumps({name: " ".join(sorted(value.split())) for name, value in fields.items()},
                      sort_keys=True)


def entry_key(graph_digest: str, disabled_optimizers: Sequence[str]) -> str:
    """The entry name for a graph on this machine and onnxruntime build."""
    import onnxruntime

    parts = [graph_digest, ",".join(sorted(disabled_optimizers)), onnxruntime.__version__,
             platform.machine(), _cpu_description()]
    return hashlib.sha256("|".join(parts).encode("utf-8")).hexdigest()[:32]


def _files(entry: Path) -> List[Path]:
    return [entry / GRAPH] + ([entry / WEIGHTS] if (entry / WEIGHTS).exists() else [])


def cached_graph(entry: Path) -> Optional[Path]:
    """The entry's graph when its files are as they were written, else None."""
    try:
        with open(entry / RECORD, encoding="utf-8") as handle:
            record = json.load(handle)
        current = {path.name: stat_signature(path) for path in _files(entry)}
    except (OSError, ValueError):
        return None
    return entry / GRAPH if isinstance(record, dict) and record.get("files") == current else None


def _seal(entry_dir: Path) -> None:
    """Record the stat of the files onnxruntime wrote, so a later change is noticed."""
    record = {"files": {path.name: stat_signature(path) for path in _files(entry_dir)}}
    with open(entry_dir / RECORD, "w", encoding="utf-8") as handle:
        json.dump(record, handle)


def open_session(make: Callable[[str, Any], Any], graph: Path, options: Callable[[bool], Any],
                 root: Path, key: str, reasons: List[str]) -> Any:
    """A CPU session through the cache: from the entry `key` when it is usable, otherwise from
    `graph`, writing the entry on the way.

    `make(path, session_options)` creates a session; `options(optimise)` returns fresh session
    options, with onnxruntime's graph optimisations on or off.
    """
    entry = root / key
    stored = cached_graph(entry)
    if stored is not None:
        try:
            session = make(str(stored), options(False))
        except Exception as exc:  # a damaged entry is rebuilt, never fatal
            reasons.append(f"session cache: entry {entry} failed to load ({exc}); rebuilt")
        else:
            reasons.append(f"session cache: optimised graph and prepacked weights from {entry}")
            return session
    try:
        root.mkdir(parents=True, exist_ok=True)
        _remove_abandoned(root, key)
        building = Path(tempfile.mkdtemp(dir=root, prefix=f".{key}."))
    except OSError as exc:
        reasons.append(f"session cache: {root} is not writable ({exc}); not cached")
        return make(str(graph), options(True))
    writing = options(True)
    writing.optimized_model_filepath = str(building / GRAPH)
    writing.add_session_config_entry("session.optimized_model_external_initializers_file_name",
                                     WEIGHTS)
    writing.add_session_config_entry("session.save_external_prepacked_constant_initializers", "1")
    try:
        session = make(str(graph), writing)
    except Exception as exc:  # e.g. a full disk while writing; a bad graph fails again below
        shutil.rmtree(building, ignore_errors=True)
        reasons.append(f"session cache: could not write {entry} ({exc}); not cached")
        return make(str(graph), options(True))
    try:
        _seal(building)
        shutil.rmtree(entry, ignore_errors=True)
        os.rename(building, entry)
    except OSError as exc:
        shutil.rmtree(building, ignore_errors=True)
        reasons.append(f"session cache: could not write {entry} ({exc}); not cached")
        return session
    reasons.append(f"session cache: wrote optimised graph and prepacked weights to {entry}")
    return session


def _remove_abandoned(root: Path, key: str) -> None:
    """Half-written entries of `key` older than ABANDONED_S: a process died writing them."""
    now = time.time()
    for partial in root.glob(f".{key}.*"):
        with contextlib.suppress(OSError):
            if now - partial.stat().st_mtime > ABANDONED_S:
                shutil.rmtree(partial)
