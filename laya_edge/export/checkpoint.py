"""Finding a Laya checkpoint (local directory or hub repo) and refusing what cannot be exported.

Every refusal happens here, before torch builds anything, with a message that names the file or
setting at fault.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional

from ..bundle_format import CONFIG, TOKENIZER_DIR, check_config
from ..bundle_source import locate as source_locate

WEIGHTS = "model.safetensors"
ENCODER_DIR = "encoder"
WEIGHT_PREFIXES = ("encoder.", "type_emb.", "scorer.", "act_head.")


@dataclass
class Checkpoint:
    """A checkpoint directory on disk and where it came from."""

    directory: Path
    source: Dict[str, Any]
    config: Dict[str, Any] = field(default_factory=dict)

    def files(self) -> List[str]:
        """The files a checkpoint is made of, relative to its directory (what gets hashed)."""
        names = [CONFIG, WEIGHTS]
        for folder in (TOKENIZER_DIR, ENCODER_DIR):
            root = self.directory / folder
            if root.is_dir():
                names += [path.relative_to(self.directory).as_posix()
                          for path in sorted(root.rglob("*")) if path.is_file()]
        return names


CHECKPOINT_FILES = (CONFIG, WEIGHTS, f"{TOKENIZER_DIR}/*", f"{ENCODER_DIR}/*")


def locate(source: str, subfolder: Optional[str] = None, revision: Optional[str] = None,
           token: Optional[str] = None) -> Checkpoint:
    """SOURCE as a directory (a hub repo downloads only the files a checkpoint needs)."""
    directory, commit = source_locate(source, subfolder, revision, token, CHECKPOINT_FILES)
    origin: Dict[str, Any] = ({"path": str(Path(source).resolve())} if commit is None else
                              {"repo": source, "revision": revision, "commit": commit})
    origin["subfolder"] = subfolder
    return Checkpoint(directory=directory, source=origin)


def _weight_names(path: Path) -> List[str]:
    from safetensors import safe_open

    with safe_open(str(path), framework="numpy") as handle:
        return list(handle.keys())


def check(checkpoint: Checkpoint, label: str) -> Checkpoint:
    """Read the config and refuse a checkpoint the ONNX path cannot reproduce.

    `label` is how the user named the checkpoint; errors quote it.
    """
    directory = checkpoint.directory
    config_path = directory / CONFIG
    if not config_path.is_file():
        raise FileNotFoundError(f"Incompatible model: {label!r} does not contain "
                                f"'{CONFIG}'.")
    with open(config_path, encoding="utf-8") as handle:
        config = json.load(handle)
    if not (directory / WEIGHTS).is_file():
        raise FileNotFoundError(f"Incompatible model: '{WEIGHTS}' not found in {label!r}.")
    missing = [key for key in ("encoder", "head_layers") if key not in config]
    if missing:
        raise ValueError(f"Incompatible model config for {label!r}: missing configuration keys "
                         f"{missing}. Ensure this is a valid RL Agent decision model.")
    check_config(config, label)
    names = _weight_names(directory / WEIGHTS)
    adapters = sorted({key for key in config if "adapter" in key.lower() and config[key]}
                      | {name for name in names if "adapter" in name.lower()})
    if adapters:
        raise ValueError(f"{label!r} carries residual adapters ({', '.join(adapters[:3])}); the "
                         "exported graph is the plain DecisionModel, so merge the adapters into "
                         "the weights or export the base checkpoint")
    for prefix in WEIGHT_PREFIXES:
        if not any(name.startswith(prefix) for name in names):
            raise ValueError(f"Incompatible model weights for {label!r}: checkpoint is missing "
                             f"'{prefix}' parameters. Expected an RL Agent decision model with "
                             "encoder and decision heads.")
    if not (directory / TOKENIZER_DIR / "tokenizer.json").is_file():
        raise FileNotFoundError(f"{label!r} has no '{TOKENIZER_DIR}/tokenizer.json'; laya_edge "
                                "tokenises with the tokenizers library and needs the "
                                "fast-tokenizer file (save the tokenizer with a fast tokenizer's "
                                "save_pretrained())")
    checkpoint.config = config
    return checkpoint
