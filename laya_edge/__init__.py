"""laya_edge: Laya decision models on edge devices, torch-free.

Importing the package loads nothing: every public name resolves on first use. The hook system
is standard library only; model machinery (numpy, onnxruntime, tokenizers, huggingface_hub)
loads on first use of `ONNXAgent`, `Agent` or `load`; the Router and the language detector are
pure Python.
Code written for upstream laya runs with `import laya_edge as laya`.
"""
from __future__ import annotations

__version__ = "0.1.0"

# name -> (module, attribute): resolved on first use; attribute None is the module itself.
_LAZY = {
    "hooks": (".hooks", None), "AsyncHook": (".hooks", "AsyncHook"),
    "BaseHook": (".hooks", "BaseHook"), "Hook": (".hooks", "Hook"),
    "PredictContext": (".hooks", "PredictContext"), "PredictHook": (".hooks", "PredictHook"),
    "ONNXAgent": (".onnx_agent", "ONNXAgent"), "Agent": (".onnx_agent", "Agent"),
    "load": (".onnx_agent", "load"), "Router": (".router", "Router"),
    "RouteDecision": (".routing", "RouteDecision"),
    "DEFAULT_MODELS": (".model_names", "DEFAULT_MODELS"),
    "detect_language": (".lang", "analyse"), "detect_script": (".lang", "detect_script"),
    "is_english": (".lang", "is_english"),
}

__all__ = ["Agent", "AsyncHook", "BaseHook", "DEFAULT_MODELS", "Hook", "ONNXAgent",
           "PredictContext", "PredictHook", "RouteDecision", "Router", "detect_language",
           "detect_script", "hooks", "is_english", "load", "__version__"]


def __getattr__(name: str) -> object:
    """Resolve the runtime names on first use, so `import laya_edge` stays cheap."""
    if name in _LAZY:
        from importlib import import_module

        module, attribute = _LAZY[name]
        loaded = import_module(module, __name__)
        value = loaded if attribute is None else getattr(loaded, attribute)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list:
    return sorted(set(globals()) | set(_LAZY))
