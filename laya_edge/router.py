"""`Router`: pick a Laya checkpoint per request by script and language, and serve it.

English Latin text goes to the English checkpoint, anything it cannot read (another script,
another language) to the multilingual one; typed-decisions workflows can be routed by their
question ids. Routing is pure Python and loads nothing: onnxruntime, numpy and the tokenizer are
only imported when a checkpoint is actually built.

Residency is an LRU over `max_loaded` checkpoints. One build runs at a time; concurrent loads of
the same checkpoint share it. `on_load`/`on_evict` fire after every Router lock is released.
"""
from __future__ import annotations

import gc
import importlib
import inspect
import json
import os
import re
import threading
import warnings
from collections.abc import Sequence as SequenceABC
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from .bundle import builtin_bundle_dir
from .confidence import apply_gate, check_min_confidence
from .hooks import (HookArg, HookCall, HookRegistry, PredictContext, PredictHookArg,
                    aggregate_usage, defaults_suppressed, normalise_hooks)
from .lang import analyse
from .lifecycle import end_group, run_predict

BUNDLE_REPO = "convaiinnovations/laya"
DEFAULT_MODELS: Dict[str, Any] = {
    "english": (BUNDLE_REPO, None),
    "multilingual": (BUNDLE_REPO, "multilingual"),
    "typed-decisions": (BUNDLE_REPO, "typed-decisions"),
}
STANDALONE_MODELS: Dict[str, Any] = {
    "english": "convaiinnovations/laya",
    "multilingual": "convaiinnovations/laya-multilingual",
    "typed-decisions": "convaiinnovations/laya-typed-decisions",
}
ALIASES = {
    "en": "english", "laya": "english", "default": "english",
    "multi": "multilingual", "ml": "multilingual", "laya-multilingual": "multilingual",
    "typed": "typed-decisions", "typed_decisions": "typed-decisions",
    "laya-typed-decisions": "typed-decisions", "decisions": "typed-decisions",
}
TYPED_DECISION_WORKFLOWS = {
    "agent_trace_observability": {"action", "needs_review", "outcome", "risk", "urgency"},
    "customer_service": {"action", "category", "churn_risk", "needs_human", "urgency"},
    "invoice_processing": {"discrepancy_severity", "disposition", "duplicate", "matches_order",
                           "urgency"},
    "security_incidents": {"credential_compromise", "disposition", "severity", "true_positive",
                           "urgency"},
}
ROUTER_OWNED_AGENT_ARGS = frozenset({
    "model_id_or_path", "device", "precision", "token", "subfolder", "revision", "hooks",
    "on_predict_start", "on_predict_end", "hooks_raise", "hooks_concurrent", "hooks_timeout"})
_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]*$")
_AGNOSTIC_CODES = ("c", "posix", "und", "zxx", "mul")
_ENGLISH_CODES = ("en", "eng", "english")


# -- names ----------------------------------------------------------------------------------------

def _split(source: Any) -> Tuple[Any, Optional[str]]:
    if isinstance(source, (tuple, list)):
        repo, subfolder = (list(source) + [None])[:2]
        return repo, subfolder
    return source, None


def display(source: Any) -> Optional[str]:
    """`repo/subfolder` or `repo`: how a checkpoint source is shown in decisions."""
    if source is None:
        return None
    repo, subfolder = _split(source)
    return f"{repo}/{subfolder}" if subfolder else repo


def canonical_name(name: Any) -> str:
    """Trimmed, lower-cased, alias resolved; never validates."""
    key = str(name).strip().lower()
    return ALIASES.get(key, key)


def _unknown(name: Any, choices: Sequence[str]) -> ValueError:
    return ValueError(f"unknown model {name!r}; choose one of {sorted(choices)} (or an alias: "
                      f"{sorted(ALIASES)})")


def normalise_name(name: Any) -> str:
    """The built-in checkpoint a name or alias means, or ValueError listing the choices."""
    key = canonical_name(name)
    if key not in DEFAULT_MODELS:
        raise _unknown(name, list(DEFAULT_MODELS))
    return key


def resolve_model_spec(name: Any) -> Optional[Tuple[str, Optional[str]]]:
    """The built-in `(repo, subfolder)` of a name or alias, else None."""
    key = canonical_name(name)
    return tuple(_split(DEFAULT_MODELS[key])) if key in DEFAULT_MODELS else None


