"""`laya-edge demo`: the runtime end to end on the bundles shipped in `models/`, no network.

Where the bundles are: in a checkout (and an editable install) the repository's `models/` next to
the package; in an installed wheel the same files as the data package `laya_edge_models`
(pyproject.toml maps `models/` onto it), found without importing anything heavy.

`models/demo.json` names the bundle behind each of the Router's two built-in routes and says
whether it was trained. A Router keeping one checkpoint resident serves them, so a German ticket
after English ones shows routing, an eviction and a load; an audit hook prints every hook event
and a cache hook answers a repeated ticket without running the model.
"""
from __future__ import annotations

import importlib.util
import json
import os
import threading
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

from .hooks import BaseHook

MODELS_ENV = "LAYA_EDGE_DEMO_MODELS"
# the installed name of the repository's models/ (pyproject.toml, [tool.setuptools] package-dir)
MODELS_PACKAGE = "laya_edge_models"
EXPORT_HINT = "python -m laya_edge.export --recipe export/english.json"

# What the demo asks of every ticket: the questions the trained demo model was trained on
# (scripts/demo_tickets.py writes its training data from these).
DEMO_QUESTIONS: Dict[str, Dict[str, Any]] = {
    "department": {"type": "choice", "instructions": "Which department should handle this ticket?",
                   "criteria": {"billing": "charges, invoices and payments",
                                "technical support": "bugs, errors and devices not working",
                                "shipping": "deliveries, parcels and tracking",
                                "account access": "logins, passwords and account security",
                                "sales": "quotes, prices and new purchases"}},
    "urgency": {"type": "score", "instructions": "How urgent is this ticket?",
                "criteria": ["low: no rush", "medium: within days", "high: needed today",
                             "critical: emergency, work stopped"]},
    "churn_risk": {"type": "noul",
                   "instructions": "Is the customer at risk of cancelling or leaving?"},
    "refund": {"type": "noul", "instructions": "Is the customer asking for a refund?"},
    "sentiment": {"type": "choice", "instructions": "What is the customer's sentiment?",
                  "criteria": ["positive", "neutral", "negative"]},
}

DUPLICATE_CHARGE = ("Hi, I was charged twice for my subscription this month. Please refund the "
                    "duplicate payment today. If this isn't fixed I'm cancelling my account.")
TICKETS = [
    DUPLICATE_CHARGE,
    "My laptop won't turn on since the last update. No rush, whenever you have time is fine. "
    "Thanks, you've always been very helpful!",
    "Our entire team is locked out, the two-factor code is never accepted. This is an "
    "emergency, our business is completely down.",
    "Meine Rechnung wurde doppelt abgebucht. Bitte erstatten Sie mir den Betrag.",
    "Do you offer a discount if we buy 50 units of the printer? Could you look into it this "
    "week?",
    DUPLICATE_CHARGE,
]


def checkout_models() -> Path:
    """The `models/` folder next to the package in a source checkout (absent in a wheel)."""
    return Path(__file__).resolve().parents[1] / "models"


def installed_models() -> Optional[Path]:
    """The folder of the installed data package `laya_edge_models`, or None where it is not
    installed. Looks the package up without running it."""
    try:
        spec = importlib.util.find_spec(MODELS_PACKAGE)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))).resolve()


def models_dir() -> Path:
    """`$LAYA_EDGE_DEMO_MODELS`; else the checkout's `models/` where it has `demo.json`; else the
    installed `laya_edge_models`; else the checkout's path, which `demo_setup` reports missing."""
    configured = os.environ.get(MODELS_ENV)
    if configured:
        return Path(configured)
    checkout = checkout_models()
    if (checkout / "demo.json").is_file():
        return checkout
    installed = installed_models()
    if installed is not None and (installed / "demo.json").is_file():
        return installed
    return checkout


def demo_setup(directory: Path) -> Dict[str, Any]:
    """`directory/demo.json` with its bundle names resolved to paths that exist."""
    manifest = directory / "demo.json"
    if not manifest.is_file():
        raise FileNotFoundError(
            f"no demo models at {str(directory)!r} (expected demo.json there): the wheel ships "
            f"them as the package {MODELS_PACKAGE} (reinstall laya-edge if it is missing), a "
            f"checkout has them in models/; or set {MODELS_ENV} or --models")
    setup = json.loads(manifest.read_text(encoding="utf-8"))
    for route in ("english", "multilingual"):
        bundle = directory / setup["routes"][route]
        if not bundle.is_dir():
            raise FileNotFoundError(f"{manifest}: the {route} bundle {str(bundle)!r} is missing")
        setup["routes"][route] = bundle
    return setup


