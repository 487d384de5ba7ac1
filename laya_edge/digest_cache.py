"""Digests of bundle files already hashed, keyed by each file's stat, so an unchanged file is not
hashed again on every load.

Hashing is most of a load's file work (the 656 MB ModernBERT-base weights take about a third of
a second on two cores). A record holds what was computed for one state of one file: device,
inode, size, modification and change times in nanoseconds, the way git's index and ccache tell
an unchanged file. Any write to the file moves its change time, which a process cannot set back,
so a changed file misses its record and is hashed again.

A file modified less than `SETTLE_NS` before it is looked at gets no record: a later write in the
same timestamp tick (coarse on some filesystems) could otherwise leave its stat unchanged.

Records live in `$LAYA_EDGE_DIGEST_CACHE` (default `~/.cache/laya_edge/digests`); `off` turns
them off, and Windows never keeps them. They are an optimisation only: an unreadable, unwritable
or damaged record is ignored. Standard library only.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List, Mapping, NamedTuple, Optional

SETTLE_NS = 5_000_000_000
ENVIRONMENT = "LAYA_EDGE_DIGEST_CACHE"


class Seen(NamedTuple):
    """A file's stat when it was looked up, whether it had settled by then, and the digests
    recorded for exactly that stat."""

    signature: List[int]
    settled: bool
    digests: Dict[str, Any]

    @property
    def size(self) -> int:
        return self.signature[2]


def cache_dir() -> Optional[Path]:
    """Where records are kept, or None when `$LAYA_EDGE_DIGEST_CACHE` is `off` and on Windows
    (there `st_ctime` is the creation time, which a write does not move)."""
    root = os.environ.get(ENVIRONMENT) or os.path.join("~", ".cache", "laya_edge", "digests")
    return None if root == "off" or os.name == "nt" else Path(os.path.expanduser(root))


def _record_path(root: Path, real_path: str) -> Path:
    key = hashlib.sha256(real_path.encode("utf-8", "surrogateescape")).hexdigest()
    return root / f"{key[:32]}.json"


def stat_signature(path: Path) -> List[int]:
    """What tells an unchanged file: device, inode, size, modification and change times (ns)."""
    status = os.stat(path)
    return [status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns,
            status.st_ctime_ns]


def look_up(path: Path) -> Seen:
    """The file's current stat and the digests recorded for it ({} when none match)."""
    signature = stat_signature(path)
    settled = time.time_ns() - max(signature[3], signature[4]) >= SETTLE_NS
    root = cache_dir()
    if root is None:
        return Seen(signature, settled, {})
    try:
        with open(_record_path(root, os.path.realpath(path)), encoding="utf-8") as handle:
            record = json.load(handle)
    except (OSError, ValueError):
        return Seen(signature, settled, {})
    matches = isinstance(record, dict) and record.get("signature") == signature
    digests = record.get("digests") if matches else None
    return Seen(signature, settled, _well_formed(digests))


def _well_formed(digests: Any) -> Dict[str, Any]:
    """The entries of a record that have the shape `remember` writes; anything else is dropped
    (and recomputed), so a damaged record cannot make a good file look changed."""
    if not isinstance(digests, dict):
        return {}
    kept: Dict[str, Any] = {}
    if isinstance(digests.get("sha256"), str):
        kept["sha256"] = digests["sha256"]
    block, blocks = digests.get("block_bytes"), digests.get("blocks")
    if (isinstance(block, int) and not isinstance(block, bool) and isinstance(blocks, list)
            and all(isinstance(item, str) for item in blocks)):
        kept.update(block_bytes=block, blocks=blocks)
    return kept


def remember(path: Path, seen: Seen, digests: Mapping[str, Any]) -> None:
    """Record `digests`, computed from the file as it was at `seen.signature`."""
    root = cache_dir()
    if root is None or not seen.settled:
        return
    real_path = os.path.realpath(path)
    record = {"path": real_path, "signature": seen.signature,
              "digests": {**seen.digests, **digests}}
    try:
        root.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=root, suffix=".tmp")
    except OSError:
        return
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            json.dump(record, out)
        os.replace(temporary, _record_path(root, real_path))
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
