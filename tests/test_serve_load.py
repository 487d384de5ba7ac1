"""The service under load: dynamic batching answers exactly what one-by-one calls answer, never
merges different question sets, and isolates a bad request; the bounded queue waits, then
refuses with 503 + Retry-After; SIGTERM drains what was accepted."""
from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from laya_edge.serving.admission import Admission
from laya_edge.serving.batching import Batcher, answer_batch
from laya_edge.serving.http import Limits
from test_serve import QUESTIONS, STATES, free_port, make_router, serving, without_jev

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")
REPO = Path(__file__).resolve().parents[1]
OTHER = {"urgent": {"type": "noul", "instructions": "Does the customer threaten to leave?"}}


class Recorder:
    """Every Router-level hook event, per state, in order."""

    def __init__(self):
        self.events, self.lock = [], threading.Lock()

    def _record(self, event, ctx):
        with self.lock:
            self.events.append((event, ctx.states[0] if ctx.states else None))

    def on_route(self, ctx):
        self._record("on_route", ctx)

    def on_predict_start(self, ctx):
        self._record("on_predict_start", ctx)

    def on_predict_end(self, ctx):
        self._record("on_predict_end", ctx)


def per_state(events):
    grouped = {}
    for event, state in events:
        grouped.setdefault(state, []).append(event)
    return grouped


def post_all(url, bodies):
    """All bodies at once, each on its own connection; the responses in body order."""
    async def send():
        async with httpx.AsyncClient(timeout=60) as client:
            return await asyncio.gather(*[client.post(f"{url}/v1/systemone", json=body)
                                          for body in bodies])
    return asyncio.run(send())


def metric(url, name):
    text = httpx.get(f"{url}/metrics").text
    samples = {sample.name: sample.value for family in text_string_to_metric_families(text)
               for sample in family.samples}
    return samples.get(name, 0.0)


def assert_same_payload(ours, theirs):
    """Identical keys, discrete answers, usage and routing; floats within one published unit
    (rows that share a session run may round the fourth decimal differently)."""
    assert ours.keys() == theirs.keys()
    assert ours["usage"] == theirs["usage"] and ours["routing"] == theirs["routing"]
    for qid, answer in ours["answers"].items():
        other = theirs["answers"][qid]
        assert answer.keys() == other.keys()
        for key, value in answer.items():
            if isinstance(value, float):
                assert abs(value - other[key]) <= 1e-4 + 1e-9, (qid, key)
            elif key == "probabilities":
                assert value.keys() == other[key].keys()
                assert all(abs(v - other[key][k]) <= 1e-4 + 1e-9 for k, v in value.items())
            elif key != "action":
                assert value == other[key], (qid, key)


def test_batched_requests_answer_as_one_by_one_calls(bundles):
    states = [f"{state} (ticket {i})" for i in range(3) for state in STATES]
    served_hooks, alone_hooks = Recorder(), Recorder()
    limits = Limits(max_batch=len(states), max_wait_ms=2000)
    with serving(make_router(bundles, hooks=[served_hooks]), limits=limits) as url:
        responses = post_all(url, [{"state": state, "questions": QUESTIONS} for state in states])
        batches = metric(url, "laya_edge_batch_size_count")
    assert [response.status_code for response in responses] == [200] * len(states)
    assert batches < len(states)  # some were merged
    alone = make_router(bundles, hooks=[alone_hooks])
    for state, response in zip(states, responses):
        assert_same_payload(without_jev(response.json()), alone.predict(state, QUESTIONS))
    assert per_state(served_hooks.events) == per_state(alone_hooks.events)


def test_a_bad_request_in_a_batch_fails_alone(bundles):
    router = make_router(bundles)
    requests = [{"state": STATES[0], "questions": QUESTIONS},
                {"state": STATES[1], "questions": QUESTIONS, "max_len": 4},
                {"state": STATES[2], "questions": QUESTIONS}]
    answers = answer_batch(router, requests)
    assert isinstance(answers[1], ValueError) and "max_len=4" in str(answers[1])
    for request, answer in zip(requests[::2], answers[::2]):
        assert_same_payload(answer, router.predict(request["state"], request["questions"]))