def match_typed_decisions_workflow(questions: Any) -> Optional[str]:
    """The workflow whose question-id set equals these ids exactly, else None."""
    ids = set(questions or {})
    return next((name for name, signature in TYPED_DECISION_WORKFLOWS.items()
                 if ids == signature), None)


def _edit_distance(left: str, right: str) -> int:
    """Insertions, deletions, substitutions and adjacent swaps turning `left` into `right`."""
    previous2: Optional[List[int]] = None
    previous = list(range(len(right) + 1))
    for i in range(1, len(left) + 1):
        current = [i]
        for j in range(1, len(right) + 1):
            best = min(current[j - 1] + 1, previous[j] + 1,
                       previous[j - 1] + (left[i - 1] != right[j - 1]))
            if (previous2 is not None and j > 1 and left[i - 1] == right[j - 2]
                    and left[i - 2] == right[j - 1]):
                best = min(best, previous2[j - 2] + 1)
            current.append(best)
        previous2, previous = previous, current
    return previous[-1]


def _english_from_code(value: Any) -> Optional[bool]:
    """True/False for a language code; None when it names no language (`C`, `und`, empty)."""
    if value is None:
        return None
    code = str(value).strip().lower()
    if not code:
        return None
    primary = code.split(".", 1)[0].replace("_", "-").split("-", 1)[0]
    if not primary or primary in _AGNOSTIC_CODES:
        return None
    return primary in _ENGLISH_CODES


def _takes_keyword(fn: Callable[..., Any], name: str) -> bool:
    """Whether `fn` accepts `name=` (or **kwargs); an uninspectable signature counts as yes."""
    try:
        parameters = inspect.signature(fn).parameters.values()
    except Exception:
        return True
    return any((p.name == name and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY))
               or p.kind is p.VAR_KEYWORD for p in parameters)


def _agent_class() -> Any:
    """Looked up at build time, so tests and deployments can swap it on the module."""
    return importlib.import_module("laya_edge.onnx_agent").ONNXAgent


def check_agent_kwargs(agent_kwargs: Dict[str, Any]) -> None:
    """Refuse agent options the Router sets itself or ONNXAgent does not take."""
    reserved = sorted(set(agent_kwargs) & ROUTER_OWNED_AGENT_ARGS)
    if reserved:
        raise ValueError(f"Router sets {', '.join(repr(n) for n in reserved)} itself; pass them "
                         "to Router(...) instead of in agent_kwargs")
    accepted = set(inspect.signature(_agent_class().__init__).parameters) - {"self"}
    unknown = sorted(set(agent_kwargs) - accepted)
    if unknown:
        raise ValueError(f"ONNXAgent accepts none of {', '.join(repr(n) for n in unknown)}; it "
                         f"accepts {sorted(accepted - ROUTER_OWNED_AGENT_ARGS)}")


def _digests_from_env(names: Sequence[str], resolve: Callable[[Any], str]) -> Dict[str, Any]:
    """Per-checkpoint digest maps from a nested `LAYA_SHA256_DIGESTS`; {} for anything else."""
    raw = os.environ.get("LAYA_SHA256_DIGESTS", "").strip()
    try:
        data = json.loads(raw) if raw else None
    except ValueError:
        return {}
    if not isinstance(data, dict) or not data:
        return {}
    values = list(data.values())
    if all(isinstance(value, str) for value in values):
        return {}
    if not all(isinstance(value, dict) for value in values):
        raise ValueError("LAYA_SHA256_DIGESTS must be either {artifact: digest} for every "
                         "checkpoint or {model: {artifact: digest}} per checkpoint; "
                         f"{sorted(data)} mixes the two or holds a value that is neither")
    per_model: Dict[str, Any] = {resolve(key): dict(value) for key, value in data.items()}
    for name in names:
        per_model.setdefault(resolve(name), {})
    return per_model


def _merge_digests(shared: Any, own: Any) -> Any:
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


