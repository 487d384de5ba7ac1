"""Which checkpoints a Router keeps loaded: an LRU over `max_loaded` agents, one build at a time
(concurrent loads of one checkpoint share its build), and the `on_load`/`on_evict` hooks, fired
after every lock is released.

`Residency` is a part of `Router` (laya_edge.router): it works on the Router's registry
(`models`, `revisions`, `sha256_digests`, `agent_kwargs`, `device`, ...) under the Router's lock.
How an agent is built is the Router's `agent_factory` (default `ONNXAgent`, looked up when the
first checkpoint is built, so `import laya_edge.router` loads no model machinery).
"""
from __future__ import annotations

import gc
import importlib
import inspect
import threading
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, TypeVar

from .bundle_format import builtin_bundle_dir
from .hooks import PredictContext
from .model_names import split_source

R = TypeVar("R", bound="Residency")
ROUTER_OWNED_AGENT_ARGS = frozenset({
    "model_id_or_path", "device", "precision", "token", "subfolder", "revision", "hooks",
    "on_predict_start", "on_predict_end", "hooks_raise", "hooks_concurrent", "hooks_timeout"})


def default_agent_class() -> Any:
    """Looked up at build time, so tests and deployments can swap it on the module."""
    return importlib.import_module("laya_edge.onnx_agent").ONNXAgent


def check_agent_kwargs(agent_kwargs: Dict[str, Any],
                       agent_factory: Optional[Callable[..., Any]] = None) -> None:
    """Refuse agent options the Router sets itself or the agent does not take."""
    reserved = sorted(set(agent_kwargs) & ROUTER_OWNED_AGENT_ARGS)
    if reserved:
        raise ValueError(f"Router sets {', '.join(repr(n) for n in reserved)} itself; pass them "
                         "to Router(...) instead of in agent_kwargs")
    factory = agent_factory or default_agent_class()
    target = factory.__init__ if inspect.isclass(factory) else factory
    parameters = inspect.signature(target).parameters.values()
    if any(p.kind is p.VAR_KEYWORD for p in parameters):
        return
    accepted = {p.name for p in parameters} - {"self"}
    unknown = sorted(set(agent_kwargs) - accepted)
    if unknown:
        name = getattr(factory, "__name__", "the agent factory")
        raise ValueError(f"{name} accepts none of {', '.join(repr(n) for n in unknown)}; it "
                         f"accepts {sorted(accepted - ROUTER_OWNED_AGENT_ARGS)}")


def merge_digests(shared: Any, own: Any) -> Any:
    """`expected_sha256` for one build: the checkpoint's own entry wins per file."""
    if own is not None and not isinstance(own, dict):
        return own
    if shared is not None and not isinstance(shared, dict):
        return shared
    if shared is None and own is None:
        return None
    return {**(shared or {}), **(own or {})}


def _pin(value: Any) -> Any:
    return value if value is not None and str(value).strip() else None


class _Build:
    """A checkpoint build in progress, so concurrent loads of it wait instead of building twice."""

    __slots__ = ("done", "error")

    def __init__(self) -> None:
        self.done = threading.Event()
        self.error: Optional[BaseException] = None


