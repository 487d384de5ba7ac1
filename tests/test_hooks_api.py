"""The hook documentation and examples agree with each other and do what they say.

The cache key is fixed by the project's documents: the marked cache blocks of three doc pages
and `examples/hooks/cache.py` must compute the same key, and that key must separate everything
an answer depends on. The audit and redaction examples are driven through the public
`laya_edge.hooks` helpers, and every example's `main()` is run against a stand-in runtime that
implements the documented lifecycle, so no model bundle is needed.
"""
from __future__ import annotations

import copy
import datetime
import decimal
import json
import re
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from modules import load_file

import laya_edge
from laya_edge.hooks import (BaseHook, PredictContext, aggregate_usage, compose_hooks, dispatch,
                             normalise_hooks)

ROOT = Path(__file__).resolve().parents[1]
DOC_PAGES = ("docs/hooks/api.md", "docs/hooks/patterns.md", "docs/hooks/examples.md")
MARKER = "<!-- test: cache-block -->"

# The key every cache example must use, character for character.
KEY_SOURCE = '''def key(ctx, index):
    # Not sort_keys=True: criteria order is positional, so two orders are two questions,
    # and the checkpoint and token budget change the answer too.
    payload = json.dumps([ctx.states[index], ctx.questions, ctx.model,
                          ctx.max_len, ctx.head_max_len], default=str)
    return hashlib.sha256(payload.encode()).hexdigest()
'''

QUESTIONS = {
    "dept": {"type": "choice", "instructions": "Which team should handle this ticket?",
             "criteria": ["billing", "tech", "sales"]},
    "urgent": {"type": "noul", "instructions": "Is this urgent?"},
}
QUESTIONS_REORDERED = {
    "dept": {"type": "choice", "instructions": "Which team should handle this ticket?",
             "criteria": ["sales", "tech", "billing"]},
    "urgent": {"type": "noul", "instructions": "Is this urgent?"},
}
STATES = [
    "My invoice was charged twice this month.",
    {"subject": "Refund", "body": "charged twice", "amount": decimal.Decimal("12.50")},
    ["a", "list", "state"],
    {"opened": datetime.date(2024, 5, 1), "text": "app crashes on start"},
]


# --------------------------------------------------------------------------- loading helpers

def _cache_block(page: str) -> str:
    """The fenced python block that directly follows the page's cache marker."""
    lines = (ROOT / page).read_text(encoding="utf-8").splitlines()
    starts = [i for i, line in enumerate(lines) if line.strip() == MARKER]
    assert len(starts) == 1, f"{page}: expected exactly one {MARKER!r}, found {len(starts)}"
    start = starts[0]
    assert lines[start + 1].strip() == "```python", f"{page}: the marker must precede ```python"
    end = lines.index("```", start + 2)
    return "\n".join(lines[start + 2:end]) + "\n"


def _exec_block(page: str) -> SimpleNamespace:
    namespace: dict = {"__name__": "cache_block"}
    exec(compile(_cache_block(page), str(ROOT / page), "exec"), namespace)
    return SimpleNamespace(**namespace)


def _load_example(name: str):
    return load_file(ROOT / "examples" / "hooks" / f"{name}.py", f"_hooks_example_{name}",
                     reuse=False)


def _cache_implementations() -> dict:
    impls = {page: _exec_block(page) for page in DOC_PAGES}
    impls["examples/hooks/cache.py"] = _load_example("cache")
    return impls


IMPLEMENTATIONS = DOC_PAGES + ("examples/hooks/cache.py",)


def _ctx(states=None, questions=QUESTIONS, **fields) -> PredictContext:
    return PredictContext(states=copy.deepcopy(STATES if states is None else states),
                          questions=copy.deepcopy(questions), **fields)


def _payload(label: str, tokens: int) -> dict:
    return {"model": "laya-rl-agent-onnx",
            "answers": {"dept": {"type": "choice", "choice": label}},
            "usage": {"input_tokens": tokens, "output_tokens": 0}}


# --------------------------------------------------------------------------- the cache key

def test_cache_blocks_are_self_contained_and_use_the_fixed_key(capsys):
    for name, impl in _cache_implementations().items():
        assert impl.CACHE == {}, name
        for fn in ("key", "cache_read", "cache_write"):
            assert callable(getattr(impl, fn)), f"{name} does not define {fn}"
    assert capsys.readouterr().out == ""          # defining the hooks prints nothing

    sources = {page: _cache_block(page) for page in DOC_PAGES}
    sources["examples/hooks/cache.py"] = (ROOT / "examples/hooks/cache.py").read_text("utf-8")
    for name, source in sources.items():
        assert KEY_SOURCE in source, f"{name} does not contain the project's cache key verbatim"
        assert "sort_keys=True)" not in source.replace("Not sort_keys=True:", ""), name