def test_different_questions_or_controls_are_never_merged():
    """Real asyncio, a recording answer function: each batch holds one question set and one
    set of controls, and every request gets its own answer back."""
    seen = []

    def answer(requests):
        seen.append(requests)
        return [f"answer to {request['state']}" for request in requests]

    requests = ([{"state": f"a{i}", "questions": QUESTIONS} for i in range(3)]
                + [{"state": f"b{i}", "questions": OTHER} for i in range(3)]
                + [{"state": f"c{i}", "questions": QUESTIONS, "lang": "de"} for i in range(2)])

    async def run():
        batcher = Batcher(answer, max_batch=8, max_wait_s=0.05, calls=asyncio.Semaphore(1))
        return await asyncio.gather(*[batcher.submit(request) for request in requests])

    assert asyncio.run(run()) == [f"answer to {request['state']}" for request in requests]
    assert sorted(len(batch) for batch in seen) == [2, 3, 3]
    for batch in seen:
        assert len({(str(r["questions"]), r.get("lang")) for r in batch}) == 1


def test_a_full_batch_goes_at_once_and_a_lone_request_waits_at_most_the_window():
    sizes = []

    async def run():
        batcher = Batcher(lambda requests: [None] * len(requests), max_batch=2,
                          max_wait_s=30.0, calls=asyncio.Semaphore(1), on_batch=sizes.append)
        began = time.perf_counter()
        await asyncio.gather(batcher.submit({"state": 1}), batcher.submit({"state": 2}))
        full = time.perf_counter() - began
        lone = Batcher(lambda requests: [None] * len(requests), max_batch=8, max_wait_s=0.05,
                       calls=asyncio.Semaphore(1))
        began = time.perf_counter()
        await lone.submit({"state": 3})
        return full, time.perf_counter() - began

    full, lone = asyncio.run(run())
    assert sizes == [2] and full < 5.0 and 0.04 <= lone < 5.0


def test_requests_arriving_while_a_call_runs_fill_the_next_batch():
    """With one Router call at a time, requests whose window passed while a call ran still
    join one group: the next batch is everything that arrived meanwhile."""
    seen, started, release = [], threading.Event(), threading.Event()

    def answer(requests):
        seen.append(len(requests))
        if len(seen) == 1:
            started.set()
            release.wait(10)
        return [None] * len(requests)

    async def run():
        batcher = Batcher(answer, max_batch=16, max_wait_s=0.01, calls=asyncio.Semaphore(1))
        first = asyncio.create_task(batcher.submit({"state": 0}))
        await asyncio.to_thread(started.wait, 10)
        rest = [asyncio.create_task(batcher.submit({"state": i})) for i in range(1, 6)]
        await asyncio.sleep(0.1)  # their window passes while the first call still runs
        release.set()
        await asyncio.gather(first, *rest)

    asyncio.run(run())
    assert seen == [1, 5]


def slow_router(bundles, seconds):
    class Slow:
        def on_predict_start(self, ctx):
            time.sleep(seconds)

    return make_router(bundles, hooks=[Slow()])


def busy_answers(bundles, hold_s, requests, **limits):
    """`requests` identical requests at once to a server whose Router holds each for `hold_s`,
    one call at a time: their statuses, sorted, and the 503 answers."""
    body = {"state": STATES[0], "questions": QUESTIONS}
    with serving(slow_router(bundles, hold_s),
                 limits=Limits(max_concurrent=1, max_batch=1, **limits)) as url:
        responses = post_all(url, [body] * requests)
    return (sorted(response.status_code for response in responses),
            [response for response in responses if response.status_code == 503])


