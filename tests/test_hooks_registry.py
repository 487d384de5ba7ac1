"""Composition, the HookRegistry mixin and process-wide defaults (hooks spec sections 4 and 6)."""
import threading

import pytest

from laya_edge import hooks as H
from toy_runtime import ToyRuntime


class Named(H.BaseHook):
    def __init__(self, name, log):
        self.name, self.log = name, log

    def on_predict_start(self, ctx):
        self.log.append(("start", self.name))

    def on_predict_end(self, ctx):
        self.log.append(("end", self.name))


def names(hooks):
    return [getattr(h, "name", type(h).__name__) for h in hooks]


# -- section 4: configuration surface ---------------------------------------------------------

def test_construction_stores_normalised_configuration():
    log = []
    a = Named("a", log)
    rt = ToyRuntime(hooks=a, on_predict_start=print, on_predict_end=[repr], hooks_raise=0,
                    hooks_concurrent=[], hooks_timeout=3)
    assert isinstance(rt.hooks, list) and rt.hooks[0] is a
    assert names(rt.hooks) == ["a", "_StartAdapter", "_EndAdapter"]
    assert rt.hooks_raise is False and rt.hooks_concurrent is False
    assert rt.hooks_timeout == 3.0 and isinstance(rt.hooks_timeout, float)
    assert type(rt._hooks_lock) is type(threading.RLock())
    assert type(rt._hooks_mutex) is type(threading.Lock())
    assert ToyRuntime()._hooks_lock is None


def test_class_level_defaults_make_a_bare_instance_work():
    for name, value in (("hooks", ()), ("hooks_raise", True), ("hooks_concurrent", True),
                        ("hooks_timeout", None), ("_hooks_lock", None), ("_hooks_mutex", None),
                        ("model_id", None)):
        assert getattr(ToyRuntime, name) == value
    bare = ToyRuntime.__new__(ToyRuntime)
    bare.fail_with, bare.inferred = None, []
    assert bare.predict_batch(["abc"], {})[0]["answers"] == {"len": 3}
    log = []
    bare.add_hook(Named("late", log))  # the mutex is created on first mutation
    bare.predict_batch(["x"], {})
    assert log == [("start", "late"), ("end", "late")]


def test_per_call_policy_resolution():
    rt = ToyRuntime(hooks_raise=False, hooks_timeout=5)
    call = rt._hook_call()
    assert (call.raise_errors, call.timeout, call.lock) == (False, 5.0, None)
    call = rt._hook_call(hooks_raise=1, hooks_timeout="2")
    assert (call.raise_errors, call.timeout) == (True, 2.0)
    strict = ToyRuntime(hooks_concurrent=False)
    assert strict._hook_call().lock is strict._hooks_lock is not None


# -- section 6.1: composition --------------------------------------------------------------------

def test_compose_order_defaults_installed_per_call(impl):
    log = []
    d, i1, i2, c = (Named(n, log) for n in ("default", "inst1", "inst2", "call"))
    impl.set_default_hooks(hooks=[d])

    def start(ctx):
        pass

    def end(ctx):
        pass

    active = impl.compose_hooks([i1, i2], hooks=[c], on_predict_start=start, on_predict_end=end)
    assert names(active) == ["default", "inst1", "inst2", "call", "_StartAdapter", "_EndAdapter"]


def test_defaults_read_at_call_time():
    log = []
    rt = ToyRuntime(hooks=[Named("inst", log)])
    H.add_default_hook(Named("default", log))  # after construction
    rt.predict_batch(["s"], {}, hooks=[Named("call", log)])
    assert log == [("start", "default"), ("start", "inst"), ("start", "call"),
                   ("end", "default"), ("end", "inst"), ("end", "call")]


def test_skip_defaults_context_variable(impl):
    log = []
    impl.set_default_hooks(hooks=[Named("default", log)])
    assert impl._SKIP_DEFAULTS.get() is False
    token = impl._SKIP_DEFAULTS.set(True)
    try:
        assert names(impl.compose_hooks([])) == []
    finally:
        impl._SKIP_DEFAULTS.reset(token)
    assert names(impl.compose_hooks([])) == ["default"]


def test_defaults_suppressed_scope_is_per_context():
    log = []
    H.set_default_hooks(hooks=[Named("default", log)])
    seen_in_thread = []
    with H.defaults_suppressed():
        assert H.compose_hooks([]) == []
        worker = threading.Thread(target=lambda: seen_in_thread.append(H.compose_hooks([])))
        worker.start()
        worker.join()
    assert names(seen_in_thread[0]) == ["default"]  # another thread's context is untouched
    assert names(H.compose_hooks([])) == ["default"]


# -- section 6.3: process-wide defaults -----------------------------------------------------------

