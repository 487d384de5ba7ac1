"""scripts/load_test.py: the goals computed from a measurement, a server that refuses a flag, and
one small run against real `laya-edge serve` processes (a benchmark's plumbing, not a timing)."""
import json
import subprocess
import sys
from pathlib import Path

from modules import load_file

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "load_test.py"
load_test = load_file(SCRIPT)


def row(config, clients, ok, per_s=10.0, status_503=0, bare_503=0, other=0, dropped=0):
    return {"config": config, "clients": clients, "ok": ok, "requests_per_s": per_s,
            "status_503": status_503, "bare_503": bare_503, "dropped": dropped,
            "sent": ok + status_503 + other + dropped}


def test_goals_come_from_the_rows_of_each_configuration():
    rows = [row("off", 1, 20, per_s=10.0), row("off", 16, 20, per_s=9.5),
            row("off", 64, 50, status_503=14),
            row("on", 1, 20, per_s=10.0), row("on", 16, 19, per_s=8.0, dropped=1),
            row("on", 64, 50, status_503=4, bare_503=1, other=2)]
    checks = {(c["config"], c["goal"].split(":")[0]): c
              for c in load_test.goal_checks(rows, ["off", "on"])}
    assert len(checks) == 6
    assert checks["off", "16 clients"]["passed"] and checks["off", "16 clients"]["value"] == "0.95x"
    assert checks["off", "1-16 clients"]["passed"] and checks["off", "64 clients"]["passed"]
    assert not checks["on", "16 clients"]["passed"]  # 0.8x
    assert checks["on", "1-16 clients"]["value"] == "1 of 40"
    assert not checks["on", "1-16 clients"]["passed"]
    # two other statuses and one 503 without Retry-After
    assert checks["on", "64 clients"]["value"] == "3 other of 56"
    assert load_test.check_line(checks["on", "64 clients"]).startswith("FAIL on: 64 clients")


def test_percentiles_are_nearest_rank():
    values = [float(v) for v in range(1, 101)]
    assert [load_test.percentile(values, q) for q in (0.5, 0.9, 0.99)] == [50.0, 90.0, 99.0]
    assert load_test.percentile([], 0.5) is None


def run_script(*args, timeout=180):
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True,
                          text=True, timeout=timeout, cwd=ROOT)


def test_a_flag_the_server_does_not_know_is_a_setup_failure(bundles, tmp_path):
    done = run_script("--bundle", bundles["minilm"], "--work", tmp_path, "--clients", "1",
                      "--requests", "1", "--config", "odd=--no-such-flag 3", timeout=60)
    assert done.returncode == 1
    assert "configuration 'odd': the server refuses its flags" in done.stderr
    assert "unrecognized arguments: --no-such-flag 3" in done.stderr


def test_a_small_run_accounts_for_every_request(bundles, tmp_path):
    """Two servers (one admitting a single request at a time), 1 and 4 clients, 8 requests a
    level: every request is counted once, a 503 only ever as a clean one, nothing else fails."""
    out, table = tmp_path / "load.json", tmp_path / "load.md"
    done = run_script("--bundle", bundles["minilm"], "--work", tmp_path, "--clients", "1,4",
                      "--requests", 8, "--seconds", 60, "--warmup", 1, "--config", "plain=",
                      "--config", "narrow=--max-concurrent 1", "--json", out, "--markdown", table)
    assert done.returncode == 0, done.stderr[-4000:]
    report = json.loads(out.read_text())
    assert [(r["config"], r["clients"]) for r in report["levels"]] == [
        ("plain", 1), ("narrow", 1), ("narrow", 4), ("plain", 4)]  # turns rotate per level
    for level in report["levels"]:
        assert level["sent"] == 8 == sum(level["statuses"].values()) + level["dropped"]
        assert level["dropped"] == level["status_5xx"] == level["other_4xx"] == 0
        assert level["ok"] + level["status_503"] == 8 and level["bare_503"] == 0
        assert level["malformed"] == 0
        assert level["p50_ms"] <= level["p90_ms"] <= level["p99_ms"]
    assert all(level["ok"] == 8 for level in report["levels"] if level["config"] == "plain")
    # both ended on SIGTERM (uvicorn exits by re-raising it: -15), neither had to be killed
    assert {name: server["killed"] for name, server in report["servers"].items()} == {
        "plain": False, "narrow": False}
    goals = {(c["config"], c["goal"]): c["passed"] for c in report["checks"]}
    assert goals[("plain", "1-16 clients: no failed or lost request")] is True
    assert "narrow" in report["settings"]["configs"] and "CPUs, Python" in report["machine"]
    text = table.read_text()
    rows = [line for line in text.splitlines() if line.startswith("|")]
    assert len(rows) == 2 + 4 and {line.count("|") for line in rows} == {11}
    assert "PASS plain: 1-16 clients: no failed or lost request (0 of 16)" in text
