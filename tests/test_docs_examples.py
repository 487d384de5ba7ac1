"""The Python examples in the README and the runtime docs run as written.

Each block is executed in a working directory whose `./bundles/english` and
`./bundles/multilingual` are the test bundles (tiny random models: the examples are checked for
running and for their shape, not for meaningful answers).
"""
import contextlib
import io
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BLOCK = re.compile(r"```python\n(.*?)```", re.S)


def python_blocks(relative: str):
    text = (ROOT / relative).read_text(encoding="utf-8")
    return BLOCK.findall(text)


def run_block(code: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "<docs example>", "exec"), {"__name__": "__docs__"})
    return out.getvalue()


def test_readme_marks_its_runnable_examples():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    for marker in ("readme-agent", "readme-router", "readme-hooks"):
        assert f"<!-- test: {marker} -->\n```python" in text


def test_readme_agent_example(docs_workdir):
    block = next(b for b in python_blocks("README.md") if "agent.predict_batch" in b)
    lines = run_block(block).splitlines()
    assert len(lines) == 3
    choice, p_urgent = lines[0].split()
    assert choice in ("billing", "technical", "sales") and 0.0 <= float(p_urgent) <= 1.0
    for line in lines[1:]:
        label, tokens = line.split()
        assert label in ("billing", "technical", "sales") and int(tokens) > 0


def test_readme_router_example(docs_workdir):
    block = next(b for b in python_blocks("README.md") if "laya.Router" in b)
    lines = run_block(block).splitlines()
    assert [line.split(" - ")[0] for line in lines[:3]] == ["english", "multilingual",
                                                            "multilingual"]
    assert "non-Latin script (han" in lines[2]
    assert lines[3] == "multilingual"


def test_readme_hooks_example(docs_workdir):
    block = next(b for b in python_blocks("README.md") if "class Audit" in b)
    run_id, elapsed, usage = run_block(block).strip().split(" ", 2)
    assert len(run_id) == 32 and float(elapsed) > 0 and "'input_tokens'" in usage


@pytest.mark.parametrize("page", ["docs/agent.md", "docs/router.md"])
def test_runtime_docs_examples_run(docs_workdir, page):
    blocks = python_blocks(page)
    assert blocks
    outputs = [run_block(block) for block in blocks]
    assert all(output.strip() for output in outputs)


def test_session_cache_example_writes_then_maps_its_entry(docs_workdir):
    block = next(b for b in python_blocks("docs/agent.md") if "session_cache=" in b)
    first, second = run_block(block).strip(), run_block(block).strip()
    assert first.startswith("session cache: wrote optimised graph and prepacked weights to "
                            "session-cache/")
    entry = first.split(" to ", 1)[1]
    assert second == f"session cache: optimised graph and prepacked weights from {entry}"


def test_router_doc_example_prints_what_it_claims(docs_workdir):
    block = python_blocks("docs/router.md")[0]
    claimed = re.search(r"^# (multilingual .*)$", block, re.M).group(1)
    assert run_block(block).strip() == claimed
