"""The HTTP service on a real loopback server, driven by a real HTTP client (httpx)."""
import json
import math
import os
import random
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

import laya_edge
from laya_edge import cli
from laya_edge.confidence import jev_confidence
from laya_edge.serving.http import API_KEY_ENV, Limits, create_app

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

ROOT = Path(__file__).resolve().parents[1]
QUESTIONS = {
    "dept": {"type": "choice", "instructions": "Which team should handle this ticket?",
             "criteria": {"billing": "charges and invoices", "technical": "bugs",
                          "sales": "quotes"}},
    "urgent": {"type": "noul", "instructions": "Is this urgent?"},
    "severity": {"type": "score", "instructions": "How severe?",
                 "criteria": ["minor", "major", "blocking"]},
}
STATES = ["I was charged twice for my subscription, please refund one.",
          "Die App stürzt bei jedem Start ab, bitte dringend helfen.",
          "Could you send a quote for 20 licenses?"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def serving(router, api_key=None, limits=Limits(), **options):
    """`create_app(router)` on uvicorn in a thread, on a free loopback port; yields its URL."""
    import uvicorn

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(router, api_key, limits, **options),
                                           host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "server did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)


def make_router(bundles, **kwargs):
    return laya_edge.Router(models={"english": str(bundles["modernbert-tiny"]),
                                    "multilingual": str(bundles["unigram-tiny"])}, **kwargs)


@pytest.fixture(scope="module")
def url(bundles):
    with serving(make_router(bundles)) as base:
        yield base


@pytest.fixture(scope="module")
def reference(bundles):
    return make_router(bundles)


def without_jev(result):
    """The result as the Router returns it: `x_jev_confidence` is the service's addition."""
    return dict(result, answers={qid: {k: v for k, v in answer.items() if k != "x_jev_confidence"}
                                 for qid, answer in result["answers"].items()})


def as_json(value):
    return json.loads(json.dumps(value))


@pytest.mark.parametrize("state", STATES)
def test_a_valid_request_answers_as_the_router_does(url, reference, state):
    response = httpx.post(f"{url}/v1/systemone", json={"state": state, "questions": QUESTIONS})
    assert response.status_code == 200, response.text
    body = response.json()
    assert without_jev(body) == as_json(reference.predict(state, QUESTIONS))
    assert float(response.headers["X-Inference-Time-Ms"]) >= 0.0


def test_controls_reach_the_router(url, reference):
    body = {"state": STATES[0], "questions": QUESTIONS, "model": "multilingual", "max_len": 64,
            "min_confidence": 0.5, "lang": "en"}
    response = httpx.post(f"{url}/v1/systemone", json=body)
    assert response.status_code == 200, response.text
    expected = reference.predict(STATES[0], QUESTIONS, model="multilingual", max_len=64,
                                 min_confidence=0.5, lang="en")
    assert without_jev(response.json()) == as_json(expected)
    assert response.json()["routing"]["model"] == "multilingual"


def test_batch_answers_as_predict_batch(url, reference):
    response = httpx.post(f"{url}/v1/systemone/batch",
                          json={"states": STATES, "questions": QUESTIONS, "max_len": 96})
    assert response.status_code == 200, response.text
    body = response.json()
    expected = reference.predict_batch([{"state": s, "questions": QUESTIONS, "max_len": 96}
                                        for s in STATES])
    assert [without_jev(r) for r in body["results"]] == as_json(expected)
    assert body["total_usage"]["input_tokens"] == sum(r["usage"]["input_tokens"]
                                                      for r in expected)


def test_choice_and_score_answers_carry_jev_confidence(url):
    answers = httpx.post(f"{url}/v1/systemone",
                         json={"state": STATES[0], "questions": QUESTIONS}).json()["answers"]
    assert "x_jev_confidence" not in answers["urgent"]
    for qid in ("dept", "severity"):
        assert answers[qid]["x_jev_confidence"] == round(jev_confidence(answers[qid]), 4)


def test_jev_confidence_matches_upstream_formula():
    from laya.confidence import jev_confidence as upstream

    rng = random.Random(0)
    for _ in range(300):
        kind = rng.choice(("choice", "score", "noul"))
        n = rng.randint(1, 7)
        values = [rng.random() ** rng.choice((1, 4)) for _ in range(n)]
        if rng.random() < 0.1:
            values = [0.0] * n
        answer = {"type": kind, "probabilities": {str(i): v for i, v in enumerate(values)}}
        ours, theirs = jev_confidence(answer), upstream(answer)
        assert (ours is None and theirs is None) or math.isclose(ours, theirs, abs_tol=1e-12)
    bad = {"type": "choice", "probabilities": {"a": -0.1, "b": 1.1}}
    assert jev_confidence(bad) is None and upstream(bad) is None


@pytest.mark.parametrize("content, fragment", [
    (b"{not json", "valid JSON: Expecting property name"),
    (b"[1, 2]", "JSON object"),
    (b'{"state": "caf\xe9", "questions": {}}', "must be UTF-8 JSON (not valid utf-8 at byte 14)"),
    (b'{"state": ' + b"1" * 5000 + b', "questions": {}}', "numbers of at most 4300 digits"),
])
def test_malformed_bodies_are_400(url, content, fragment):
    response = httpx.post(f"{url}/v1/systemone", content=content,
                          headers={"content-type": "application/json"})
    assert response.status_code == 400 and fragment in response.json()["detail"]


def test_invalid_question_is_422_and_names_it(url):
    questions = {"dept": {"type": "choice", "instructions": "Which team?", "criteria": []}}
    response = httpx.post(f"{url}/v1/systemone", json={"state": "x", "questions": questions})
    assert response.status_code == 422 and "'dept'" in response.json()["detail"]


@pytest.mark.parametrize("extra, fragment", [
    ({"hooks": ["x"]}, "'hooks'"),
    ({"temperature": 2}, "'temperature'"),
    ({"model": "no-such-model"}, "no-such-model"),
    ({"min_confidence": 3}, "min_confidence"),
])
def test_bad_controls_are_422(url, extra, fragment):
    response = httpx.post(f"{url}/v1/systemone",
                          json=dict({"state": "x", "questions": QUESTIONS}, **extra))
    assert response.status_code == 422 and fragment in response.json()["detail"]


def test_unknown_routes_and_methods_answer_json(url):
    missing = httpx.get(f"{url}/v2/nothing")
    wrong_method = httpx.get(f"{url}/v1/systemone")
    assert missing.status_code == 404 and "detail" in missing.json()
    assert wrong_method.status_code == 405 and "detail" in wrong_method.json()


def test_limits_are_413_before_inference(bundles):
    calls = []
    router = make_router(bundles, on_predict_start=lambda ctx: calls.append(ctx))
    limits = Limits(max_body_bytes=2000, max_questions=2, max_options=3, max_state_chars=100,
                    max_batch_states=2)
    many = {f"q{i}": {"type": "noul", "instructions": "x"} for i in range(3)}
    wide = {"q": {"type": "choice", "instructions": "x", "criteria": list("abcd")}}
    with serving(router, limits=limits) as base:
        post = lambda body, path="/v1/systemone": httpx.post(f"{base}{path}", json=body)  # noqa: E731
        cases = [
            (post({"state": "x" * 3000, "questions": wide}), "body too large"),
            (post({"state": "x", "questions": many}), "too many questions"),
            (post({"state": "x", "questions": wide}), "too many options"),
            (post({"state": "x" * 150, "questions": {"q": many["q0"]}}), "state too large"),
            (post({"states": ["a", "b", "c"], "questions": {"q": many["q0"]}},
                  "/v1/systemone/batch"), "too many states"),
        ]

        def chunks():
            for _ in range(30):
                yield b" " * 100
        streamed = httpx.post(f"{base}/v1/systemone", content=chunks(),
                              headers={"content-type": "application/json"})
    for response, fragment in cases + [(streamed, "body too large")]:
        assert response.status_code == 413, response.text
        assert fragment in response.json()["detail"]
    assert "content-length" not in streamed.request.headers
    assert calls == []


def test_bearer_auth(bundles):
    router = make_router(bundles)
    body = {"state": STATES[0], "questions": QUESTIONS}
    with serving(router, api_key="s3cret") as base:
        missing = httpx.post(f"{base}/v1/systemone", json=body)
        wrong = httpx.post(f"{base}/v1/systemone", json=body,
                           headers={"Authorization": "Bearer nope"})
        right = httpx.post(f"{base}/v1/systemone", json=body,
                           headers={"Authorization": "Bearer s3cret"})
        open_health = httpx.get(f"{base}/health").json()
        full_health = httpx.get(f"{base}/health",
                                headers={"Authorization": "Bearer s3cret"}).json()
    assert missing.status_code == 401 and wrong.status_code == 401
    assert missing.headers["WWW-Authenticate"] == "Bearer"
    assert right.status_code == 200
    assert open_health == {"status": "ok"}
    assert full_health["status"] == "ok" and full_health["loaded"] == ["english"]


def test_health_without_auth_reports_what_is_loaded(url):
    health = httpx.get(f"{url}/health").json()
    assert health["status"] == "ok" and health["version"] == laya_edge.__version__
    for name in ("english", "multilingual"):
        assert health["models"][name]["loadable"] is True
        assert health["models"][name]["loaded"] is (name in health["loaded"])


def test_concurrent_requests_get_the_serial_answers(url, reference):
    expected = {state: as_json(reference.predict(state, QUESTIONS)) for state in STATES}
    work = (STATES * 3)[:8]  # admitted or queued: none is turned away

    def ask(state):
        response = httpx.post(f"{url}/v1/systemone", json={"state": state, "questions": QUESTIONS},
                              timeout=60)
        return state, response.status_code, response.json()

    with ThreadPoolExecutor(len(work)) as pool:
        results = list(pool.map(ask, work))
    for state, status, body in results:
        assert status == 200 and without_jev(body) == expected[state]


def test_routers_hooks_see_requests_and_overflow_is_503(bundles):
    """A start hook holds the one admitted request; with no queue, a second one is turned away
    meanwhile."""
    entered, release, seen = threading.Event(), threading.Event(), []

    def hold(ctx):
        seen.append(ctx.states[0])
        entered.set()
        release.wait(30)

    router = make_router(bundles, on_predict_start=hold)
    body = {"state": STATES[0], "questions": QUESTIONS}
    with serving(router, limits=Limits(max_concurrent=1, max_queue=0)) as base:
        with ThreadPoolExecutor(1) as pool:
            first = pool.submit(httpx.post, f"{base}/v1/systemone", json=body, timeout=60)
            assert entered.wait(30)
            busy = httpx.post(f"{base}/v1/systemone", json=body)
            health = httpx.get(f"{base}/health")
            release.set()
            first = first.result()
    assert busy.status_code == 503 and busy.headers["Retry-After"] == "1"
    assert health.status_code == 200
    assert first.status_code == 200 and seen == [STATES[0]]


def test_serve_rejects_a_missing_model_before_starting(capsys, tmp_path):
    code = cli.main(["serve", "--model", str(tmp_path / "nope"), "--port", "1"])
    assert code == 2 and "--model" in capsys.readouterr().err


def test_serve_command_runs_a_server(bundles, tmp_path):
    """`python -m laya_edge serve` as a user starts it: bundle, token from the environment."""
    port = free_port()
    env = dict(os.environ, **{API_KEY_ENV: "tok"})
    process = subprocess.Popen([sys.executable, "-m", "laya_edge", "serve", "--model",
                                str(bundles["modernbert-tiny"]), "--port", str(port)],
                               env=env, stderr=subprocess.PIPE, text=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None, process.stderr.read()
            try:
                httpx.get(f"{base}/health")
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "server did not come up"
                time.sleep(0.2)
        response = httpx.post(f"{base}/v1/systemone", json={"state": STATES[1],
                                                            "questions": QUESTIONS},
                              headers={"Authorization": "Bearer tok"}, timeout=60)
        refused = httpx.post(f"{base}/v1/systemone", json={"state": STATES[1],
                                                           "questions": QUESTIONS})
    finally:
        process.terminate()
        process.wait(30)
    assert response.status_code == 200 and refused.status_code == 401
    agent = laya_edge.ONNXAgent(str(bundles["modernbert-tiny"]))
    expected = agent.system_one(STATES[1], QUESTIONS)
    assert without_jev(response.json())["answers"] == as_json(expected)["answers"]
    assert response.json()["routing"]["model"] == "multilingual"
    assert "bearer auth on" in process.stderr.read()


def test_hostile_bodies_are_refused_not_crashed(url):
    deep = "[" * 100_000 + "]" * 100_000
    nested = httpx.post(f"{url}/v1/systemone", content=f'{{"state": {deep}, "questions": {{}}}}',
                        headers={"content-type": "application/json"})
    assert nested.status_code == 400 and "nested too deeply" in nested.json()["detail"]
    lone = httpx.post(f"{url}/v1/systemone", content='{"state": "a \\udc00 b", "questions": '
                      '{"q": {"type": "noul", "instructions": "x"}}}',
                      headers={"content-type": "application/json"})
    assert lone.status_code == 422 and "lone surrogate" in lone.json()["detail"]
    assert httpx.get(f"{url}/health").status_code == 200


def test_a_slow_client_is_cut_off_with_408(bundles):
    """A client that sends half a body and stalls gets 408 and frees its slot."""
    with serving(make_router(bundles), limits=Limits(body_timeout_s=0.5,
                                                     max_concurrent=1)) as base:
        port = int(base.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(b"POST /v1/systemone HTTP/1.1\r\nHost: x\r\nContent-Type: "
                         b"application/json\r\nContent-Length: 100\r\n\r\n{\"state\": ")
            reply = sock.recv(4096).decode()
        after = httpx.post(f"{base}/v1/systemone", json={"state": STATES[0],
                                                         "questions": QUESTIONS})
    assert reply.startswith("HTTP/1.1 408") and "not received within 0.5 s" in reply
    assert after.status_code == 200


def test_a_flood_is_shed_with_503_and_the_server_stays_up(bundles):
    router = make_router(bundles)
    body = {"state": STATES[0], "questions": QUESTIONS}
    with serving(router, limits=Limits(max_concurrent=2)) as base:
        with httpx.Client(timeout=60) as client, ThreadPoolExecutor(24) as pool:
            statuses = list(pool.map(lambda _: client.post(f"{base}/v1/systemone",
                                                           json=body).status_code, range(150)))
        health = httpx.get(f"{base}/health")
        after = httpx.post(f"{base}/v1/systemone", json=body)
    assert set(statuses) <= {200, 503} and 200 in statuses
    assert health.status_code == 200 and after.status_code == 200
