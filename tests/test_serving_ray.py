"""laya_edge's service on a real local Ray Serve instance: two replicas, concurrent requests
over loopback HTTP, answers as the Router's, and requests batched by Ray Serve."""
import json
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

import laya_edge
from laya_edge.serving.ray import NAME, deployment
from test_serve import QUESTIONS, STATES, free_port, without_jev

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::RuntimeWarning")


def models(bundles):
    return {"english": str(bundles["modernbert-tiny"]),
            "multilingual": str(bundles["unigram-tiny"])}


@pytest.fixture(scope="module")
def ray_app(bundles):
    import ray
    from ray import serve

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        port = free_port()
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        serve.run(deployment(models(bundles), replicas=2, num_cpus=0.5, max_batch_size=8,
                             batch_wait_timeout_s=0.05), name=NAME, route_prefix="/")
        yield f"http://127.0.0.1:{port}", serve.get_app_handle(NAME)
    finally:
        serve.shutdown()
        ray.shutdown()


def replica_stats(handle, replicas=2, attempts=60):
    """`{replica id: batch sizes}` until every replica has answered a stats call."""
    seen = {}
    for _ in range(attempts):
        stats = handle.stats.remote().result(timeout_s=30)
        seen[stats["replica"]] = stats["batch_sizes"]
        if len(seen) == replicas:
            break
    return seen


def test_two_replicas_batch_concurrent_requests_and_answer_as_the_router(ray_app, bundles):
    url, handle = ray_app
    reference = laya_edge.Router(models=models(bundles))
    work = STATES * 8

    def ask(state):
        response = httpx.post(f"{url}/v1/systemone", json={"state": state,
                                                           "questions": QUESTIONS}, timeout=120)
        return state, response.status_code, response.json()

    with ThreadPoolExecutor(len(work)) as pool:
        answered = list(pool.map(ask, work))
    for state, status, body in answered:
        assert status == 200, body
        assert without_jev(body) == json.loads(json.dumps(reference.predict(state, QUESTIONS)))
    stats = replica_stats(handle)
    sizes = [size for batch in stats.values() for size in batch]
    assert len(stats) == 2
    assert sum(sizes) == len(work) and max(sizes) > 1


def test_the_service_contract_is_the_built_in_one(ray_app):
    url, _ = ray_app
    health = httpx.get(f"{url}/health", timeout=30).json()
    assert health["status"] == "ok"
    invalid = httpx.post(f"{url}/v1/systemone", json={"state": "x", "questions": {
        "q": {"type": "choice", "instructions": "?", "criteria": []}}}, timeout=30)
    assert invalid.status_code == 422 and "'q'" in invalid.json()["detail"]
    unknown = httpx.post(f"{url}/v1/systemone", json={"state": "x", "questions": QUESTIONS,
                                                      "model": "nope"}, timeout=30)
    assert unknown.status_code == 422 and "nope" in unknown.json()["detail"]
    batch = httpx.post(f"{url}/v1/systemone/batch", json={"states": STATES,
                                                          "questions": QUESTIONS}, timeout=60)
    assert batch.status_code == 200 and len(batch.json()["results"]) == len(STATES)


def test_serve_engine_ray_reads_the_same_model_options(bundles, tmp_path):
    from laya_edge import cli

    bundle = str(bundles["modernbert-tiny"])
    assert cli.ray_setup(None) == ({}, {})
    assert cli.ray_setup(bundle) == ({"english": bundle, "multilingual": bundle}, {})
    config = tmp_path / "router.json"
    config.write_text(json.dumps({"models": models(bundles), "max_loaded": 1}))
    assert cli.ray_setup(str(config)) == (models(bundles), {"max_loaded": 1})
    config.write_text(json.dumps({"models": models(bundles), "no_such_option": 1}))
    with pytest.raises(cli.InputError, match="no_such_option"):
        cli.ray_setup(str(config))
    with pytest.raises(cli.InputError, match="neither a bundle directory"):
        cli.ray_setup(str(tmp_path / "missing"))
