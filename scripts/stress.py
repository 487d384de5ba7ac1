#!/usr/bin/env python3
"""Load and soak: one Router under many threads, then many calls in a row, with nothing lost.

`load`: one Router over two bundles with `max_loaded=1`, so loads and evictions race with
predictions, driven from `--threads` threads through `--requests` mixed requests (English and
German tickets, three question sets, `predict` and `predict_batch`); some requests carry a marker
that makes a start hook raise, the only exceptions allowed to escape. Every answer is compared
with the serial answer of a separate Router, every request must get exactly one end hook, and
the report gives requests/s, p50/p99 latency, loads and evictions.

`soak`: `--calls` calls on one agent with hooks that record, raise (hooks_raise=False) and time
out, sampling RSS and the thread count; the only growth allowed is the documented one: a hook
still running after `hooks_timeout` keeps its worker thread until it returns.

    python scripts/stress.py --english models/tiny-english --multilingual models/tiny-multilingual
    python scripts/stress.py ... --requests 5000 --threads 16 --calls 10000 --json report.json
"""
from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

INJECT = "[inject-failure]"
TICKETS = ["I was charged twice for my subscription, please refund one of the payments.",
           "My laptop does not start since the update, no rush.",
           "Everyone is locked out of the admin console, this is an emergency!",
           "Meine Rechnung wurde doppelt abgebucht, bitte erstatten Sie den Betrag.",
           "Das Paket ist seit zwei Wochen nicht angekommen.",
           "Could you send us a quote for 50 licenses?"]
QUESTION_SETS = [
    {"refund": {"type": "noul", "instructions": "Is the customer asking for a refund?"}},
    {"dept": {"type": "choice", "instructions": "Which team should handle this?",
              "criteria": ["billing", "technical", "shipping", "sales"]},
     "urgency": {"type": "score", "instructions": "How urgent is it?",
                 "criteria": ["low", "medium", "high"]}},
    {"churn": {"type": "noul", "instructions": "Is the customer about to leave?"},
     "sentiment": {"type": "choice", "instructions": "Sentiment?",
                   "criteria": {"positive": "happy", "neutral": None, "negative": "upset"}}},
]


class InjectedFailure(RuntimeError):
    """Raised by the start hook for requests that ask for it."""