def test_usage_line_follows_the_block_in_its_own_code_block():
    for page in DOC_PAGES:
        block = _cache_block(page)
        assert "laya.load(" not in block, f"{page}: keep laya.load out of the executed block"
        text = (ROOT / page).read_text(encoding="utf-8")
        after = text[text.index(MARKER):]
        following = re.findall(r"```python\n(.*?)```", after, flags=re.S)
        assert len(following) >= 2, page
        usage = following[1]
        assert "laya.load(" in usage, f"{page}: the block after the cache block should use it"
        assert "on_predict_start=cache_read" in usage and "on_predict_end=cache_write" in usage


def _contexts() -> list:
    return [
        _ctx(model="bundles/english"),
        _ctx(questions=QUESTIONS_REORDERED, model="bundles/english"),
        _ctx(model="multilingual"),
        _ctx(model="bundles/english", max_len=128),
        _ctx(model="bundles/english", head_max_len=64),
        _ctx(model=None, max_len=256, head_max_len=32),
        _ctx(questions={}, model="typed-decisions"),
    ]


def test_all_four_keys_agree_for_every_context_and_index():
    impls = _cache_implementations()
    for ctx in _contexts():
        for index in range(len(ctx.states)):
            keys = {name: impl.key(ctx, index) for name, impl in impls.items()}
            assert len(set(keys.values())) == 1, (index, keys)
            assert re.fullmatch(r"[0-9a-f]{64}", next(iter(keys.values())))


@pytest.mark.parametrize("name", IMPLEMENTATIONS)
def test_key_covers_everything_the_answer_depends_on(name):
    key = _cache_implementations()[name].key
    base = _ctx(model="bundles/english", max_len=None, head_max_len=None)
    variants = {
        "criteria order": _ctx(questions=QUESTIONS_REORDERED, model="bundles/english"),
        "model": _ctx(model="multilingual"),
        "max_len": _ctx(model="bundles/english", max_len=128),
        "head_max_len": _ctx(model="bundles/english", head_max_len=64),
    }
    for index in range(len(STATES)):
        for what, other in variants.items():
            assert key(base, index) != key(other, index), f"key ignores {what} (state {index})"
    # Each state has its own key ...
    assert len({key(base, i) for i in range(len(STATES))}) == len(STATES)
    # ... which depends on the inputs only: not on run_id, timing or object identity.
    again = _ctx(model="bundles/english")
    assert again.run_id != base.run_id
    assert [key(again, i) for i in range(len(STATES))] == [key(base, i) for i in range(len(STATES))]


# --------------------------------------------------------------------------- cache round trip

@pytest.mark.parametrize("name", IMPLEMENTATIONS)
def test_cache_round_trip(name):
    impl = _cache_implementations()[name]
    hooks = normalise_hooks(on_predict_start=impl.cache_read, on_predict_end=impl.cache_write)
    pair = [STATES[0], STATES[1]]

    first = _ctx(pair, model="bundles/english")
    dispatch(hooks, "on_predict_start", first)
    assert first.results is None                      # empty cache: the model must run
    answers = [_payload("billing", 11), _payload("tech", 7)]
    first.results = answers                           # what inference would have set
    dispatch(hooks, "on_predict_end", first)
    assert len(impl.CACHE) == 2

    second = _ctx(pair, model="bundles/english")      # equal inputs, new objects, new run
    dispatch(hooks, "on_predict_start", second)
    assert second.results == answers
    assert all(got is stored for got, stored in zip(second.results, answers))

    single = _ctx([STATES[1]], model="bundles/english")   # a one-state call hits index 1's entry
    dispatch(hooks, "on_predict_start", single)
    assert single.results is not None and single.results[0] is answers[1]

    misses = {
        "partial hit": _ctx([STATES[0], "a state never seen"], model="bundles/english"),
        "criteria order": _ctx(pair, questions=QUESTIONS_REORDERED, model="bundles/english"),
        "model": _ctx(pair, model="multilingual"),
        "max_len": _ctx(pair, model="bundles/english", max_len=96),
        "head_max_len": _ctx(pair, model="bundles/english", head_max_len=48),
    }
    for what, ctx in misses.items():
        dispatch(hooks, "on_predict_start", ctx)
        assert ctx.results is None, f"{what} must not be answered from the cache"

    failed = _ctx([STATES[2]], model="bundles/english", error=RuntimeError("boom"))
    dispatch(hooks, "on_predict_end", failed)         # nothing to store on a failed call
    assert len(impl.CACHE) == 2


def test_all_implementations_fill_the_same_cache_entries():
    impls = _cache_implementations()
    for impl in impls.values():
        ctx = _ctx(model="bundles/english", max_len=200)
        ctx.results = [_payload(str(i), i) for i in range(len(STATES))]
        impl.cache_write(ctx)
    key_sets = {name: frozenset(impl.CACHE) for name, impl in impls.items()}
    assert len(set(key_sets.values())) == 1, key_sets
    assert len(next(iter(key_sets.values()))) == len(STATES)


