"""Configuration errors (hooks spec section 5): exact types and texts, raised before any hook."""
import math

import pytest

from toy_runtime import ToyRuntime

EVENTS = "on_predict_start, on_predict_end, on_route, on_load, on_evict, on_error"


class Audit:
    def on_predict_end(self, ctx):
        pass


class NotCallableEvent:
    on_route = "nope"


class NoneEvent:
    on_error = None  # present (hasattr) but None: accepted, skipped at dispatch


def test_class_instead_of_instance(impl):
    with pytest.raises(TypeError) as info:
        impl.normalise_hooks([Audit])
    assert str(info.value) == ("hooks entries must be instances, not classes; got Audit. "
                               "Instantiate it first.")


@pytest.mark.parametrize("bad, name", [(lambda ctx: None, "function"), (object(), "object"),
                                       (print, "builtin_function_or_method")])
def test_object_without_events(impl, bad, name):
    with pytest.raises(TypeError) as info:
        impl.normalise_hooks(bad)
    assert str(info.value) == (f"hooks entries must implement at least one of {EVENTS}; "
                               f"got {name}. Pass a plain callable as "
                               "on_predict_start=/on_predict_end= instead.")


def test_event_attribute_not_callable(impl):
    with pytest.raises(TypeError) as info:
        impl.normalise_hooks([Audit(), NotCallableEvent()])
    assert str(info.value) == "hooks entry NotCallableEvent.on_route must be callable, got str"


def test_none_event_attribute_counts_as_present(impl):
    hook = NoneEvent()
    assert impl.normalise_hooks(hook) == [hook]
    impl.dispatch([hook], "on_error", impl.PredictContext(states=[], questions={}))


def test_normalise_order_and_duplicates(impl):
    a = Audit()

    def s(ctx):
        pass

    flat = impl.normalise_hooks([a, a], on_predict_start=[s, s], on_predict_end=s)
    assert flat[:2] == [a, a]
    assert [type(h).__name__ for h in flat[2:]] == ["_StartAdapter", "_StartAdapter",
                                                    "_EndAdapter"]


@pytest.mark.parametrize("value", [0, -1, 0.0, -0.5, math.nan, math.inf, -math.inf, "0"])
def test_timeout_rejected(impl, value):
    with pytest.raises(ValueError) as info:
        impl.validate_timeout(value)
    assert str(info.value) == ("hooks_timeout must be a positive finite number or None; "
                               f"got {value!r}")


@pytest.mark.parametrize("value", [True, False])
def test_timeout_bool_rejected(impl, value):
    with pytest.raises(ValueError) as info:
        impl.validate_timeout(value)
    assert str(info.value) == ("hooks_timeout must be a positive finite number or None, "
                               f"not a bool; got {value!r}")


def test_timeout_accepted_values(impl):
    assert impl.validate_timeout(None) is None
    assert impl.validate_timeout(2) == 2.0 and isinstance(impl.validate_timeout(2), float)
    assert impl.validate_timeout("0.25") == 0.25
    with pytest.raises(TypeError):  # float()'s own error
        impl.validate_timeout([1])
    with pytest.raises(ValueError, match="could not convert"):
        impl.validate_timeout("soon")


def test_async_hook_validation(impl):
    with pytest.raises(TypeError) as info:
        impl.AsyncHook(Audit)
    assert str(info.value) == "AsyncHook wraps an instance, not a class; got Audit"
    with pytest.raises(TypeError) as info:
        impl.AsyncHook(object())
    assert str(info.value) == f"AsyncHook wraps an object implementing at least one of {EVENTS}; got object"


class Recorder:
    def __init__(self):
        self.events = []

    def on_predict_start(self, ctx):
        self.events.append("start")

    def on_error(self, ctx):
        self.events.append("error")

    def on_predict_end(self, ctx):
        self.events.append("end")


@pytest.mark.parametrize("kwargs", [dict(hooks=[Audit]), dict(hooks=lambda ctx: None),
                                    dict(on_predict_start=3), dict(on_predict_end=["x"]),
                                    dict(hooks=NotCallableEvent())])
def test_construction_rejects_bad_hooks(kwargs):
    with pytest.raises(TypeError):
        ToyRuntime(**kwargs)


@pytest.mark.parametrize("value", [0, -2, math.nan, True])
def test_construction_rejects_bad_timeout(value):
    with pytest.raises(ValueError):
        ToyRuntime(hooks_timeout=value)


@pytest.mark.parametrize("kwargs, error", [
    (dict(hooks=[Audit]), TypeError), (dict(on_predict_start=1), TypeError),
    (dict(hooks=object()), TypeError), (dict(hooks_timeout=0), ValueError),
    (dict(hooks_timeout=-1.0), ValueError)])
def test_per_call_configuration_errors_fire_no_event(kwargs, error):
    recorder = Recorder()
    runtime = ToyRuntime(hooks=[recorder])  # installed hooks are fine
    with pytest.raises(error):
        runtime.predict_batch(["state"], {}, **kwargs)
    assert recorder.events == [] and runtime.inferred == []
