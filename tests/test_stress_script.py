"""scripts/stress.py at a small size: the load test and the soak hold their invariants."""
import threading
from pathlib import Path

import pytest

from modules import load_file

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning", "ignore::UserWarning")


@pytest.fixture(scope="module")
def stress():
    return load_file(ROOT / "scripts" / "stress.py")


def test_sixteen_threads_racing_loads_and_evictions_lose_nothing(stress):
    report = stress.load_test(str(ROOT / "models" / "tiny-english"),
                              str(ROOT / "models" / "tiny-multilingual"), count=400, threads=16)
    assert report["mismatches"] == {} and report["escaped"] == {}
    assert report["injected"] == report["expected_injected"] > 0
    assert report["ok"] + report["injected"] == 400
    assert report["end_hooks_per_request_exact"]
    events = report["events"]
    assert events["on_predict_start"] == events["on_predict_end"] == 400
    assert events["on_evict"] >= 1 and events["on_load"] == events["on_evict"] + 1


def test_soak_keeps_memory_and_threads_flat(stress):
    before = threading.active_count()
    report = stress.soak(str(ROOT / "models" / "tiny-english"), calls=2000, sample_every=500)
    assert report["end_hooks"] == 2000 and report["timed_out_hook_calls"] == 2
    assert report["threads_after"] <= before + 1
    assert report["rss_growth_mb"] < 50
