"""scripts/bench.py and its workload (scripts/workloads.py): the inputs, the arithmetic, and one
end-to-end run on a tiny checkpoint."""
import json
import subprocess
import sys
from pathlib import Path

from modules import load_file

import workloads  # scripts/ is on the test path (pyproject: pythonpath)

ROOT = Path(__file__).resolve().parents[1]
bench = load_file(ROOT / "scripts" / "bench.py")


def test_tickets_are_deterministic_support_texts_of_40_to_300_words():
    texts = workloads.tickets(32)
    assert texts == workloads.tickets(32) and len(set(texts)) == 32
    counts = [len(text.split()) for text in texts]
    assert min(counts) >= 40 and max(counts) <= 300 and max(counts) - min(counts) > 100


def test_questions_mix_every_type():
    assert len(workloads.QUESTIONS10) == 10 and len(workloads.QUESTIONS4) == 4
    assert {q["type"] for q in workloads.QUESTIONS10.values()} == {"choice", "score", "noul"}


def test_agreement_counts_argmax_and_the_largest_probability_gap():
    reference = [{"a": {"type": "noul", "noul": 0.9},
                  "b": {"type": "choice", "probabilities": {"x": 0.6, "y": 0.4}}}]
    same = [{"a": {"type": "noul", "noul": 0.88},
             "b": {"type": "choice", "probabilities": {"x": 0.55, "y": 0.45}}}]
    flipped = [{"a": {"type": "noul", "noul": 0.3},
                "b": {"type": "choice", "probabilities": {"x": 0.6, "y": 0.4}}}]
    result = workloads.agreement(same, reference)
    assert result["argmax_agreement"] == 1.0 and abs(result["max_abs_p"] - 0.05) < 1e-12
    result = workloads.agreement(flipped, reference)
    assert result["argmax_agreement"] == 0.5 and abs(result["max_abs_p"] - 0.6) < 1e-12


def test_decisive_agreement_leaves_out_the_references_near_ties():
    """Only answers whose reference top two are more than the int8 tie margin (0.1) apart
    count as decisive, as in export verification."""
    reference = [{"a": {"type": "noul", "noul": 0.52},
                  "b": {"type": "choice", "probabilities": {"x": 0.7, "y": 0.2, "z": 0.1}}}]
    tie_flipped = [{"a": {"type": "noul", "noul": 0.48},
                    "b": {"type": "choice", "probabilities": {"x": 0.69, "y": 0.21, "z": 0.1}}}]
    result = workloads.agreement(tie_flipped, reference)
    assert result["argmax_agreement"] == 0.5
    assert result["decisive_answers"] == 1 and result["decisive_agreement"] == 1.0
    clear_flipped = [{"a": {"type": "noul", "noul": 0.52},
                      "b": {"type": "choice", "probabilities": {"x": 0.2, "y": 0.7, "z": 0.1}}}]
    assert workloads.agreement(clear_flipped, reference)["decisive_agreement"] == 0.0


def test_summary_pools_latencies_and_takes_medians_over_processes():
    def sample(base):
        return {"import_s": base, "construct_s": base, "first_s": base, "ready_s": 3 * base,
                "loaded_peak_mb": 100 * base, "peak_mb": 200 * base,
                "1x1_ms": [base, 10 * base], "1x10_ms": [5 * base], "32x4_s": [base],
                "answers": [base]}
    summary = bench.summarise("x", [sample(1.0), sample(2.0), sample(4.0)], questions=128)
    assert summary["ready_s"] == 6.0 and summary["peak_mb"] == 400.0
    assert summary["1x1"] == {"p50_ms": 7.0, "p90_ms": 40.0, "samples": 6}
    assert summary["32x4"]["questions_per_s"] == 64.0
    assert summary["processes"] == 3 and summary["answers"] == [1.0]


def test_end_to_end_on_a_tiny_checkpoint(tmp_path):
    """Every runtime of the table runs in its own process on one generated checkpoint, and the
    report carries the figures and the acceptance ratios computed from them."""
    out = tmp_path / "bench.json"
    table = tmp_path / "bench.md"
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "bench.py"), "--kinds",
                           "modernbert-tiny", "--work", str(tmp_path / "work"), "--iters", "3",
                           "--rounds", "1", "--repeats", "1", "--imports", "1", "--exporter",
                           "torchscript", "--json", str(out),
                           "--markdown", str(table)],
                          capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-4000:]
    report = json.loads(out.read_text())
    (kind,) = report["kinds"]
    names = [row["name"] for row in kind["runtimes"]]
    assert names == ["laya_edge fp32", "laya_edge int8", "upstream ONNXAgent fp32",
                     "upstream ONNXAgent fp32, laya_edge graph", "upstream torch fp32",
                     "edgejev fp32", "edgejev int8"]
    for row in kind["runtimes"]:
        # one process per runtime here: pooling over repeats is the test above's
        assert row["processes"] == 1 and row["1x1"]["samples"] == 3
        assert row["1x1"]["p50_ms"] > 0 and row["1x10"]["p90_ms"] >= row["1x10"]["p50_ms"]
        assert row["32x4"]["questions_per_s"] > 0 and row["peak_mb"] >= row["loaded_peak_mb"] > 0
        assert row["size_mb"] > 0 and 0 <= row["argmax_agreement"] <= 1
        assert row["first_construct_s"] > 0
    # upstream's baseline runs the plain export, the reference row the bundle's own graph
    plain, own = kind["runtimes"][2]["path"], kind["runtimes"][3]["path"]
    assert plain.endswith("modernbert-tiny-plain") and own == kind["runtimes"][0]["path"]
    plain_manifest = json.loads((Path(plain) / "laya_edge.json").read_text())
    assert plain_manifest["graph"]["forward"] == "model"
    assert plain_manifest["graph"]["exporter"] == "torchscript" == report["settings"]["exporter"]
    torch_row = kind["runtimes"][4]
    assert torch_row["argmax_agreement"] == 1.0 and torch_row["max_abs_p"] == 0.0
    assert kind["runtimes"][0]["argmax_agreement"] == 1.0  # fp32 answers as torch does
    checks = {check["check"]: check for check in kind["ratios"]}
    edge, onnx = kind["runtimes"][0], kind["runtimes"][2]
    ratio = checks["p50 1x1 vs upstream ONNXAgent"]
    assert ratio["value"] == edge["1x1"]["p50_ms"] / onnx["1x1"]["p50_ms"]
    assert ratio["met"] == (ratio["value"] <= 0.7)
    first = checks["first-load construction fp32 vs edgejev fp32's"]
    assert first["value"] == edge["first_construct_s"] / kind["runtimes"][5]["first_construct_s"]
    text = table.read_text()
    assert "| laya_edge fp32 |" in text and "| check | value | bar | met |" in text
    # every row of a markdown table has its header's cells (a stray "|" in a label splits one)
    tables = [block.splitlines() for block in text.split("\n\n") if block.startswith("|")]
    assert len(tables) == 2
    for rows in tables:
        assert {row.count("|") for row in rows} == {rows[0].count("|")}, rows
