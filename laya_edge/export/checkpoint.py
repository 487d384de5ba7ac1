"""Finding a Laya checkpoint (local directory or hub repo) and refusing what cannot be exported.

Every refusal happens here, before torch builds anything, with a message that names the file or
setting at fault.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional

from ..bundle import CONFIG, TOKENIZER_DIR

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


def hub_patterns(subfolder: Optional[str]) -> List[str]:
    """Only the files a checkpoint needs, so a repo holding several downloads one."""
    prefix = f"{subfolder}/" if subfolder else ""
    return [prefix + name for name in (CONFIG, WEIGHTS, f"{TOKENIZER_DIR}/*", f"{ENCODER_DIR}/*")]


def _looks_local(source: str) -> bool:
    return source.startswith(("/", "./", "../")) or os.path.isabs(source)


def locate(source: str, subfolder: Optional[str] = None, revision: Optional[str] = None,
           token: Optional[str] = None) -> Checkpoint:
    """Resolve SOURCE to a directory, downloading from the hub when it is not a local path.

    The download goes through huggingface_hub, so its cache, `HF_HUB_OFFLINE` and `HF_TOKEN`
    behave as they do everywhere else.
    """
    if os.path.exists(source):
        directory, origin = Path(source), {"path": str(Path(source).resolve())}
    elif _looks_local(source):
        raise FileNotFoundError(f"Local model path not found: {source!r}.")
    else:
        from huggingface_hub import snapshot_download

        downloaded = snapshot_download(source, revision=revision,
                                       token=token or os.environ.get("HF_TOKEN") or None,
                                       allow_patterns=hub_patterns(subfolder))
        directory = Path(downloaded)
        # The snapshot folder is named after the commit it holds, whatever was asked for.
        origin = {"repo": source, "revision": revision, "commit": directory.name}
    if subfolder:
        directory = directory / subfolder
        if not directory.is_dir():
            raise FileNotFoundError(f"Subfolder {subfolder!r} not found in {source!r}.")
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
    layout = config.get("option_layout", "sequential")
    if layout != "sequential":
        raise ValueError(f"option_layout={layout!r} is not supported by the ONNX runtime; load "
                         "this checkpoint with laya.Agent")
    temperature = config.get("temperature", [1.0, 1.0, 1.0])
    if not isinstance(temperature, (list, tuple)) or len(temperature) != 3:
        raise ValueError(f"Incompatible model: {label!r} temperature must be a list of 3 floats, "
                         f"got {temperature!r}")
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
