"""Every Python block in README.md and docs/ runs, so the docs cannot drift from the code.

A page's blocks run in order in one namespace, as a reader pasting them in order would run them,
in a working directory whose `./bundles/english` and `./bundles/multilingual` are the test
bundles (also where the Router looks for its built-in checkpoints). Pages that leave something
to the reader (a state, questions, a hook the prose only names) get a prelude standing in for it;
the blocks themselves run unchanged. Checks of what particular blocks print live in
tests/test_docs_examples.py and tests/test_hooks_api.py.
"""
import contextlib
import io
import re
from pathlib import Path

import pytest

from laya_edge import hooks

ROOT = Path(__file__).resolve().parents[1]
BLOCK = re.compile(r"```python\n(.*?)```", re.S)
PAGES = ["README.md"] + sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").rglob("*.md"))

# What the hook pages leave to the reader. Hooks named in the prose are real, minimal hooks.
COMMON = '''
import logging
import re
from typing import Callable, Protocol, Sequence, Union

import laya_edge as laya
from laya_edge import BaseHook, PredictContext, PredictHook
from laya_edge.hooks import Hook

log = logging.getLogger("docs")
state = "My card was charged twice, call me on 555 0100"
questions = {"dept": {"type": "choice", "instructions": "Which team should handle this?",
                      "criteria": ["billing", "tech", "sales"]},
             "urgent": {"type": "noul", "instructions": "Is this urgent?"}}
bad_questions = {"dept": {"type": "choice", "criteria": ["billing", "tech"]}}
agent = laya.load("bundles/english")


def redact_states(ctx):
    ctx.states = [re.sub(r"\\d", "#", s) if isinstance(s, str) else s for s in ctx.states]


redact = redact_states
audit = metrics = log_call = lambda ctx: None


def push_metrics(*args):
    pass


class _Counter:
    def inc(self):
        pass


dropped = _Counter()


class Tracer(BaseHook):
    def on_predict_end(self, ctx):
        logging.getLogger("docs").info("run %s took %.1f ms", ctx.run_id, ctx.elapsed_ms)


class Metrics(Tracer):
    pass


class DebugDump(Tracer):
    pass


class LegacyRecorder(Tracer):
    pass


class Audit(Tracer):
    pass


tracer, debug = Tracer(), DebugDump()
'''
PRELUDES = {
    "docs/hooks/README.md": COMMON,
    "docs/hooks/api.md": COMMON + "log = lambda ctx: None\n",
    "docs/hooks/errors.md": COMMON,
    "docs/hooks/examples.md": COMMON,
    "docs/hooks/patterns.md": COMMON,
}


def test_every_page_with_python_is_covered():
    with_python = [page for page in PAGES if BLOCK.search((ROOT / page).read_text("utf-8"))]
    assert "docs/hooks/patterns.md" in with_python and "README.md" in with_python
    assert set(PRELUDES) <= set(with_python)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("page", [p for p in PAGES
                                  if BLOCK.search((ROOT / p).read_text("utf-8"))])
def test_python_blocks_run_in_order(docs_workdir, page):
    namespace = {"__name__": "__docs__"}
    exec(compile(PRELUDES.get(page, ""), f"<prelude {page}>", "exec"), namespace)
    blocks = BLOCK.findall((ROOT / page).read_text(encoding="utf-8"))
    try:
        for number, block in enumerate(blocks):
            with contextlib.redirect_stdout(io.StringIO()):
                try:
                    exec(compile(block, f"{page} block {number}", "exec"), namespace)
                except Exception as exc:
                    raise AssertionError(f"{page}, python block {number} failed: "
                                         f"{type(exc).__name__}: {exc}") from exc
    finally:
        hooks.clear_default_hooks()
