"""The package's layout rules, checked on the source: every module says its job in its first
docstring line, none grows past ~400 lines, and no two modules import each other, directly or
around a circle (imports inside functions count: a lazy circle is still a circle)."""
import ast
from pathlib import Path
from typing import Dict, List, Set

import laya_edge

PACKAGE = Path(laya_edge.__file__).parent
MAX_LINES = 420  # "about 400": a module past it has more than one job


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def imported_modules(name: str, path: Path) -> Set[str]:
    """The package's modules that `name` imports anywhere in its source."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: Set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        targets: List[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            # `from package import module` imports that module; any other name is the package's
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base
                       for alias in node.names]
        elif (isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(
                node.func, "id", None)) == "import_module" and node.args
              and isinstance(node.args[0], ast.Constant)):
            targets = [str(node.args[0].value)]
        found.update(target for target in targets if target in MODULES and target != name)
    return found


def find_cycle(graph: Dict[str, Set[str]]) -> List[str]:
    """One import circle, as the modules along it, or [] when there is none."""
    state: Dict[str, int] = {}
    stack: List[str] = []

    def visit(node: str) -> List[str]:
        state[node], _ = 1, stack.append(node)
        for target in sorted(graph[node]):
            if state.get(target) == 1:
                return stack[stack.index(target):] + [target]
            if target not in state:
                cycle = visit(target)
                if cycle:
                    return cycle
        state[node], _ = 2, stack.pop()
        return []

    for node in sorted(graph):
        if node not in state:
            cycle = visit(node)
            if cycle:
                return cycle
    return []


def test_no_import_circles():
    graph = {name: imported_modules(name, path) for name, path in MODULES.items()}
    assert graph["laya_edge.router"] >= {"laya_edge.routing", "laya_edge.residency"}
    assert find_cycle(graph) == []


def test_the_cycle_finder_finds_a_circle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) == []


def test_every_module_says_its_job_first():
    for name, path in MODULES.items():
        docstring = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")))
        assert docstring and docstring.splitlines()[0].strip(), f"{name} has no docstring"


def test_no_module_outgrows_one_job():
    sizes = {name: len(path.read_text(encoding="utf-8").splitlines())
             for name, path in MODULES.items()}
    assert {name: size for name, size in sizes.items() if size > MAX_LINES} == {}


def test_moved_public_modules_still_import_with_a_deprecation_warning():
    import importlib
    import sys
    import warnings

    from laya_edge.serving import http, triton

    for old, new, names in (("laya_edge.serve", http, ("create_app", "Limits", "run")),
                            ("laya_edge.triton", triton, ("TritonAgent",))):
        sys.modules.pop(old, None)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            module = importlib.import_module(old)
        assert any(issubclass(w.category, DeprecationWarning) and new.__name__ in str(w.message)
                   for w in caught)
        assert all(getattr(module, name) is getattr(new, name) for name in names)