def test_a_full_queue_is_a_503_with_retry_after(bundles):
    statuses, (busy,) = busy_answers(bundles, 1.0, 3, max_queue=1, queue_timeout_s=30)
    assert statuses == [200, 200, 503]
    assert busy.headers["Retry-After"] == "1" and "waiting" in busy.json()["detail"]


def test_a_wait_past_the_queue_timeout_is_a_503(bundles):
    statuses, (busy,) = busy_answers(bundles, 1.5, 2, max_queue=8, queue_timeout_s=0.3)
    assert statuses == [200, 503]
    assert "within 0.3 s" in busy.json()["detail"] and busy.headers["Retry-After"] == "1"


def test_waiters_are_served_in_arrival_order_and_a_cancelled_one_gives_its_turn_on():
    async def run():
        gate = Admission(max_concurrent=1, max_queue=4, queue_timeout_s=5)
        order, release = [], asyncio.Event()

        async def request(name, hold=None):
            async with gate.admitted():
                order.append(name)
                if hold is not None:
                    await hold.wait()

        first = asyncio.create_task(request("first", release))
        await asyncio.sleep(0.01)
        waiting = [asyncio.create_task(request(name)) for name in ("second", "third", "fourth")]
        await asyncio.sleep(0.01)
        waiting[1].cancel()
        assert gate.depth() == 3
        release.set()
        await asyncio.gather(first, waiting[0], waiting[2], return_exceptions=True)
        with pytest.raises(asyncio.CancelledError):
            await waiting[1]
        return order, gate.depth()

    assert asyncio.run(run()) == (["first", "second", "fourth"], 0)


def test_sigterm_finishes_accepted_requests_then_exits(bundles, tmp_path):
    """A real `laya-edge serve` process: four slow requests in flight, SIGTERM; every one gets
    its answer, then the process ends, and a new connection is refused."""
    (tmp_path / "slow_hooks.py").write_text(
        "import time\nclass Slow:\n    def on_predict_start(self, ctx):\n"
        "        time.sleep(1.0)\nslow = Slow()\n")
    port = free_port()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), str(REPO),
                                                       os.environ.get("PYTHONPATH", "")]))
    server = subprocess.Popen(
        [sys.executable, "-m", "laya_edge", "serve", "--model", str(bundles["modernbert-tiny"]),
         "--port", str(port), "--hooks", "slow_hooks:slow", "--max-concurrent", "2",
         "--log-level", "warning"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert server.poll() is None and time.monotonic() < deadline, server.stderr.read()
            try:
                if httpx.get(f"{url}/health/ready").status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.1)
        results = []
        body = {"state": STATES[0], "questions": QUESTIONS}
        senders = [threading.Thread(target=lambda: results.append(
            httpx.post(f"{url}/v1/systemone", json=body, timeout=60).status_code))
            for _ in range(4)]
        for sender in senders:
            sender.start()
        time.sleep(0.5)  # all four accepted: two answering, two queued
        server.send_signal(signal.SIGTERM)
        for sender in senders:
            sender.join(60)
        code = server.wait(60)
    finally:
        if server.poll() is None:
            server.kill()
    # uvicorn re-raises the signal once drained, so the process ends as a SIGTERM'd one should
    assert sorted(results) == [200] * 4 and code == -signal.SIGTERM
    with pytest.raises(httpx.TransportError):
        httpx.get(f"{url}/health/live", timeout=5)


def test_the_cpu_default_is_no_batching_and_a_gpu_default_batches():
    from laya_edge.serving.batching import default_max_batch

    assert default_max_batch("cpu") == 1
    assert default_max_batch("cuda:0") == default_max_batch("tensorrt") > 1
    assert default_max_batch(None, available=["CPUExecutionProvider"]) == 1
    assert default_max_batch("auto", available=["CUDAExecutionProvider",
                                                "CPUExecutionProvider"]) > 1