# --------------------------------------------------------------------------- audit example

def test_audit_records_one_line_per_call_with_run_id_timing_and_usage():
    audit = _load_example("audit")
    written = []
    hook = audit.AuditLog(write=written.append)
    assert isinstance(hook, BaseHook)
    hooks = normalise_hooks([hook])

    ctx = _ctx([STATES[0], STATES[1]], model="bundles/english")
    dispatch(hooks, "on_predict_start", ctx)
    assert hook.records == []                         # the audit writes at the end only
    ctx.results = [_payload("billing", 11), _payload("tech", 6)]
    ctx.usage = aggregate_usage(ctx.results)
    ctx.elapsed_ms = 12.5
    dispatch(hooks, "on_predict_end", ctx)

    assert len(hook.records) == 1
    record = hook.records[0]
    assert record["run_id"] == ctx.run_id
    assert record["model"] == "bundles/english"
    assert record["elapsed_ms"] == 12.5
    assert record["usage"] == {"input_tokens": 17, "output_tokens": 0}
    assert record["states"] == 2 and record["questions"] == ["dept", "urgent"]
    assert record["error"] is None and record["reason"] is None
    assert json.loads(written[0]) == record


def test_audit_records_failures_and_routing_reason():
    audit = _load_example("audit")
    hook = audit.AuditLog()
    hooks = normalise_hooks([hook])

    failed = _ctx([STATES[0]], model="bundles/english")
    failed.error = ValueError("question 'dept': no 'instructions'")
    dispatch(hooks, "on_error", failed)
    assert hook.records == []                         # on_error alone does not write a record
    failed.elapsed_ms = 3.0
    dispatch(hooks, "on_predict_end", failed)
    assert hook.records[-1]["error"] == "ValueError: question 'dept': no 'instructions'"
    assert hook.records[-1]["usage"] is None and hook.records[-1]["run_id"] == failed.run_id

    routed = _ctx([STATES[1]], model="multilingual",
                  decision={"model": "multilingual", "reason": "explicit model='ml'"})
    routed.results = [_payload("sales", 4)]
    routed.usage = aggregate_usage(routed.results)
    routed.elapsed_ms = 1.0
    dispatch(hooks, "on_predict_end", routed)
    assert hook.records[-1]["reason"] == "explicit model='ml'"
    assert hook.records[-1]["usage"] == {"input_tokens": 4, "output_tokens": 0}


