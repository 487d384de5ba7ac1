"""laya_edge: Laya decision models on edge devices, torch-free.

Importing the package loads only the standard library; model machinery (numpy,
onnxruntime, tokenizers, huggingface_hub) loads on first use.
"""
from . import hooks
from .hooks import AsyncHook, BaseHook, Hook, PredictContext, PredictHook

__version__ = "0.1.0"

__all__ = ["AsyncHook", "BaseHook", "Hook", "PredictContext", "PredictHook", "hooks",
           "__version__"]