class RouteDecision(dict):
    """Which checkpoint, why, and what detection saw; a dict so it serialises as is."""

    @property
    def model(self) -> str:
        return self["model"]

    @property
    def reason(self) -> str:
        return self["reason"]

    def __repr__(self) -> str:
        return f"RouteDecision(model={self['model']!r}, reason={self['reason']!r})"


class _Build:
    """A checkpoint build in progress, so concurrent loads of it wait instead of building twice."""

    __slots__ = ("done", "error")

    def __init__(self) -> None:
        self.done = threading.Event()
        self.error: Optional[BaseException] = None


class Router(HookRegistry):
    """Routes each request to a checkpoint and answers it with that checkpoint's ONNXAgent."""

    agent_kwargs: Dict[str, Any] = {}

    def __init__(self, models: Optional[Dict[str, Any]] = None, device: Optional[str] = None,
                 token: Optional[str] = None, revision: Optional[str] = None,
                 revisions: Optional[Dict[str, Optional[str]]] = None, max_loaded: int = 2,
                 default: str = "english", auto_task_detection: bool = False,
                 standalone_repos: bool = False, preload: bool = False, lang_guess: Any = None,
                 hooks: HookArg = None, on_predict_start: PredictHookArg = None,
                 on_predict_end: PredictHookArg = None, hooks_raise: bool = True,
                 hooks_concurrent: bool = True, hooks_timeout: Optional[float] = None,
                 agent_kwargs: Optional[Dict[str, Any]] = None,
                 sha256_digests: Optional[Dict[str, Any]] = None,
                 precision: Optional[str] = None):
        self._configure_hooks(hooks, on_predict_start, on_predict_end, hooks_raise,
                              hooks_concurrent, hooks_timeout)
        # The published sources; a built-in still pointing at one is read from its local bundle.
        self._builtin_sources = dict(STANDALONE_MODELS if standalone_repos else DEFAULT_MODELS)
        self.models: Dict[str, Any] = dict(self._builtin_sources)
        self.descriptions: Dict[str, str] = {}
        for name, source in (models or {}).items():
            self._add(name, source)
        self.device = device
        self.precision = precision
        self.token = token or os.environ.get("HF_TOKEN")
        self.revision = revision
        self.revisions = {self.resolve(key): value for key, value in (revisions or {}).items()}
        self.agent_kwargs = dict(agent_kwargs or {})
        if self.agent_kwargs:
            check_agent_kwargs(self.agent_kwargs)
        self.sha256_digests: Dict[str, Any] = _digests_from_env(list(self.models), self.resolve)
        self.sha256_digests.update({self.resolve(key): value
                                    for key, value in (sha256_digests or {}).items()})
        self.max_loaded = max(1, int(max_loaded))
        self.default = self.resolve(default)
        self.auto_task_detection = bool(auto_task_detection)
        self.lang_guess = lang_guess
        self._agents: Dict[str, Any] = {}
        self._order: List[str] = []
        self._lock = threading.RLock()
        self._build_lock = threading.Lock()
        self._loading: Dict[str, _Build] = {}
        if preload:
            self.preload()

    def __repr__(self) -> str:
        return f"Router(loaded={self.loaded}, max_loaded={self.max_loaded}, default={self.default!r})"

    def __enter__(self) -> "Router":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.unload()

    # -- registry --------------------------------------------------------------------------------

    def resolve(self, name: Any) -> str:
        """The canonical name of a checkpoint this Router knows, or ValueError."""
        key = canonical_name(name)
        if key not in self.models:
            raise _unknown(name, list(self.models))
        return key

    def _add(self, name: Any, source: Any) -> str:
        key = canonical_name(name)
        if key not in DEFAULT_MODELS:
            if not isinstance(name, str) or not _NAME.match(key):
                raise ValueError(f"invalid checkpoint name {name!r}: use lowercase letters, "
                                 "digits, '.', '_' or '-', starting with a letter or digit")
            if key == "auto":
                raise ValueError(f"invalid checkpoint name {name!r}: 'auto' means automatic "
                                 "routing in every model= argument")
        if source is not None and not isinstance(source, (str, tuple, list)):
            raise TypeError(f"checkpoint source for {name!r} must be a repo id, a local path or a "
                            f"(repo, subfolder) pair, got {type(source).__name__}")
        if isinstance(source, str) and source.startswith("~"):
            source = os.path.expanduser(source)
        if key not in DEFAULT_MODELS:
            near = next((builtin for builtin in DEFAULT_MODELS
                         if abs(len(key) - len(builtin)) <= 1
                         and _edit_distance(key, builtin) == 1), None)
            if near is not None:
                warnings.warn(f"laya: checkpoint name {key!r} is one edit from the built-in "
                              f"{near!r}; it is registered as a separate checkpoint and {near!r} "
                              "is unchanged.", RuntimeWarning, stacklevel=3)
        self.models[key] = source
        return key

    def register(self, name: str, source: Any, description: Optional[str] = None) -> str:
        """Add or re-point a checkpoint; a changed source unloads the resident agent."""
        missing = object()
        with self._lock:
            key = canonical_name(name)
            tables = (self.models, self.sha256_digests, self.descriptions)
            before = [table.get(key, missing) for table in tables]
            try:
                key = self._add(name, source)
                if key not in self.sha256_digests:
                    from_env = _digests_from_env([key], canonical_name).get(key)
                    if from_env is not None:
                        self.sha256_digests[key] = from_env
                if description is not None:
                    self.descriptions[key] = str(description)
            except BaseException:
                for table, old in zip(tables, before):
                    if old is missing:
                        table.pop(key, None)
                    else:
                        table[key] = old
                raise
            replaced = before[0] is not missing and before[0] != self.models[key]
        if replaced:
            self._lifecycle("on_evict", self._unload_key(key))
        return key

    def unregister(self, name: str) -> None:
        """Forget a registered (non built-in) checkpoint, freeing its agent."""
        key = self.resolve(name)
        if key in DEFAULT_MODELS:
            raise ValueError(f"{key!r} is a built-in checkpoint and cannot be unregistered")
        if key == self.default:
            raise ValueError(f"{key!r} is this Router's default checkpoint; set another default "
                             "before unregistering it")
        with self._lock:
            self.models.pop(key, None)
        freed = self._unload_key(key)
        with self._lock:
            for table in (self.descriptions, self.sha256_digests, self.revisions):
                table.pop(key, None)
        self._lifecycle("on_evict", freed)

    @property
    def registered(self) -> Dict[str, Dict[str, Any]]:
        """Checkpoints added beyond the built-ins: `{name: {"source", "description"}}`."""
        with self._lock:
            return {name: {"source": display(source), "description": self.descriptions.get(name)}
                    for name, source in self.models.items() if name not in DEFAULT_MODELS}

    # -- residency -------------------------------------------------------------------------------

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

    def _source_for_build(self, key: str) -> Tuple[Any, Dict[str, Any]]:
        with self._lock:
            source = self.models.get(key)
            if source is None:
                raise ValueError(f"checkpoint {key!r} has no source to load from: it was attached "
                                 "as a built Agent and is no longer resident; attach it again, or "
                                 "register a path or repo")
            repo, subfolder = _split(source)
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
            expected = _merge_digests(kwargs.pop("expected_sha256", None), own)
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
                repo, kwargs = self._source_for_build(key)
                built = _agent_class()(repo, **kwargs)
                with self._lock:
                    if key in self._agents:  # attached while building: the attached one stays
                        self._touch(key)
                    else:
                        self._agents[key] = built
                        self._order.append(key)
                        evicted = self._evict_locked()
                    agent = self._agents[key]
                    self._finish_build(key, build)
        except BaseException as exc:
            with self._lock:
                build.error = exc
                self._finish_build(key, build)
            raise
        self._lifecycle("on_evict", evicted)
        self._lifecycle("on_load", [key], agent)
        return agent

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

    def preload(self, names: Optional[Sequence[str]] = None) -> "Router":
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

    # -- routing ---------------------------------------------------------------------------------

    def _decision(self, key: str, reason: str, detection: Any = None,
                  workflow: Optional[str] = None) -> RouteDecision:
        return RouteDecision(model=key, repo=display(self.models.get(key)), reason=reason,
                             detection=detection, workflow=workflow)

    def _hint(self, hint: Any, state: Any) -> Optional[bool]:
        if hint is None:
            return None
        return _english_from_code(hint(state) if callable(hint) else hint)

    def _route(self, state: Any, questions: Any, model: Any, task: Any, lang: Any,
               lang_guess: Any, explain: bool) -> RouteDecision:
        """The decision alone: explicit model > task > workflow > lang > hints > detection."""
        if model is not None:
            return self._decision(self.resolve(model), f"explicit model={model!r}")
        if task is not None:
            typed = str(task).lower().replace("-", "_") == "typed_decisions"
            return self._decision(self.resolve("typed-decisions" if typed else task),
                                  f"explicit task={task!r}")
        workflow = match_typed_decisions_workflow(questions or {})
        if workflow and self.auto_task_detection:
            return self._decision("typed-decisions", f"question ids match the {workflow!r} "
                                  "typed-decisions workflow", workflow=workflow)
        english = _english_from_code(lang)
        if lang is not None and english is not None:
            return self._decision("english" if english else "multilingual",
                                  f"explicit lang={lang!r}", workflow=workflow)
        for source, hint in (("lang_guess", lang_guess), ("Router(lang_guess=...)",
                                                          self.lang_guess)):
            english = self._hint(hint, state)
            if english is not None:
                which = "English" if english else "non-English"
                return self._decision("english" if english else "multilingual",
                                      f"{source}: the caller identified this as {which} text",
                                      workflow=workflow)
        detection = analyse(state, explain=True) if explain else analyse(state)
        key, reason = self._detected(detection)
        return self._decision(key, reason, detection, workflow)

    def _detected(self, det: Dict[str, Any]) -> Tuple[str, str]:
        if det["script"] == "unknown":
            return self.default, f"no letters detected in state; using default ({self.default})"
        if det["script"] != "latin":
            return "multilingual", (f"non-Latin script ({det['script']}, "
                                    f"{100 * float(det['non_latin_fraction']):.0f}% of letters); "
                                    "the English checkpoint cannot read it")
        if not det["is_english"]:
            if det.get("mixed_segment"):
                return "multilingual", (f"Latin script, mostly English, but a line or field reads "
                                        f"as {det['language']!r} ({det['mixed_segment'][:60]!r}); "
                                        "the English checkpoint cannot read it")
            if det["language"]:
                return "multilingual", (f"Latin script but language looks like "
                                        f"{det['language']!r}, not English")
            return "multilingual", (f"Latin script, language not identified but "
                                    f"{100 * float(det['diacritic_rate']):.0f}% non-English "
                                    "letters; not safe for the English checkpoint")
        if det["language_undecided"]:
            return self.default, ("Latin script, language not identified and no non-English "
                                  f"letters; using default ({self.default})")
        return "english", "English Latin text"

    def route(self, state: Any, questions: Optional[Dict[str, Any]] = None, model: Any = None,
              task: Any = None, lang: Any = None, lang_guess: Any = None, hooks: HookArg = None,
              hooks_raise: Optional[bool] = None, hooks_timeout: Optional[float] = None, *,
              explain: bool = False) -> RouteDecision:
        """Decide which checkpoint answers `state`; `on_route` hooks may replace the decision.

        Nothing is loaded, so a hook can pin a checkpoint before any is built.
        """
        if questions is not None and not isinstance(questions, dict):
            raise TypeError("questions must be a dict of question id -> definition, got "
                            f"{type(questions).__name__}")
        decision = self._route(state, questions, model, task, lang, lang_guess, explain)
        call = self._hook_call(hooks, hooks_raise=hooks_raise, hooks_timeout=hooks_timeout)
        ctx = PredictContext(states=[state], questions=questions or {}, decision=decision,
                             router=self)
        call.fire("on_route", ctx)
        return ctx.decision

    def route_batch(self, requests: Sequence[Dict[str, Any]],
                    hooks_timeout: Optional[float] = None, *, hooks: HookArg = None,
                    hooks_raise: Optional[bool] = None,
                    explain: bool = False) -> List[RouteDecision]:
        """Validate and route every request, in order (`on_route` once each); loads nothing."""
        if not isinstance(requests, SequenceABC) or isinstance(requests, (str, bytes)):
            raise TypeError("requests must be a sequence of request dictionaries")
        decisions = []
        for i, request in enumerate(requests):
            if not isinstance(request, dict):
                raise TypeError(f"request {i} must be a dict, got {type(request).__name__}")
            if "state" not in request:
                raise ValueError(f"request {i} is missing required key 'state'")
            if request["state"] is None:
                raise TypeError(f"request {i} 'state' must not be None; pass a string, dict, or "
                                "list")
            if "questions" not in request:
                raise ValueError(f"request {i} is missing required key 'questions'")
            if not isinstance(request["questions"], dict):
                raise TypeError(f"request {i} 'questions' must be a dict, got "
                                f"{type(request['questions']).__name__}")
            decisions.append(self.route(
                request["state"], request["questions"], model=request.get("model"),
                task=request.get("task"), lang=request.get("lang"),
                lang_guess=request.get("lang_guess"), hooks=hooks, hooks_raise=hooks_raise,
                hooks_timeout=hooks_timeout, explain=explain))
        return decisions

    # -- prediction ------------------------------------------------------------------------------

    def _answer(self, state: Any, questions: Dict[str, Any], routing: Dict[str, Any],
                call: HookCall, gate: Any, infer: Callable[[PredictContext, Any], Dict[str, Any]],
                max_len: Optional[int] = None, head_max_len: Optional[int] = None,
                overwrite_routing: bool = True) -> Dict[str, Any]:
        """The predict lifecycle of one routed request (route and load already done)."""
        decision = dict(routing)
        agent = self.load(decision["model"])
        ctx = PredictContext(states=[state], questions=questions, decision=dict(decision),
                             model=decision["model"], agent=agent, router=self, max_len=max_len,
                             head_max_len=head_max_len)

        def answer(ctx: PredictContext) -> List[Dict[str, Any]]:
            with defaults_suppressed():
                result = infer(ctx, agent)
            if overwrite_routing:
                result["routing"] = dict(decision)
            return [result]

        def stamp(ctx: PredictContext) -> None:
            for result in ctx.results:
                if isinstance(result, dict):
                    result.setdefault("routing", dict(decision))

        results = run_predict(call, ctx, answer, lambda results: apply_gate(results, gate),
                              answered=stamp)
        return results[0]

    def predict(self, state: Any, questions: Dict[str, Any], model: Any = None, task: Any = None,
                lang: Any = None, lang_guess: Any = None, hooks: HookArg = None,
                on_predict_start: PredictHookArg = None, on_predict_end: PredictHookArg = None,
                hooks_raise: Optional[bool] = None, hooks_timeout: Optional[float] = None,
                max_len: Optional[int] = None, head_max_len: Optional[int] = None,
                min_confidence: Any = None) -> Dict[str, Any]:
        """Route `state`, load the checkpoint, answer; the payload carries `routing`."""
        _check_request(state, questions)
        gate = None if min_confidence is None else check_min_confidence(min_confidence)
        call = self._hook_call(hooks, on_predict_start, on_predict_end, hooks_raise,
                               hooks_timeout)
        decision = self.route(state, questions, model, task, lang, lang_guess, hooks=hooks,
                              hooks_raise=hooks_raise, hooks_timeout=hooks_timeout)
        language = lang if lang is not None else _detected_language(decision)

        def infer(ctx: PredictContext, agent: Any) -> Dict[str, Any]:
            overrides = {key: value for key, value in (("max_len", ctx.max_len),
                                                       ("head_max_len", ctx.head_max_len))
                         if value is not None}
            try:
                return agent.system_one(ctx.states[0], ctx.questions, lang=language, **overrides)
            except TypeError as exc:
                if "unexpected keyword argument 'lang'" not in str(exc):
                    raise
                return agent.system_one(ctx.states[0], ctx.questions, **overrides)

        return self._answer(state, questions, decision, call, gate, infer, max_len, head_max_len)

    system_one = predict

    def predict_long(self, state: Any, questions: Dict[str, Any], model: Any = None,
                     task: Any = None, lang: Any = None, lang_guess: Any = None,
                     window: Optional[int] = None, stride: Optional[int] = None,
                     aggregate: str = "auto", batch_size: Optional[int] = None,
                     hooks: HookArg = None, on_predict_start: PredictHookArg = None,
                     on_predict_end: PredictHookArg = None, hooks_raise: Optional[bool] = None,
                     hooks_timeout: Optional[float] = None) -> Dict[str, Any]:
        """As `predict`, but the routed agent scans the state in windows (`predict_long`)."""
        _check_request(state, questions)
        per_call = normalise_hooks(hooks, on_predict_start, on_predict_end)
        call = self._hook_call(per_call, hooks_raise=hooks_raise, hooks_timeout=hooks_timeout)
        decision = self.route(state, questions, model, task, lang, lang_guess, hooks=per_call,
                              hooks_raise=hooks_raise, hooks_timeout=hooks_timeout)

        def infer(ctx: PredictContext, agent: Any) -> Dict[str, Any]:
            # ctx.agent, not the loaded agent: a start hook may have swapped it.
            scan = getattr(ctx.agent, "predict_long", None)
            agent_type = type(ctx.agent).__name__
            if scan is None:
                raise TypeError(f"{agent_type} has no predict_long, so a state longer than its "
                                "window cannot be scanned; ONNXAgent implements it, and an agent "
                                "attached by hand needs it too")
            language = lang if lang is not None else _detected_language(ctx.decision)
            options = {"window": window, "stride": stride, "aggregate": aggregate,
                       "batch_size": batch_size}
            if _takes_keyword(scan, "lang"):
                options["lang"] = language
            elif language is not None:
                shown = (repr(language[:32]) + ("..." if len(language) > 32 else "")
                         if type(language) is str else "<not a string>")
                which = "requested" if lang is not None else "detected"
                # 6 = infer -> answer -> run_predict -> _answer -> predict_long -> the caller, so
                # the warning (and the once-per-location filter) is keyed on the caller's line.
                warnings.warn(f"laya: Router.predict_long: {agent_type}.predict_long has no `lang` "
                              f"parameter, so the {which} language {shown} is not reaching it "
                              "and the scan runs without it", RuntimeWarning, stacklevel=6)
            return scan(ctx.states[0], ctx.questions, **options)

        return self._answer(state, questions, decision, call, None, infer,
                            overwrite_routing=False)

    def predict_batch(self, requests: Sequence[Dict[str, Any]], batch_size: Optional[int] = None,
                      hooks_timeout: Optional[float] = None, min_confidence: Any = None,
                      sort_by_length: bool = False, *, hooks: HookArg = None,
                      on_predict_start: PredictHookArg = None,
                      on_predict_end: PredictHookArg = None, hooks_raise: Optional[bool] = None,
                      diagnostics: Optional[Dict[str, Any]] = None) -> List[Dict[str, Any]]:
        """Answer many requests: one load per checkpoint, one forward pass per question group.

        Each result is what `predict` would return for that request, and Router-level hooks run
        per request (all starts of a checkpoint group before its ends, ends in reverse order).
        """
        gate = None if min_confidence is None else check_min_confidence(min_confidence)
        decisions = self.route_batch(requests, hooks_timeout, hooks=hooks,
                                     hooks_raise=hooks_raise)
        if not decisions:
            return []
        call = self._hook_call(hooks, on_predict_start, on_predict_end, hooks_raise,
                               hooks_timeout)
        checkpoint_groups: Dict[str, List[int]] = {}
        for i, decision in enumerate(decisions):
            checkpoint_groups.setdefault(self.resolve(decision["model"]), []).append(i)
        report = ({"groups": 0, "reordered": 0, "smallest": None, "largest": None}
                  if sort_by_length and diagnostics is not None else None)
        results: List[Any] = [None] * len(requests)
        answered = 0
        for key, indices in checkpoint_groups.items():
            agent = self.load(key)
            started: List[PredictContext] = []
            try:
                for i in indices:
                    ctx = PredictContext(states=[requests[i]["state"]],
                                         questions=requests[i]["questions"],
                                         decision=dict(decisions[i]), model=key, agent=agent,
                                         router=self, max_len=requests[i].get("max_len"),
                                         head_max_len=requests[i].get("head_max_len"))
                    started.append(ctx)
                    call.fire("on_predict_start", ctx)
                self._run_question_groups(agent, list(zip(indices, started)), requests,
                                          decisions, batch_size, sort_by_length, report)
                usages = [aggregate_usage(ctx.results) for ctx in started]
                for ctx, usage in zip(started, usages):
                    ctx.usage = usage
            except BaseException as exc:
                _gate_all(started, gate)
                end_group(call, started, exc)
                raise
            _gate_all(started, gate)
            end_group(call, started)
            for i, ctx in zip(indices, started):
                results[i] = ctx.results[0]
            answered += len(indices)
        if answered != len(requests):
            raise RuntimeError("internal error: batch execution did not produce every result")
        if report is not None:
            diagnostics["sort_by_length"] = report
        return results

    predict_many = predict_batch

    def _run_question_groups(self, agent: Any, members: List[Tuple[int, PredictContext]],
                             requests: Sequence[Dict[str, Any]], decisions: List[RouteDecision],
                             batch_size: Optional[int], sort_by_length: bool,
                             report: Optional[Dict[str, Any]]) -> None:
        """One `agent.predict_batch` per group of requests that can share a forward pass."""
        per_language = bool(getattr(agent, "lang_temperatures", None))
        groups: List[Dict[str, Any]] = []
        for i, ctx in members:
            if ctx.results is not None:  # answered by a start hook
                for result in ctx.results:
                    if isinstance(result, dict):
                        result.setdefault("routing", dict(decisions[i]))
                continue
            overrides = {name: value for name, value in (("max_len", ctx.max_len),
                                                         ("head_max_len", ctx.head_max_len))
                         if value is not None}
            language = None
            if per_language:
                language = requests[i].get("lang")
                if language is None:
                    language = _detected_language(decisions[i])
            schema = json.dumps(ctx.questions, sort_keys=False, ensure_ascii=False, default=str)
            group = next((g for g in groups if g["schema"] == schema
                          and g["overrides"] == overrides and g["lang"] == language), None)
            if group is None:
                group = {"schema": schema, "questions": ctx.questions, "overrides": overrides,
                         "lang": language, "members": []}
                groups.append(group)
            group["members"].append((i, ctx))
        for group in groups:
            options = dict(group["overrides"])
            if group["lang"] is not None:
                options["lang"] = group["lang"]
            if sort_by_length:
                options["sort_by_length"] = True
            states = [ctx.states[0] for _, ctx in group["members"]]
            with defaults_suppressed():
                batch = _call_dropping_unknown(agent.predict_batch, states, group["questions"],
                                               batch_size, options)
            if len(batch) != len(states):
                raise RuntimeError(f"internal error: Agent.predict_batch returned {len(batch)} "
                                   f"results for {len(states)} states")
            if report is not None:
                size = len(states)
                report["groups"] += 1
                report["reordered"] += int(bool("sort_by_length" in options and batch_size
                                                and 1 < batch_size < size))
                report["smallest"] = size if report["smallest"] is None else min(
                    report["smallest"], size)
                report["largest"] = size if report["largest"] is None else max(
                    report["largest"], size)
            for (i, ctx), result in zip(group["members"], batch):
                result["routing"] = dict(decisions[i])
                ctx.results = [result]


