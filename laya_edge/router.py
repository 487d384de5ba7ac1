"""`Router`: pick a Laya checkpoint per request by script and language, and answer with it.

English Latin text goes to the English checkpoint, anything it cannot read (another script,
another language) to the multilingual one; typed-decisions workflows can be routed by their
question ids. The Router is put together from one part per job: the checkpoints it knows
(laya_edge.registry), which of them are loaded (laya_edge.residency), which one answers a
request (laya_edge.routing), and here, answering: `predict`, `predict_long`, `predict_batch`
with the hook lifecycle around each. Routing is pure Python and loads nothing: onnxruntime,
numpy and the tokenizer are only imported when a checkpoint is built.
"""
from __future__ import annotations

import inspect
import json
import os
import threading
import warnings
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from .confidence import apply_gate, check_min_confidence
from .controls import check_max_loaded
from .hooks import (HookArg, HookCall, HookRegistry, PredictContext, PredictHookArg,
                    aggregate_usage, defaults_suppressed, normalise_hooks)
from .lifecycle import end_group, run_predict
from .model_names import (BUNDLE_REPO, DEFAULT_MODELS, STANDALONE_MODELS, TYPED_DECISION_WORKFLOWS,
                          canonical_name, match_typed_decisions_workflow, normalise_name,
                          resolve_model_spec)
from .registry import Registry, digests_from_env
from .residency import ROUTER_OWNED_AGENT_ARGS, Residency, _Build, check_agent_kwargs
from .routing import RouteDecision, Routing, with_source

# upstream's `laya.router` offers these names too: code importing them from there keeps working
# with `laya_edge.router`
__all__ = ["BUNDLE_REPO", "DEFAULT_MODELS", "ROUTER_OWNED_AGENT_ARGS", "STANDALONE_MODELS",
           "TYPED_DECISION_WORKFLOWS", "RouteDecision", "Router", "canonical_name",
           "check_agent_kwargs", "match_typed_decisions_workflow", "normalise_name",
           "resolve_model_spec"]


def _takes_keyword(fn: Callable[..., Any], name: str) -> bool:
    """Whether `fn` accepts `name=` (or **kwargs); an uninspectable signature counts as yes."""
    try:
        parameters = inspect.signature(fn).parameters.values()
    except Exception:
        return True
    return any((p.name == name and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY))
               or p.kind is p.VAR_KEYWORD for p in parameters)


class Router(Registry, Residency, Routing, HookRegistry):
    """Routes each request to a checkpoint and answers it with that checkpoint's agent
    (`ONNXAgent` unless `agent_factory` builds another)."""

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
                 precision: Optional[str] = None,
                 agent_factory: Optional[Callable[..., Any]] = None):
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
        self.agent_factory = agent_factory
        self.agent_kwargs = dict(agent_kwargs or {})
        if self.agent_kwargs:
            check_agent_kwargs(self.agent_kwargs, agent_factory)
        self.sha256_digests: Dict[str, Any] = digests_from_env(list(self.models), self.resolve)
        self.sha256_digests.update({self.resolve(key): value
                                    for key, value in (sha256_digests or {}).items()})
        self.max_loaded = check_max_loaded(max_loaded)
        self.default = self.resolve(default)
        self.auto_task_detection = bool(auto_task_detection)
        self.lang_guess = lang_guess
        self._agents: Dict[str, Any] = {}
        self._order: List[str] = []
        self._lock = threading.RLock()
        self._build_lock = threading.Lock()
        self._loading: Dict[str, _Build] = {}
        self._load_failures: Dict[str, BaseException] = {}
        if preload:
            self.preload()

    def __repr__(self) -> str:
        return (f"Router(loaded={self.loaded}, max_loaded={self.max_loaded}, "
                f"default={self.default!r})")

    def __enter__(self) -> "Router":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.unload()

    # -- prediction ------------------------------------------------------------------------------

    def _answer(self, state: Any, questions: Dict[str, Any], routing: Dict[str, Any],
                call: HookCall, gate: Any, infer: Callable[[PredictContext, Any], Dict[str, Any]],
                max_len: Optional[int] = None, head_max_len: Optional[int] = None,
                overwrite_routing: bool = True) -> Dict[str, Any]:
        """The predict lifecycle of one routed request (route and load already done)."""
        agent = self.load(routing["model"])
        decision = with_source(routing, agent)
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
            for i in indices:
                decisions[i] = with_source(decisions[i], agent)
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
