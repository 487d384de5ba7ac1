"""laya_edge: Laya decision models on edge devices, torch-free.

Importing the package loads only the standard library; model machinery (numpy, onnxruntime,
tokenizers, huggingface_hub) loads on first use of `ONNXAgent`, `Agent` or `load`.
Code written for upstream laya runs with `import laya_edge as laya`.
"""
from typing import Any

from . import hooks
from .hooks import AsyncHook, BaseHook, Hook, PredictContext, PredictHook

__version__ = "0.1.0"

_LAZY = {"ONNXAgent": ".agent", "Agent": ".agent", "load": ".agent"}

__all__ = ["Agent", "AsyncHook", "BaseHook", "Hook", "ONNXAgent", "PredictContext", "PredictHook",
           "hooks", "load", "__version__"]


def __getattr__(name: str) -> Any:
    """Resolve the runtime names on first use, so `import laya_edge` stays cheap."""
    if name in _LAZY:
        from importlib import import_module

        value = getattr(import_module(_LAZY[name], __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list:
    return sorted(set(globals()) | set(_LAZY))
