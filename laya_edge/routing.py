"""Which checkpoint answers a request, and why: an explicit model or task, a typed-decisions
workflow recognised by its question ids, a language code or hint, else the script and language
detected in the state (laya_edge.lang). Pure Python; loads nothing.

`Routing` is a part of `Router` (laya_edge.router); the rules and their order are described in
docs/router.md.
"""
from __future__ import annotations

from collections.abc import Sequence as SequenceABC
from typing import Any, Dict, List, Optional, Sequence, Tuple

from .hooks import HookArg, PredictContext
from .lang import analyse
from .model_names import display, match_typed_decisions_workflow

AGNOSTIC_CODES = ("c", "posix", "und", "zxx", "mul")
ENGLISH_CODES = ("en", "eng", "english")


def english_from_code(value: Any) -> Optional[bool]:
    """True/False for a language code; None when it names no language (`C`, `und`, empty)."""
    if value is None:
        return None
    code = str(value).strip().lower()
    if not code:
        return None
    primary = code.split(".", 1)[0].replace("_", "-").split("-", 1)[0]
    if not primary or primary in AGNOSTIC_CODES:
        return None
    return primary in ENGLISH_CODES


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


def with_source(decision: Dict[str, Any], agent: Any) -> RouteDecision:
    """`decision` plus `source`: where the answering agent's model came from, when the agent
    can say (`ONNXAgent.source_info`). `repo` stays the registered name, as upstream reports it;
    an agent attached under a built-in name answers from somewhere else."""
    source_info = getattr(agent, "source_info", None)
    if not callable(source_info):
        return RouteDecision(decision)
    return RouteDecision(decision, source=source_info())


class Routing:
    """Route decisions of a Router (mixed into `Router`)."""

    def _decision(self, key: str, reason: str, detection: Any = None,
                  workflow: Optional[str] = None) -> RouteDecision:
        return RouteDecision(model=key, repo=display(self.models.get(key)), reason=reason,
                             detection=detection, workflow=workflow)

    def _hint(self, hint: Any, state: Any) -> Optional[bool]:
        if hint is None:
            return None
        return english_from_code(hint(state) if callable(hint) else hint)

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
        english = english_from_code(lang)
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
