"""Import rules: `import laya_edge` is cheap, and the runtime never needs torch or transformers."""
import json
import pathlib
import subprocess
import sys

import laya_edge

HEAVY = ("numpy", "onnxruntime", "tokenizers", "huggingface_hub", "torch", "transformers")
PACKAGE = pathlib.Path(laya_edge.__file__).parent

# Installed as the first meta-path finder, so any attempt to import a blocked module fails loudly.
BLOCKER = """
import importlib.abc, sys
BLOCKED = set(sys.argv[1].split(","))
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError("blocked import: " + name)
sys.meta_path.insert(0, Block())
"""


def run_python(code: str, blocked=()) -> dict:
    script = BLOCKER + code
    done = subprocess.run([sys.executable, "-c", script, ",".join(blocked)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_import_laya_edge_loads_nothing_heavy():
    loaded = run_python(
        "import json, sys\nimport laya_edge\nfrom laya_edge import hooks, PredictContext\n"
        f"print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))")
    assert loaded == []


def test_importing_the_agent_and_router_loads_nothing_heavy():
    """numpy, onnxruntime and tokenizers wait for the first model load (the import budget)."""
    loaded = run_python(
        "import json, sys\nfrom laya_edge import ONNXAgent, Router, load\n"
        f"print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))",
        blocked=("numpy", "onnxruntime", "tokenizers", "torch", "transformers"))
    assert loaded == []


def test_hooks_module_imports_only_the_standard_library():
    third_party = run_python(
        "import json, sys\nbefore = set(sys.modules)\nimport laya_edge.hooks, laya_edge.lifecycle\n"
        "new = {m.split('.')[0] for m in set(sys.modules) - before}\n"
        "stdlib = set(sys.stdlib_module_names) | {'laya_edge'}\n"
        "print(json.dumps(sorted(m for m in new if m not in stdlib and not m.startswith('_'))))")
    assert third_party == []


def runtime_modules():
    """Every module of the runtime: all of laya_edge except the export pipeline."""
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE.parent).with_suffix("")
        parts = list(relative.parts)
        if parts[-1] == "__init__":
            parts.pop()
        if len(parts) > 1 and parts[1] in ("export", "__main__"):
            continue
        yield ".".join(parts)


def test_runtime_modules_import_with_torch_and_transformers_blocked():
    modules = list(runtime_modules())
    assert "laya_edge.hooks" in modules and "laya_edge.lifecycle" in modules
    imported = run_python(
        "import importlib, json\n"
        f"mods = {modules!r}\n"
        "[importlib.import_module(m) for m in mods]\nprint(json.dumps(mods))",
        blocked=("torch", "transformers"))
    assert imported == modules


def test_the_blocker_really_blocks():
    done = subprocess.run([sys.executable, "-c", BLOCKER + "import transformers", "torch,transformers"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and "blocked import: transformers" in done.stderr


def test_routing_imports_nothing_heavy_until_a_checkpoint_loads():
    loaded = run_python(
        "import json, sys\nimport laya_edge as laya\n"
        "router = laya.Router(models={'english': '/nowhere/en'})\n"
        "decisions = [router.route(s, {'q': {}}) for s in ('Hello there, where is my order?',\n"
        "             'Hallo, wo ist meine Bestellung bitte?', '我的订单在哪里', {'a': ['b', 1]})]\n"
        "router.route_batch([{'state': 'hi there friend', 'questions': {}}])\n"
        "laya.detect_language('bonjour je suis ici avec vous')\n"
        f"print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))",
        blocked=("numpy", "onnxruntime", "tokenizers", "torch", "transformers"))
    assert loaded == []