def test_default_registry_functions(impl):
    log = []
    a, b, c = Named("a", log), Named("b", log), Named("c", log)
    impl.set_default_hooks(hooks=[a], on_predict_start=print)
    assert names(impl.default_hooks()) == ["a", "_StartAdapter"]
    impl.set_default_hooks(hooks=b)  # replaces
    assert impl.default_hooks() == [b]
    impl.add_default_hook([c, a])  # appends a sequence
    assert impl.default_hooks() == [b, c, a]
    copy = impl.default_hooks()
    copy.clear()
    assert impl.default_hooks() == [b, c, a]  # a copy was returned
    impl.clear_default_hooks()
    assert impl.default_hooks() == []


def test_default_registry_validates(impl):
    with pytest.raises(TypeError, match="must implement at least one"):
        impl.add_default_hook(print)  # bare callables are refused
    with pytest.raises(TypeError, match="instances, not classes"):
        impl.set_default_hooks(hooks=[H.BaseHook])
    with pytest.raises(TypeError, match="on_predict_end must be callable"):
        impl.set_default_hooks(on_predict_end=1)
    assert impl.default_hooks() == []


# -- section 6.2: HookRegistry ---------------------------------------------------------------

def test_add_and_remove_hook(impl):
    log = []
    reg = type("Reg", (impl.HookRegistry,), {})()
    a, b = Named("a", log), Named("b", log)
    assert reg.add_hook(a) is reg
    reg.add_hook([b, a])
    assert reg.hooks == [a, b, a]
    assert reg.remove_hook(a) is True
    assert reg.hooks == [b]
    assert reg.remove_hook(a) is False
    assert reg.remove_hook(object()) is False
    with pytest.raises(TypeError, match="must implement at least one"):
        reg.add_hook(lambda ctx: None)
    assert reg.hooks == [b]


def test_mutation_is_copy_on_write(impl):
    log = []
    reg = type("Reg", (impl.HookRegistry,), {})()
    a = Named("a", log)
    reg.add_hook(a)
    snapshot = reg.hooks
    reg.add_hook(Named("b", log))
    assert snapshot == [a] and reg.hooks is not snapshot
    snapshot = reg.hooks
    reg.remove_hook(a)
    assert len(snapshot) == 2


def test_hooks_installed_restores_exactly(impl):
    log = []
    reg = type("Reg", (impl.HookRegistry,), {})()
    pre, x, y, inner = (Named(n, log) for n in ("pre", "x", "y", "inner"))
    reg.add_hook(pre)
    with reg.hooks_installed(pre, [x, y], x) as same:
        assert same is reg
        assert reg.hooks == [pre, pre, x, y, x]
        reg.add_hook(inner)
    assert reg.hooks == [pre, inner]  # earlier entry and the in-block addition survive


def test_hooks_installed_removes_on_exception_and_validates(impl):
    log = []
    reg = type("Reg", (impl.HookRegistry,), {})()
    x = Named("x", log)
    with pytest.raises(RuntimeError):
        with reg.hooks_installed(x):
            raise RuntimeError("block failed")
    assert list(reg.hooks) == []
    with pytest.raises(TypeError):
        with reg.hooks_installed(print):
            pass
    assert list(reg.hooks) == []


def test_overlapping_hooks_installed_blocks(impl):
    log = []
    reg = type("Reg", (impl.HookRegistry,), {})()
    a, b = Named("a", log), Named("b", log)
    first = reg.hooks_installed(a)
    second = reg.hooks_installed(b)
    first.__enter__()
    second.__enter__()
    first.__exit__(None, None, None)  # leaves b, the other block's hook, in place
    assert reg.hooks == [b]
    second.__exit__(None, None, None)
    assert reg.hooks == []


def test_registry_is_thread_safe_under_concurrent_mutation_and_calls():
    rt = ToyRuntime()
    stop = threading.Event()
    errors = []
    calls = []

    class Counter(H.BaseHook):
        def on_predict_end(self, ctx):
            calls.append(ctx.run_id)

    def mutator(seed):
        try:
            for i in range(300):
                hook = Counter()
                rt.add_hook(hook)
                with rt.hooks_installed(Counter()):
                    pass
                assert rt.remove_hook(hook) is True
        except BaseException as exc:  # reported below
            errors.append(exc)

    def caller():
        try:
            while not stop.is_set():
                assert rt.system_one("abc", {})["answers"] == {"len": 3}
        except BaseException as exc:
            errors.append(exc)

    callers = [threading.Thread(target=caller) for _ in range(3)]
    mutators = [threading.Thread(target=mutator, args=(i,)) for i in range(4)]
    for t in callers + mutators:
        t.start()
    for t in mutators:
        t.join()
    stop.set()
    for t in callers:
        t.join()
    assert errors == []
    assert list(rt.hooks) == []  # every add was matched by exactly one removal


def test_hooks_installed_validates_when_called_not_when_entered():
    rt = ToyRuntime()
    with pytest.raises(TypeError, match="must implement at least one"):
        rt.hooks_installed(print)  # no `with` needed to be told
    assert list(rt.hooks) == []
