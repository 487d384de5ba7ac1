"""Third-party modules the runtime imports on first use, so that `from laya_edge import
ONNXAgent, Router` costs none of their import time (numpy alone takes 0.1-0.2 s).

`from .lazy_modules import numpy as np` gives the real module when something already imported
it, else a module the standard library's `importlib.util.LazyLoader` executes on its first
attribute access. Building an agent imports onnxruntime, which loads numpy in the constructing
thread, so inference threads never race the first load.
"""
from __future__ import annotations

import importlib.util
import sys
from types import ModuleType


def lazy(name: str) -> ModuleType:
    """Module `name`, executed when one of its attributes is first read."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None:
        raise ModuleNotFoundError(f"No module named {name!r}", name=name)
    spec.loader = importlib.util.LazyLoader(spec.loader)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


numpy = lazy("numpy")