def _check_request(state: Any, questions: Any) -> None:
    if state is None:
        raise TypeError("state must not be None; pass a string, dict, or list")
    if not isinstance(questions, dict):
        raise TypeError("questions must be a dict of question id -> definition, got "
                        f"{type(questions).__name__}")


def _detected_language(decision: Any) -> Optional[str]:
    detection = (decision or {}).get("detection") or {}
    return detection.get("language") or None


def _gate_all(contexts: Sequence[PredictContext], gate: Any) -> None:
    for ctx in contexts:
        if ctx.results:
            apply_gate(ctx.results, gate)


def _call_dropping_unknown(predict_batch: Callable[..., Any], states: List[Any],
                           questions: Dict[str, Any], batch_size: Optional[int],
                           options: Dict[str, Any]) -> Any:
    """Call an agent's predict_batch; an agent that does not take `lang`/`sort_by_length` is
    called again without the keyword it refused."""
    try:
        return predict_batch(states, questions, batch_size=batch_size, **options)
    except TypeError as exc:
        refused = [name for name in ("lang", "sort_by_length") if name in options
                   and f"unexpected keyword argument '{name}'" in str(exc)]
        if not refused:
            raise
        for name in refused:
            options.pop(name)
        return predict_batch(states, questions, batch_size=batch_size, **options)
