"""Liveness and readiness on a real server: the service says it is ready only when a model can
load (with preload: when every preloaded model is loaded), and says per model why one cannot."""
import shutil
import threading
import time

import httpx
import pytest

import laya_edge
from test_serve import QUESTIONS, make_router, serving

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")
BODY = {"state": "I was charged twice.", "questions": QUESTIONS}


@pytest.fixture(autouse=True)
def nothing_exported(tmp_path, monkeypatch):
    """No built-in bundle on this machine: the built-in names point at an empty directory."""
    monkeypatch.setenv("LAYA_EDGE_MODELS", str(tmp_path / "no-bundles"))


def copy_bundle(bundles, tmp_path, name):
    return shutil.copytree(bundles["modernbert-tiny"], tmp_path / name)


def corrupt_weights(bundle):
    """Flip one byte of the weights: every file is still there, the load's hash check fails."""
    data = bundle / "laya.onnx.data"
    raw = bytearray(data.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    data.write_bytes(bytes(raw))
    return bundle


def health_of(base, path="/health/ready", **headers):
    response = httpx.get(f"{base}{path}", headers=headers, timeout=30)
    return response.status_code, response.json()


def eventually(probe, wanted, seconds=60):
    """Poll `probe()` until it returns `wanted`, for at most `seconds`; the last value."""
    deadline = time.monotonic() + seconds
    while True:
        value = probe()
        if value == wanted or time.monotonic() > deadline:
            return value
        time.sleep(0.05)


def test_nothing_exported_is_live_but_not_ready():
    with serving(laya_edge.Router()) as base:
        live = health_of(base, "/health/live")
        ready = health_of(base)
        legacy = health_of(base, "/health")
    assert live == (200, {"status": "ok"})
    assert ready[0] == 503 and legacy[0] == 503
    assert ready[1]["status"] == "unavailable" and ready[1]["reason"] == "no model can load"
    assert legacy[1]["reason"] == ready[1]["reason"]
    for name in ("english", "multilingual", "typed-decisions"):
        model = ready[1]["models"][name]
        assert model["loadable"] is False and model["loaded"] is False
        assert f"no bundle for the built-in checkpoint {name!r}" in model["reason"]


def test_models_are_listed_with_whether_they_can_load(bundles, tmp_path):
    damaged = copy_bundle(bundles, tmp_path, "damaged")
    (damaged / "laya.onnx.data").unlink()
    router = make_router(bundles)
    router.register("damaged", str(damaged))
    router.register("remote", "someone/some-laya-bundle")
    with serving(router) as base:
        status, body = health_of(base)
    assert status == 200 and body["status"] == "ok" and "reason" not in body
    models = body["models"]
    assert models["english"] == {"loadable": True, "loaded": False}
    assert models["damaged"]["loadable"] is False and "'laya.onnx.data'" in models["damaged"][
        "reason"]
    assert models["remote"]["loadable"] is None
    assert "hub repository 'someone/some-laya-bundle'" in models["remote"]["reason"]
    assert models["typed-decisions"]["loadable"] is False


def test_a_model_that_fails_to_load_is_a_503_and_reported(bundles, tmp_path):
    broken = corrupt_weights(copy_bundle(bundles, tmp_path, "broken"))
    router = make_router(bundles)
    router.register("broken", str(broken))
    with serving(router) as base:
        before = health_of(base)[1]["models"]["broken"]
        first = httpx.post(f"{base}/v1/systemone", json=dict(BODY, model="broken"), timeout=60)
        second = httpx.post(f"{base}/v1/systemone/batch",
                            json={"states": ["a"], "questions": QUESTIONS, "model": "broken"},
                            timeout=60)
        status, body = health_of(base)
        fine = httpx.post(f"{base}/v1/systemone", json=BODY, timeout=60)
    assert before == {"loadable": True, "loaded": False}
    for response in (first, second):
        assert response.status_code == 503, response.text
        detail = response.json()["detail"]
        assert "'broken'" in detail and "/health/ready" in detail and str(broken) not in detail
    assert status == 200 and fine.status_code == 200
    assert body["models"]["broken"]["loadable"] is False
    assert "SHA-256 mismatch for 'laya.onnx.data'" in body["models"]["broken"]["reason"]


def test_when_the_only_model_fails_to_load_the_service_is_not_ready(bundles, tmp_path):
    broken = str(corrupt_weights(copy_bundle(bundles, tmp_path, "broken")))
    router = laya_edge.Router(models={"english": broken, "multilingual": broken})
    with serving(router) as base:
        assert health_of(base)[0] == 200  # every file is there: loadable until it is tried
        for model in ("english", "multilingual"):
            failed = httpx.post(f"{base}/v1/systemone", json=dict(BODY, model=model), timeout=60)
            assert failed.status_code == 503
        status, body = health_of(base, "/health")
    assert status == 503 and body["reason"] == "no model can load"


def test_preload_is_live_at_once_and_ready_when_all_are_loaded(bundles):
    release = threading.Event()

    def slow_agent(source, **options):
        release.wait(60)
        return laya_edge.ONNXAgent(source, **options)

    router = make_router(bundles, agent_factory=slow_agent)
    with serving(router, preload=["english", "multilingual"]) as base:
        live = health_of(base, "/health/live")
        waiting = health_of(base)
        release.set()
        ready = eventually(lambda: health_of(base)[0], 200)
        loaded = health_of(base)[1]["loaded"]
    assert live == (200, {"status": "ok"})
    assert waiting[0] == 503 and waiting[1]["reason"] == "still preloading"
    assert ready == 200 and sorted(loaded) == ["english", "multilingual"]


def test_a_preloaded_model_that_fails_keeps_the_service_unready(bundles, tmp_path):
    broken = corrupt_weights(copy_bundle(bundles, tmp_path, "broken"))
    router = make_router(bundles)
    router.register("broken", str(broken))
    with serving(router, preload=["english", "broken"]) as base:
        reason = eventually(lambda: health_of(base)[1].get("reason"),
                            "a preloaded model cannot load")
        status, body = health_of(base)
    assert reason == "a preloaded model cannot load" and status == 503
    assert body["models"]["english"]["loaded"] is True
    assert "SHA-256 mismatch" in body["models"]["broken"]["reason"]


def test_unknown_preload_names_are_refused_when_the_app_is_made(bundles):
    from laya_edge.serving.http import create_app

    with pytest.raises(ValueError, match="unknown model 'englsh'"):
        create_app(make_router(bundles), preload=["englsh"])


def test_with_auth_readiness_shows_only_its_status_without_the_token():
    with serving(laya_edge.Router(), api_key="s3cret") as base:
        anonymous = health_of(base)
        live = health_of(base, "/health/live")
        authorised = health_of(base, authorization="Bearer s3cret")
    assert anonymous == (503, {"status": "unavailable", "reason": "no model can load"})
    assert live == (200, {"status": "ok"})
    assert authorised[0] == 503 and set(authorised[1]["models"]) == {
        "english", "multilingual", "typed-decisions"}
