"""Loading the repository's scripts and examples (files, not packages) as modules in tests."""
import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Optional


def load_file(path: Path, name: Optional[str] = None, reuse: bool = True) -> ModuleType:
    """Import `path` as module `name` (default: its stem).

    With `reuse`, a module already loaded from the same file is returned, so session fixtures and
    test modules share one copy; without it every call gets a fresh module (fresh state).
    The module is registered in sys.modules: dataclasses resolve annotations through it.
    """
    path = Path(path).resolve()
    name = name or path.stem
    loaded = sys.modules.get(name)
    if reuse and loaded is not None and Path(getattr(loaded, "__file__", "")).resolve() == path:
        return loaded
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
