"""PredictContext, skip(), the Hook protocol, BaseHook, adapters and sequence coercion
(hooks spec sections 1-3)."""
import dataclasses
import time
import typing

import pytest

import laya_edge
from laya_edge import hooks as H


def test_top_level_and_module_surfaces():
    for name in ("PredictContext", "PredictHook", "Hook", "BaseHook", "AsyncHook"):
        assert name in laya_edge.__all__
        assert getattr(laya_edge, name) is getattr(H, name)
    from laya_edge import hooks
    assert hooks is H
    for name in ("HOOK_EVENTS", "HookArg", "PredictHookArg", "normalise_hooks", "dispatch",
                 "aggregate_usage", "run_coroutine_sync", "validate_timeout", "compose_hooks",
                 "default_hooks", "set_default_hooks", "add_default_hook", "clear_default_hooks",
                 "HookRegistry", "_SKIP_DEFAULTS", "_StartAdapter", "_EndAdapter"):
        assert hasattr(H, name), name
    for name in ("default_hooks", "set_default_hooks", "add_default_hook", "clear_default_hooks"):
        assert not hasattr(laya_edge, name), name


def test_context_field_order_and_defaults():
    names = [f.name for f in dataclasses.fields(H.PredictContext)]
    assert names == ["states", "questions", "run_id", "results", "decision", "model", "agent",
                     "router", "max_len", "head_max_len", "usage", "started_at", "elapsed_ms",
                     "error"]
    before = time.perf_counter()
    ctx = H.PredictContext(states=["a"], questions={})
    after = time.perf_counter()
    assert before <= ctx.started_at <= after
    assert len(ctx.run_id) == 32 and int(ctx.run_id, 16) >= 0
    assert all(getattr(ctx, n) is None for n in names[3:11] + ["elapsed_ms", "error"])


def test_context_identity_semantics():
    a = H.PredictContext(states=["x"], questions={}, run_id="same")
    b = H.PredictContext(states=["x"], questions={}, run_id="same")
    assert a != b and a == a
    assert len({a, b}) == 2
    assert H.PredictContext(states=[], questions={}).run_id != a.run_id
    a.states = ["changed"]  # mutable, and still hashable by identity
    assert hash(a) == object.__hash__(a) and {a: 1}[a] == 1


@pytest.mark.parametrize("count", [1, 3])
def test_skip_accepts_one_or_one_per_state(count):
    ctx = H.PredictContext(states=["a", "b", "c"], questions={})
    results = [{"n": i} for i in range(count)]
    ctx.skip(results)
    assert ctx.results is results


def test_skip_wrong_count_message(impl):
    ctx = impl.PredictContext(states=["a", "b", "c"], questions={})
    with pytest.raises(ValueError) as info:
        ctx.skip([{}, {}])
    assert str(info.value) == ("ctx.skip() takes one result for the whole call or one per "
                               "state in ctx.states (3); got 2")
    assert ctx.results is None


def test_skip_checks_tuples_and_ignores_non_sequences():
    ctx = H.PredictContext(states=("a", "b"), questions={})
    with pytest.raises(ValueError, match=r"\(2\); got 0"):
        ctx.skip([])
    ctx.skip(({}, {}))
    assert ctx.results == ({}, {})
    marker = object()
    ctx.skip(marker)
    assert ctx.results is marker
    gen_ctx = H.PredictContext(states=iter(["a"]), questions={})
    gen_ctx.skip([{}, {}, {}])  # states not a list/tuple: not checked
    assert len(gen_ctx.results) == 3


def test_hook_events_order():
    assert H.HOOK_EVENTS == ("on_predict_start", "on_predict_end", "on_route", "on_load",
                             "on_evict", "on_error")


def test_hook_protocol_declares_six_events():
    assert issubclass(H.Hook, typing.Protocol)
    for event in H.HOOK_EVENTS:
        assert callable(getattr(H.Hook, event))


def test_base_hook_is_a_no_op_for_every_event():
    hook = H.BaseHook()
    ctx = H.PredictContext(states=["a"], questions={"q": {}})
    for event in H.HOOK_EVENTS:
        assert getattr(hook, event)(ctx) is None
    assert ctx.states == ["a"] and ctx.results is None
    assert H.normalise_hooks(hook) == [hook]


def test_adapters_forward_return_value_and_expose_one_event():
    seen = []

    def fn(ctx):
        seen.append(ctx)
        return "value"

    start, end = H._StartAdapter(fn), H._EndAdapter(fn)
    ctx = H.PredictContext(states=[], questions={})
    assert start.on_predict_start(ctx) == "value"
    assert end.on_predict_end(ctx) == "value"
    assert seen == [ctx, ctx]
    assert not hasattr(start, "on_predict_end") and not hasattr(end, "on_predict_start")
    assert type(start).__name__ == "_StartAdapter" and type(end).__name__ == "_EndAdapter"


@pytest.mark.parametrize("cls, label", [("_StartAdapter", "on_predict_start"),
                                        ("_EndAdapter", "on_predict_end")])
def test_adapter_rejects_non_callable(impl, cls, label):
    with pytest.raises(TypeError) as info:
        getattr(impl, cls)(42)
    assert str(info.value) == f"{label} must be callable, got int"


def test_sequence_coercion():
    class Both(H.BaseHook):
        pass

    a, b = Both(), Both()
    assert H.normalise_hooks(None) == []
    assert H.normalise_hooks([a, b]) == [a, b]
    assert H.normalise_hooks((a, b)) == [a, b]
    assert H.normalise_hooks(a) == [a]
    # a set or a generator is one item, not a sequence of hooks
    with pytest.raises(TypeError, match="got set"):
        H.normalise_hooks({a})
    with pytest.raises(TypeError, match="got generator"):
        H.normalise_hooks(h for h in [a])
    fns = H.normalise_hooks(on_predict_start=[print, len], on_predict_end=repr)
    assert [type(h).__name__ for h in fns] == ["_StartAdapter", "_StartAdapter", "_EndAdapter"]
    assert [h.fn for h in fns] == [print, len, repr]