class EventLog(BaseHook):
    """Records each hook event the Router dispatches (one instance serves every thread)."""

    def __init__(self) -> None:
        self.events: List[str] = []
        self._lock = threading.Lock()

    def _add(self, text: str) -> None:
        with self._lock:
            self.events.append(text)

    def on_route(self, ctx: Any) -> None:
        self._add(f"on_route -> {(ctx.decision or {}).get('model')}")

    def on_load(self, ctx: Any) -> None:
        self._add(f"on_load {ctx.model}")

    def on_evict(self, ctx: Any) -> None:
        self._add(f"on_evict {ctx.model}")

    def on_predict_start(self, ctx: Any) -> None:
        self._add("on_predict_start")

    def on_predict_end(self, ctx: Any) -> None:
        self._add(f"on_predict_end ({ctx.elapsed_ms:.0f} ms)")

    def drain(self) -> List[str]:
        with self._lock:
            events, self.events = self.events, []
        return events


class AnswerCache(BaseHook):
    """Answers a call from memory (`ctx.skip`) when the same checkpoint already answered every
    state with the same questions, and remembers what the model answers."""

    def __init__(self) -> None:
        self.entries: Dict[str, Any] = {}
        self.hits = 0
        self._lock = threading.Lock()

    @staticmethod
    def _key(ctx: Any, index: int) -> str:
        return json.dumps([ctx.states[index], ctx.questions, ctx.model], default=str)

    def on_predict_start(self, ctx: Any) -> None:
        with self._lock:
            found = [self.entries.get(self._key(ctx, i)) for i in range(len(ctx.states))]
            if all(entry is not None for entry in found):
                self.hits += 1
                ctx.skip(found)

    def on_predict_end(self, ctx: Any) -> None:
        if ctx.error is None and ctx.results:
            with self._lock:
                for i, result in enumerate(ctx.results):
                    self.entries[self._key(ctx, i)] = result


def run_demo(directory: Path, json_output: bool = False) -> int:
    """Run the demo on the models in `directory`; prints a narrated run, or one JSON document
    with `json_output`."""
    from .presentation import answer_label
    from .router import Router

    setup = demo_setup(directory)
    events, cache = EventLog(), AnswerCache()
    router = Router(models={route: str(path) for route, path in setup["routes"].items()},
                    max_loaded=1, hooks=[events, cache])
    say = (lambda *parts: None) if json_output else print
    say(f"laya_edge demo: models in {directory}")
    for line in setup["about"]:
        say(f"  {line}")
    say(f"  A real Laya checkpoint, where the Hugging Face hub is reachable: {EXPORT_HINT}\n")
    runs = []
    started = time.perf_counter()
    for ticket in TICKETS:
        call = time.perf_counter()
        payload = router.predict(ticket, DEMO_QUESTIONS)
        elapsed = (time.perf_counter() - call) * 1000
        run = {"ticket": ticket,
               "routing": {key: payload["routing"][key] for key in ("model", "reason")},
               "answers": payload["answers"], "events": events.drain(),
               "elapsed_ms": round(elapsed, 1)}
        runs.append(run)
        say(f"ticket: {ticket[:88]}{'...' if len(ticket) > 88 else ''}")
        say(f"  routed to {run['routing']['model']}: {run['routing']['reason']}")
        for key, answer in payload["answers"].items():
            label = answer_label(answer, DEMO_QUESTIONS[key])
            say(f"    {key:<11} {label:<44} answer_confidence {answer['answer_confidence']:.2f}")
        say(f"  hooks: {', '.join(run['events'])}")
        say(f"  {elapsed:.0f} ms\n")
    total = (time.perf_counter() - started) * 1000
    say(f"{len(TICKETS)} tickets in {total:.0f} ms; {cache.hits} answered by the cache hook "
        "without running the model.")
    if json_output:
        print(json.dumps({"models": str(directory), "trained": setup["trained"],
                          "about": setup["about"], "runs": runs, "cache_hits": cache.hits,
                          "total_ms": round(total, 1)}, indent=2, ensure_ascii=False))
    return 0