class Recorder:
    """A Router hook counting every event; raises on states that carry the injection marker."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.events: Counter = Counter()
        self.ends: Counter = Counter()

    def _count(self, name: str) -> None:
        with self.lock:
            self.events[name] += 1

    def on_route(self, ctx: Any) -> None:
        self._count("on_route")

    def on_load(self, ctx: Any) -> None:
        self._count("on_load")

    def on_evict(self, ctx: Any) -> None:
        self._count("on_evict")

    def on_predict_start(self, ctx: Any) -> None:
        self._count("on_predict_start")
        if any(isinstance(s, str) and s.startswith(INJECT) for s in ctx.states):
            raise InjectedFailure("injected by the stress test")

    def on_predict_end(self, ctx: Any) -> None:
        with self.lock:
            self.events["on_predict_end"] += 1
            for state in ctx.states:
                self.ends[key(state, ctx.questions)] += 1


def requests_for(count: int, seed: int) -> List[Dict[str, Any]]:
    """Mixed requests; about one in twenty carries the failure marker."""
    rng = random.Random(seed)
    made = []
    for i in range(count):
        state = rng.choice(TICKETS)
        if rng.random() < 0.05:
            state = f"{INJECT} {state}"
        made.append({"id": i, "state": state, "questions": rng.choice(QUESTION_SETS),
                     "batch": rng.random() < 0.3})
    return made


def key(state: str, questions: Dict[str, Any]) -> Any:
    return (state, json.dumps(questions, sort_keys=True))


def load_test(english: str, multilingual: str, count: int = 2000, threads: int = 16,
              seed: int = 0) -> Dict[str, Any]:
    import laya_edge

    models = {"english": english, "multilingual": multilingual}
    reference = laya_edge.Router(models=models, max_loaded=2)
    serial = {key(t, q): reference.predict(t, q) for t in TICKETS for q in QUESTION_SETS}
    recorder = Recorder()
    router = laya_edge.Router(models=models, max_loaded=1, hooks=[recorder])
    work = requests_for(count, seed)
    latencies: List[float] = []
    outcome: Dict[str, Counter] = {"mismatch": Counter(), "escaped": Counter(),
                                   "injected": Counter(), "ok": Counter()}
    lock = threading.Lock()

    def run(request: Dict[str, Any]) -> None:
        state, questions = request["state"], request["questions"]
        started = time.perf_counter()
        try:
            if request["batch"]:
                result = router.predict_batch([{"state": state, "questions": questions}])[0]
            else:
                result = router.predict(state, questions)
            verdict = "ok" if result == serial.get(key(state, questions)) else "mismatch"
        except InjectedFailure:
            verdict = "injected"
        except Exception as exc:  # counted and reported: the test fails on any of these
            verdict, state = "escaped", f"{type(exc).__name__}: {exc}"
        elapsed = (time.perf_counter() - started) * 1000
        with lock:
            latencies.append(elapsed)
            outcome[verdict][state[:80]] += 1

    started = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(run, work))
    wall = time.perf_counter() - started
    expected_ends = Counter(key(r["state"], r["questions"]) for r in work)
    ordered = sorted(latencies)
    return {
        "requests": count, "threads": threads, "seconds": round(wall, 2),
        "requests_per_s": round(count / wall, 1),
        "p50_ms": round(statistics.median(ordered), 1),
        "p99_ms": round(ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))], 1),
        "ok": sum(outcome["ok"].values()), "injected": sum(outcome["injected"].values()),
        "expected_injected": sum(1 for r in work if r["state"].startswith(INJECT)),
        "mismatches": dict(outcome["mismatch"]), "escaped": dict(outcome["escaped"]),
        "events": dict(recorder.events),
        "end_hooks_per_request_exact": recorder.ends == expected_ends,
    }


def rss_mb() -> float:
    with open("/proc/self/status", encoding="ascii") as handle:
        for line in handle:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def soak(bundle: str, calls: int = 10_000, sample_every: int = 1000,
         slow_hook_s: float = 0.2, timeout_s: float = 0.05) -> Dict[str, Any]:
    """`calls` calls with recording, raising and (every 1000th call) timing-out hooks."""
    import laya_edge

    ended = Counter()

    def record(ctx: Any) -> None:
        ended["end"] += 1

    def broken(ctx: Any) -> None:
        raise RuntimeError("a broken hook")

    agent = laya_edge.ONNXAgent(bundle, on_predict_end=[record, broken], hooks_raise=False)
    questions = QUESTION_SETS[1]
    samples = []
    slow_calls = 0
    started = time.perf_counter()
    for i in range(calls):
        if i % 1000 == 999:
            slow_calls += 1
            agent.system_one(TICKETS[i % 3], questions, hooks_timeout=timeout_s,
                             on_predict_start=lambda ctx: time.sleep(slow_hook_s))
        else:
            agent.system_one(TICKETS[i % 3], questions)
        if i % sample_every == 0 or i == calls - 1:
            samples.append({"call": i, "rss_mb": round(rss_mb(), 1),
                            "threads": threading.active_count()})
    time.sleep(slow_hook_s * 2)  # let the timed-out hooks finish
    first, last = samples[1] if len(samples) > 1 else samples[0], samples[-1]
    return {"calls": calls, "seconds": round(time.perf_counter() - started, 1),
            "end_hooks": ended["end"], "timed_out_hook_calls": slow_calls,
            "samples": samples, "rss_growth_mb": round(last["rss_mb"] - first["rss_mb"], 1),
            "threads_after": threading.active_count()}


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    root = Path(__file__).resolve().parents[1] / "models"
    parser.add_argument("--english", default=str(root / "tiny-english"))
    parser.add_argument("--multilingual", default=str(root / "tiny-multilingual"))
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--threads", type=int, default=16)
    parser.add_argument("--calls", type=int, default=10_000, help="soak calls (0: skip)")
    parser.add_argument("--json", help="also write the report here")
    args = parser.parse_args(argv)
    report = {"load": load_test(args.english, args.multilingual, args.requests, args.threads)}
    if args.calls:
        report["soak"] = soak(args.english, args.calls)
    report["machine"] = {"cpus": os.cpu_count(), "python": sys.version.split()[0]}
    text = json.dumps(report, indent=2, default=str)
    print(text)
    if args.json:
        Path(args.json).write_text(text + "\n", encoding="utf-8")
    load = report["load"]
    healthy = (not load["mismatches"] and not load["escaped"]
               and load["injected"] == load["expected_injected"]
               and load["end_hooks_per_request_exact"])
    return 0 if healthy else 1


if __name__ == "__main__":
    sys.exit(main())