def test_audit_is_safe_to_share_between_threads():
    audit = _load_example("audit")
    hook = audit.AuditLog()
    hooks = normalise_hooks([hook])
    contexts = [_ctx([f"state {i}"], model="m", elapsed_ms=float(i)) for i in range(200)]

    def end(batch):
        for ctx in batch:
            dispatch(hooks, "on_predict_end", ctx)

    threads = [threading.Thread(target=end, args=(contexts[i::8],)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(r["run_id"] for r in hook.records) == sorted(c.run_id for c in contexts)


# --------------------------------------------------------------------------- redaction example

def test_redaction_replaces_emails_and_numbers_without_touching_the_caller():
    redact = _load_example("redact")
    states = [
        "Mail jane.doe@example.com or call +49 30 1234567.",
        {"from": "bob@mail.example.org", "body": "refund order 4471-2290",
         "tags": ["x@y.io", "ok"], "count": 5},
    ]
    original = copy.deepcopy(states)
    ctx = PredictContext(states=states, questions=QUESTIONS)
    dispatch(normalise_hooks(on_predict_start=redact.redact_states), "on_predict_start", ctx)

    assert ctx.states == [
        "Mail [email] or call [number].",
        {"from": "[email]", "body": "refund order [number]", "tags": ["[email]", "ok"],
         "count": 5},
    ]
    assert states == original                         # the caller's objects are untouched
    assert ctx.states is not states


def test_redaction_before_the_cache_keys_on_redacted_text(capsys):
    redact = _load_example("redact")
    cache = _load_example("cache")
    hooks = normalise_hooks(on_predict_start=[redact.redact_states, cache.cache_read, redact.show],
                            on_predict_end=cache.cache_write)

    first = PredictContext(states=["Reset the password for ann@example.com"], questions=QUESTIONS)
    dispatch(hooks, "on_predict_start", first)
    assert first.results is None
    first.results = [_payload("tech", 9)]
    dispatch(hooks, "on_predict_end", first)

    # Another address redacts to the same text, so the cache answers it without the model.
    second = PredictContext(states=["Reset the password for bo@example.org"], questions=QUESTIONS)
    dispatch(hooks, "on_predict_start", second)
    assert second.results == first.results
    assert all("@" not in key_text for key_text in map(str, cache.CACHE))

    shown = capsys.readouterr().out
    assert "model reads: Reset the password for [email]" in shown
    assert "ann@example.com" not in shown and "bo@example.org" not in shown


# --------------------------------------------------------------------------- main() of the examples

class FakeAgent:
    """A stand-in for `laya_edge.load(...)`: the documented lifecycle around a fake model."""

    def __init__(self, bundle, hooks=None, on_predict_start=None, on_predict_end=None,
                 hooks_raise=True, hooks_concurrent=True, hooks_timeout=None):
        self.model_id = bundle
        self.hooks = normalise_hooks(hooks, on_predict_start, on_predict_end)
        self.hooks_raise = hooks_raise
        self.inferred = []                            # every state that reached the "model"

    def predict_batch(self, states, questions, hooks=None, on_predict_start=None,
                      on_predict_end=None, max_len=None, head_max_len=None, **_):
        active = compose_hooks(self.hooks, hooks, on_predict_start, on_predict_end)
        ctx = PredictContext(states=states, questions=questions, model=self.model_id, agent=self,
                             max_len=max_len, head_max_len=head_max_len)

        def fire(event):
            dispatch(active, event, ctx, raise_errors=self.hooks_raise)

        try:
            fire("on_predict_start")
            if ctx.results is None:
                ctx.results = [self._answer(state, ctx.questions) for state in ctx.states]
        except BaseException as exc:
            ctx.error = exc
            fire("on_error")
            raise
        finally:
            ctx.elapsed_ms = (time.perf_counter() - ctx.started_at) * 1000
            if ctx.results is not None:
                ctx.usage = aggregate_usage(ctx.results)
            fire("on_predict_end")
        return ctx.results

    def system_one(self, state, questions, **kwargs):
        return self.predict_batch([state], questions, **kwargs)[0]

    predict = system_one

    def _answer(self, state, questions):
        answers = {}
        for qid, question in questions.items():
            if "instructions" not in question:
                raise ValueError(f"question {qid!r}: no 'instructions'; "
                                 "add the text the model should answer")
            if question["type"] == "choice":
                answers[qid] = {"type": "choice", "choice": question["criteria"][0]}
            else:
                answers[qid] = {"type": "noul", "noul": 0.5}
        self.inferred.append(state)
        return {"model": "laya-rl-agent-onnx", "answers": answers,
                "usage": {"input_tokens": len(json.dumps(state)), "output_tokens": 0}}


@pytest.fixture
def fake_load(monkeypatch):
    agents = []

    def load(bundle, **kwargs):
        agent = FakeAgent(bundle, **kwargs)
        agents.append(agent)
        return agent

    monkeypatch.setattr(laya_edge, "load", load, raising=False)
    return agents


def test_examples_import_without_side_effects(monkeypatch, capsys):
    def refuse(*args, **kwargs):
        raise AssertionError("importing an example must not load a model")

    monkeypatch.setattr(laya_edge, "load", refuse, raising=False)
    for name in ("cache", "audit", "redact"):
        module = _load_example(name)
        assert callable(module.main)
    assert capsys.readouterr().out == ""


def test_cache_example_main_skips_the_model_on_hits(fake_load, capsys):
    cache = _load_example("cache")
    cache.main("bundles/english")
    agent, = fake_load
    out = capsys.readouterr().out
    assert "answered from the cache: True" in out
    # first call 2, repeat 0, reordered criteria 2, partial hit 2, system_one hit 0
    assert len(agent.inferred) == 6
    # two states x two criteria orders, plus the one new state of the partial hit
    assert len(cache.CACHE) == 5
    assert "system_one answer for the first state: billing" in out


def test_audit_example_main_records_every_call(fake_load, capsys):
    audit = _load_example("audit")
    audit.main("bundles/english")
    out = capsys.readouterr().out
    lines = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert len(lines) == 3
    assert [line["states"] for line in lines] == [1, 2, 1]
    assert lines[2]["error"].startswith("ValueError: question 'dept': no 'instructions'")
    assert all(line["elapsed_ms"] is not None for line in lines)
    assert lines[0]["usage"]["input_tokens"] > 0 and lines[2]["usage"] is None
    assert "3 audit records, 1 with an error" in out


def test_redact_example_main_keeps_personal_data_from_the_model(fake_load, capsys):
    redact = _load_example("redact")
    redact.main("bundles/english")
    agent, = fake_load
    assert len(agent.inferred) == 2
    seen = json.dumps(agent.inferred)
    assert "@" not in seen and not re.search(r"\d", seen)
    assert "[email]" in seen and "[number]" in seen
    out = capsys.readouterr().out
    assert "caller still holds: Hi, I'm jane.doe@example.com" in out   # caller's data intact
    assert "model reads: Hi, I'm [email]" in out
