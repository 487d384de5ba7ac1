"""scripts/gpu_check.py runs end to end (on the CPU here), so it is ready for a GPU machine."""
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_gpu_check_dry_run_on_the_cpu(tmp_path):
    out = tmp_path / "report.json"
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "gpu_check.py"), "--work",
                           str(tmp_path / "work"), "--kind", "modernbert-tiny", "--device", "cpu",
                           "--rounds", "2", "--skip-peers", "--json", str(out)],
                          capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["kind"] == "modernbert-tiny" and report["export"]["seconds"] > 0
    fp32, fp16 = report["runs"]["laya_edge fp32"], report["runs"]["laya_edge fp16"]
    assert fp32["runtime"]["precision"] == "fp32" and fp16["runtime"]["precision"] == "fp16"
    same = fp32["vs_cpu_fp32"]
    assert same["answers"] == 160 and same["max_abs_p"] == 0.0
    assert same["argmax_agreement"] == same["decisive_agreement"] == 1.0
    assert 0 < same["decisive_answers"] <= 160
    assert 0 < fp16["vs_cpu_fp32"]["argmax_agreement"] <= 1
    for run in (fp32, fp16):
        # on the CPU every node runs on the CPU provider; on a GPU the report names the rest
        placed = run["placement"]
        assert set(placed["nodes_per_provider"]) == {"CPUExecutionProvider"}
        assert placed["nodes_per_provider"]["CPUExecutionProvider"] >= len(placed["cpu_nodes"]) > 0
        timings = run["timings"]
        assert timings["1x1"]["p50_ms"] > 0 and timings["1x10"]["p50_ms"] > 0
        assert timings["32x4_questions_per_s"] > 0
