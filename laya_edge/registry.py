"""The checkpoints a Router knows: built-ins and registered sources, their descriptions and
pinned digests (`register`, `unregister`, `registered`, `resolve`).

`Registry` is a part of `Router` (laya_edge.router), sharing its lock; re-pointing or forgetting
a checkpoint unloads its agent through the Router's residency (laya_edge.residency).
"""
from __future__ import annotations

import json
import os
import warnings
from typing import Any, Callable, Dict, Optional, Sequence

from .model_names import DEFAULT_MODELS, NAME, canonical_name, display, near_builtin, unknown_model


def digests_from_env(names: Sequence[str], resolve: Callable[[Any], str]) -> Dict[str, Any]:
    """Per-checkpoint digest maps from a nested `LAYA_SHA256_DIGESTS`; {} for anything else."""
    raw = os.environ.get("LAYA_SHA256_DIGESTS", "").strip()
    try:
        data = json.loads(raw) if raw else None
    except ValueError:
        return {}
    if not isinstance(data, dict) or not data:
        return {}
    values = list(data.values())
    if all(isinstance(value, str) for value in values):
        return {}
    if not all(isinstance(value, dict) for value in values):
        raise ValueError("LAYA_SHA256_DIGESTS must be either {artifact: digest} for every "
                         "checkpoint or {model: {artifact: digest}} per checkpoint; "
                         f"{sorted(data)} mixes the two or holds a value that is neither")
    per_model: Dict[str, Any] = {resolve(key): dict(value) for key, value in data.items()}
    for name in names:
        per_model.setdefault(resolve(name), {})
    return per_model


class Registry:
    """Checkpoint names and sources of a Router (mixed into `Router`)."""

    def resolve(self, name: Any) -> str:
        """The canonical name of a checkpoint this Router knows, or ValueError."""
        key = canonical_name(name)
        if key not in self.models:
            raise unknown_model(name, list(self.models))
        return key

    def _add(self, name: Any, source: Any) -> str:
        key = canonical_name(name)
        if key not in DEFAULT_MODELS:
            if not isinstance(name, str) or not NAME.match(key):
                raise ValueError(f"invalid checkpoint name {name!r}: use lowercase letters, "
                                 "digits, '.', '_' or '-', starting with a letter or digit")
            if key == "auto":
                raise ValueError(f"invalid checkpoint name {name!r}: 'auto' means automatic "
                                 "routing in every model= argument")
        if source is not None and not isinstance(source, (str, tuple, list)):
            raise TypeError(f"checkpoint source for {name!r} must be a repo id, a local path or a "
                            f"(repo, subfolder) pair, got {type(source).__name__}")
        if isinstance(source, str) and source.startswith("~"):
            source = os.path.expanduser(source)
        if key not in DEFAULT_MODELS:
            near = near_builtin(key)
            if near is not None:
                warnings.warn(f"laya: checkpoint name {key!r} is one edit from the built-in "
                              f"{near!r}; it is registered as a separate checkpoint and {near!r} "
                              "is unchanged.", RuntimeWarning, stacklevel=3)
        self.models[key] = source
        return key

    def register(self, name: str, source: Any, description: Optional[str] = None) -> str:
        """Add or re-point a checkpoint; a changed source unloads the resident agent."""
        missing = object()
        with self._lock:
            key = canonical_name(name)
            tables = (self.models, self.sha256_digests, self.descriptions)
            before = [table.get(key, missing) for table in tables]
            try:
                key = self._add(name, source)
                if key not in self.sha256_digests:
                    from_env = digests_from_env([key], canonical_name).get(key)
                    if from_env is not None:
                        self.sha256_digests[key] = from_env
                if description is not None:
                    self.descriptions[key] = str(description)
            except BaseException:
                for table, old in zip(tables, before):
                    if old is missing:
                        table.pop(key, None)
                    else:
                        table[key] = old
                raise
            replaced = before[0] is not missing and before[0] != self.models[key]
        if replaced:
            self._lifecycle("on_evict", self._unload_key(key))
        return key

    def unregister(self, name: str) -> None:
        """Forget a registered (non built-in) checkpoint, freeing its agent."""
        key = self.resolve(name)
        if key in DEFAULT_MODELS:
            raise ValueError(f"{key!r} is a built-in checkpoint and cannot be unregistered")
        if key == self.default:
            raise ValueError(f"{key!r} is this Router's default checkpoint; set another default "
                             "before unregistering it")
        with self._lock:
            self.models.pop(key, None)
        freed = self._unload_key(key)
        with self._lock:
            for table in (self.descriptions, self.sha256_digests, self.revisions):
                table.pop(key, None)
        self._lifecycle("on_evict", freed)

    @property
    def registered(self) -> Dict[str, Dict[str, Any]]:
        """Checkpoints added beyond the built-ins: `{name: {"source", "description"}}`."""
        with self._lock:
            return {name: {"source": display(source), "description": self.descriptions.get(name)}
                    for name, source in self.models.items() if name not in DEFAULT_MODELS}
