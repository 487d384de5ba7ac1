"""What the HTTP service tells its operator, on a real server: `/metrics` in the Prometheus text
format counts what happened, every answer echoes its `X-Request-ID`, and every logged error
names it."""
import logging

import httpx
import pytest
from prometheus_client import CONTENT_TYPE_LATEST
from prometheus_client.parser import text_string_to_metric_families

import laya_edge
from laya_edge.serving.metrics import ServiceMetrics
from test_serve import QUESTIONS, STATES, make_router, serving
from test_serve_health import copy_bundle, corrupt_weights

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")
BODY = {"state": STATES[0], "questions": QUESTIONS}


def samples(text):
    """`{(sample name, sorted label items): value}` of an exposition."""
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


def scrape(base, **headers):
    response = httpx.get(f"{base}/metrics", headers=headers, timeout=30)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == CONTENT_TYPE_LATEST
    return samples(response.text)


def test_metrics_count_requests_inference_loads_and_evictions(bundles):
    router = make_router(bundles, max_loaded=1)
    with serving(router) as base:
        answered = [httpx.post(f"{base}/v1/systemone", json=BODY, timeout=60) for _ in range(3)]
        invalid = httpx.post(f"{base}/v1/systemone", json=dict(BODY, temperature=1))
        unknown = httpx.get(f"{base}/wp-login.php")
        after_one_model = scrape(base)
        other_model = httpx.post(f"{base}/v1/systemone", json=dict(BODY, model="multilingual"),
                                 timeout=60)
        after_two = scrape(base)
    assert [r.status_code for r in answered + [invalid, unknown, other_model]] == [
        200, 200, 200, 422, 404, 200]
    requests = {(dict(labels)["route"], dict(labels)["status"]): value
                for (name, labels), value in after_one_model.items()
                if name == "laya_edge_requests_total"}
    assert requests == {("/v1/systemone", "200"): 3, ("/v1/systemone", "422"): 1,
                        ("other", "404"): 1}
    assert after_one_model["laya_edge_request_seconds_count",
                           (("route", "/v1/systemone"),)] == 4
    assert after_one_model["laya_edge_inference_seconds_count",
                           (("route", "/v1/systemone"),)] == 3
    assert after_one_model["laya_edge_model_loads_total", (("model", "english"),)] == 1
    assert after_one_model["laya_edge_models_loaded", ()] == 1
    assert not any(name == "laya_edge_model_evictions_total" for name, _ in after_one_model)
    assert after_two["laya_edge_model_loads_total", (("model", "multilingual"),)] == 1
    assert after_two["laya_edge_model_evictions_total", (("model", "english"),)] == 1
    assert after_two["laya_edge_models_loaded", ()] == 1
    assert after_two["laya_edge_inference_seconds_count", (("route", "/v1/systemone"),)] == 4


def test_metrics_need_the_token_when_auth_is_on(bundles):
    with serving(make_router(bundles), api_key="s3cret") as base:
        anonymous = httpx.get(f"{base}/metrics")
        found = scrape(base, authorization="Bearer s3cret")
    assert anonymous.status_code == 401
    assert found["laya_edge_requests_total", (("route", "/metrics"), ("status", "401"))] == 1


def test_queue_and_batch_reports_show_in_the_exposition():
    metrics = ServiceMetrics(laya_edge.Router())
    metrics.queue_entered()
    metrics.queue_entered()
    metrics.queue_left(0.25)
    metrics.batch(4)
    metrics.batch(1)
    found = samples(metrics.exposition().decode())
    assert found["laya_edge_queue_depth", ()] == 1
    assert (found["laya_edge_queue_wait_seconds_count", ()],
            found["laya_edge_queue_wait_seconds_sum", ()]) == (1, 0.25)
    assert (found["laya_edge_batch_size_count", ()],
            found["laya_edge_batch_size_sum", ()]) == (2, 5)
    assert found["laya_edge_batch_size_bucket", (("le", "2.0"),)] == 1


def test_every_answer_echoes_its_request_id(bundles):
    with serving(make_router(bundles)) as base:
        given = httpx.post(f"{base}/v1/systemone", json=BODY, timeout=60,
                           headers={"X-Request-ID": "ticket-42/retry-1"})
        generated = [httpx.get(f"{base}/nowhere"), httpx.get(f"{base}/v1/systemone"),
                     httpx.post(f"{base}/v1/systemone", content=b"{"),
                     httpx.get(f"{base}/health/live")]
        refused = [httpx.get(f"{base}/health/live", headers={"X-Request-ID": value})
                   for value in ("x" * 129, "caf\xe9".encode("latin-1"), "a\tb", "")]
    assert given.status_code == 200 and given.headers["X-Request-ID"] == "ticket-42/retry-1"
    assert [r.status_code for r in generated] == [404, 405, 400, 200]
    ids = [r.headers["X-Request-ID"] for r in generated + refused]
    assert len(set(ids)) == len(ids)
    assert all(len(value) == 32 and set(value) <= set("0123456789abcdef") for value in ids)


def test_logged_errors_name_the_request_id(bundles, tmp_path, caplog):
    def fail(ctx):
        raise RuntimeError("the model caught fire")

    class Unreadable(laya_edge.Router):
        def predict(self, *args, **kwargs):
            return ["not", "a", "result"]

    router = make_router(bundles, on_predict_start=fail)
    router.register("broken", str(corrupt_weights(copy_bundle(bundles, tmp_path, "broken"))))
    unreadable = Unreadable()
    caplog.set_level(logging.ERROR, logger="laya_edge.serve")
    with serving(router) as base, serving(unreadable) as second:
        failed = httpx.post(f"{base}/v1/systemone", json=BODY, timeout=60,
                            headers={"X-Request-ID": "trace-7"})
        unloadable = httpx.post(f"{base}/v1/systemone", json=dict(BODY, model="broken"),
                                timeout=60)
        crashed = httpx.post(f"{second}/v1/systemone", json=BODY, timeout=60)
    assert (failed.status_code, failed.headers["X-Request-ID"]) == (500, "trace-7")
    assert unloadable.status_code == 503 and crashed.status_code == 500
    assert crashed.json() == {"detail": "internal error"}
    messages = [record.getMessage() for record in caplog.records
                if record.name == "laya_edge.serve" and record.levelno == logging.ERROR]
    assert messages == [
        "request trace-7: inference failed",
        f"request {unloadable.headers['X-Request-ID']}: model 'broken' failed to load",
        f"request {crashed.headers['X-Request-ID']}: unhandled error"]