class Residency:
    """The loaded agents of a Router (mixed into `Router`)."""

    def _agent_factory(self) -> Callable[..., Any]:
        return self.agent_factory or default_agent_class()

    def _lifecycle(self, event: str, names: Sequence[str], agent: Any = None) -> None:
        call = self._hook_call()
        for name in names:
            call.fire(event, PredictContext(states=[], questions={}, model=name, agent=agent,
                                            router=self))

    def _touch(self, key: str) -> None:
        if key in self._order:
            self._order.remove(key)
        self._order.append(key)

    def _evict_locked(self) -> List[str]:
        evicted = []
        while len(self._order) > self.max_loaded:
            victim = self._order.pop(0)
            if self._agents.pop(victim, None) is not None:
                evicted.append(victim)
        for name in [name for name in self._agents if name not in self._order]:
            self._agents.pop(name)
            evicted.append(name)
        if evicted:
            gc.collect()
        return evicted

    def source_for_build(self, name: str) -> Tuple[Any, Dict[str, Any]]:
        """`(repo or path, agent options)` the Router would build checkpoint `name` from."""
        key = self.resolve(name)
        with self._lock:
            source = self.models.get(key)
            if source is None:
                raise ValueError(f"checkpoint {key!r} has no source to load from: it was attached "
                                 "as a built Agent and is no longer resident; attach it again, or "
                                 "register a path or repo")
            repo, subfolder = split_source(source)
            if key in self._builtin_sources and source == self._builtin_sources[key]:
                repo, subfolder = str(builtin_bundle_dir(key)), None
            kwargs: Dict[str, Any] = {"device": self.device, "token": self.token,
                                      "subfolder": subfolder}
            if self.precision is not None:
                kwargs["precision"] = self.precision
            pin = _pin(self.revisions.get(key)) or _pin(self.revision)
            if pin is not None:
                kwargs["revision"] = pin
            kwargs.update(self.agent_kwargs)
            own = self.sha256_digests.get(key) if key in self.sha256_digests else None
            if key in self.sha256_digests and own is None:
                own = {}
            expected = merge_digests(kwargs.pop("expected_sha256", None), own)
            if expected is not None:
                kwargs["expected_sha256"] = expected
        return repo, kwargs

    def load(self, name: str) -> Any:
        """The agent for `name`, building it on first use (one build at a time)."""
        key = self.resolve(name)
        while True:
            with self._lock:
                if key in self._agents:
                    self._touch(key)
                    return self._agents[key]
                build = self._loading.get(key)
                if build is None:
                    build = self._loading[key] = _Build()
                    break
            build.done.wait()
            if build.error is not None:
                raise build.error
        evicted: List[str] = []
        try:
            with self._build_lock:
                with self._lock:
                    if key in self._agents:
                        self._touch(key)
                        self._finish_build(key, build)
                        return self._agents[key]
                repo, kwargs = self.source_for_build(key)
                built = self._agent_factory()(repo, **kwargs)
                with self._lock:
                    if key in self._agents:  # attached while building: the attached one stays
                        self._touch(key)
                    else:
                        self._agents[key] = built
                        self._order.append(key)
                        evicted = self._evict_locked()
                    agent = self._agents[key]
                    self._load_failures.pop(key, None)
                    self._finish_build(key, build)
        except BaseException as exc:
            with self._lock:
                build.error = exc
                self._load_failures[key] = exc
                self._finish_build(key, build)
            raise
        self._lifecycle("on_evict", evicted)
        self._lifecycle("on_load", [key], agent)
        return agent

    def load_failures(self) -> Dict[str, BaseException]:
        """The checkpoints whose last build failed, with the error (until one succeeds): what a
        service reports as not loadable, and how it tells a failed load from a bad request."""
        with self._lock:
            return dict(self._load_failures)

    def _finish_build(self, key: str, build: _Build) -> None:
        if self._loading.get(key) is build:
            del self._loading[key]
        build.done.set()

    def attach(self, name: str, agent: Any) -> Any:
        """Serve an agent built elsewhere under `name` (no on_load, never evicts)."""
        with self._lock:
            try:
                key = self.resolve(name)
            except ValueError:
                key = self._add(name, None)
            self._agents[key] = agent
            self._touch(key)
            self.max_loaded = max(self.max_loaded, len(self._agents))
        return agent

    def preload(self: R, names: Optional[Sequence[str]] = None) -> R:
        """Build several checkpoints now, raising `max_loaded` so none evicts another."""
        if names is None:
            with self._lock:
                names = [name for name, source in self.models.items() if source is not None]
        keys = [self.resolve(name) for name in names]
        with self._lock:
            self.max_loaded = max(self.max_loaded, len(set(keys) | set(self._agents)))
        for key in keys:
            with self._lock:
                resident = key in self._agents
            if not resident:
                self.load(key)
        return self

    def _unload_key(self, key: str) -> List[str]:
        while True:
            with self._lock:
                build = self._loading.get(key)
                if build is None:
                    agent = self._agents.pop(key, None)
                    if key in self._order:
                        self._order.remove(key)
                    freed = [key] if agent is not None else []
                    del agent
                    gc.collect()
                    return freed
            build.done.wait()

    def unload(self, name: Optional[str] = None) -> None:
        """Free one checkpoint (or all, least-recent first), firing on_evict per freed agent."""
        if name is not None:
            freed = self._unload_key(self.resolve(name))
        else:
            while True:
                with self._lock:
                    builds = list(self._loading.values())
                    if not builds:
                        freed = list(self._order)
                        self._agents.clear()
                        self._order.clear()
                        gc.collect()
                        break
                for build in builds:
                    build.done.wait()
        self._lifecycle("on_evict", freed)

    @property
    def loaded(self) -> List[str]:
        """Resident checkpoints, least recently used first."""
        with self._lock:
            return list(self._order)

    @property
    def loaded_revisions(self) -> Dict[str, Any]:
        with self._lock:
            return {name: getattr(agent, "revision", None) for name, agent in self._agents.items()}
