#!/usr/bin/env python3
"""Load test of `laya-edge serve`: requests/s, latency and errors under concurrent clients, for
server configurations compared in one run (batching off and on by default).

The script builds (or reuses, in `--work`) a MiniLM-sized bundle, the real all-MiniLM-L6-v2
encoder checkpoint of laya_edge.export.synthetic, and starts one real server process per
configuration on loopback (`python -m laya_edge serve --model BUNDLE --host 127.0.0.1 --port P
--log-level warning FLAGS`), warmed up (a few requests one at a time, not counted) and kept
across levels. For each number of concurrent clients in `--clients`, every configuration runs
in turn, the order rotating from level to level so a machine whose speed drifts slows them
alike: an async client (httpx, loopback only) runs that many tasks, each sending
`POST /v1/systemone` back to back, every request a different support ticket
(scripts/workloads.py) with the same three questions (a choice, a noul and a score), until
`--requests` requests are sent or `--seconds` have passed. A request that gets no HTTP response
(a refused, reset or timed-out connection) is counted as dropped.

Per configuration and level: requests/s (200 answers per second of the level's wall time),
p50/p90/p99 latency of the 200 answers, counts by status, 503s without `Retry-After`, answers
that do not carry the asked questions, and dropped requests. Then issue 31's goals, as PASS/FAIL
lines computed from the measurement: at 16 clients at least 0.9x the requests/s of 1 client,
nothing failed or lost at 1-16 clients, and above 16 clients only 200s and clean 503s (with
`Retry-After`), never a 500 or a dropped connection. Failing goals are reported, not raised: the
exit status is 0 when the measurement ran, 1 when setup failed (a server that does not start
or refuses a flag, a warm-up that is not answered) or `--timeout` ran out. `--timeout` bounds
the servers and the levels; a failed export raises.

    python scripts/load_test.py --work /tmp/load --json load.json --markdown load.md
    python scripts/load_test.py --config plain="" --clients 1,4 --requests 50
    python scripts/load_test.py --config cpu="--device cpu" --config gpu="--device cuda"
"""
from __future__ import annotations

import argparse
import asyncio
import itertools
import math
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import httpx

from laya_edge.bundle_format import MANIFEST
# scripts/ is on the path when a script runs: the machine line and the servers' environment,
# a free loopback port, and the tickets and questions the benchmarks share
from bench import child_env, machine, publish
from bench_ray import free_port
from workloads import QUESTIONS10, tickets

DEFAULT_CONFIGS = ("off=--max-batch 1", "on=--max-batch 16 --max-wait-ms 5")
QUESTIONS = {key: QUESTIONS10[key] for key in ("department", "urgent", "anger")}
SCALING_BAR = 0.9  # requests/s at 16 clients over 1 client's: concurrency costs nothing
STARTUP_TIMEOUT_S = 120.0
# the run's numeric settings, reported with its results: flag, type, default, meaning
SETTINGS = (("--requests", int, 200, "requests per level"),
            ("--seconds", float, 30.0, "time per level: no request starts after it"),
            ("--warmup", int, 8, "requests per server before the levels, not counted"),
            ("--request-timeout", float, 60.0, "seconds a request may take before it counts as "
                                               "dropped"),
            ("--stop-timeout", float, 30.0, "seconds a server has to exit after SIGTERM before "
                                            "it is killed"))


class SetupError(Exception):
    """The measurement could not run: the message says what to fix."""


@dataclass
class Tally:
    """What one level's requests got back."""

    latencies_ms: List[float] = field(default_factory=list)
    statuses: Counter = field(default_factory=Counter)
    dropped: Counter = field(default_factory=Counter)
    bare_503: int = 0
    malformed: int = 0


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def parse_configs(specs: Sequence[str]) -> Dict[str, List[str]]:
    """`NAME=FLAGS` -> {name: the server flags}; names must be unique."""
    configs: Dict[str, List[str]] = {}
    for spec in specs:
        name, sep, flags = spec.partition("=")
        if not sep or not name.strip() or name.strip() in configs:
            raise argparse.ArgumentTypeError(f"--config {spec!r}: want a new NAME=FLAGS")
        configs[name.strip()] = shlex.split(flags)
    return configs


def parse_levels(text: str) -> List[int]:
    levels = [int(part) for part in text.split(",") if part.strip()]
    if not levels or min(levels) < 1:
        raise argparse.ArgumentTypeError(f"--clients {text!r}: want positive counts, e.g. 1,4,16")
    return levels


def ensure_bundle(work: Path) -> Path:
    """The MiniLM bundle in `work`, exported from the synthetic MiniLM checkpoint the first
    time (the export needs the `export` extra: torch)."""
    bundle = work / "bundles" / "minilm"
    if (bundle / MANIFEST).exists():
        return bundle
    from laya_edge.export import ExportOptions, Progress, export_bundle
    from laya_edge.export.synthetic import make_checkpoint

    log(f"exporting the MiniLM bundle to {bundle}")
    checkpoint = make_checkpoint("minilm", work / "checkpoints" / "minilm", seed=0)
    export_bundle(ExportOptions(source=str(checkpoint), out=bundle, force=True),
                  Progress(quiet=True))
    return bundle


def start_server(flags: List[str], bundle: Path, port: int, log_path: Path) -> subprocess.Popen:
    """`laya-edge serve` on loopback, its output in `log_path` (a pipe nobody reads could fill
    and stall it); auth off, whatever the caller's environment says."""
    env = child_env()
    env.pop("LAYA_EDGE_API_KEY", None)
    command = [sys.executable, "-m", "laya_edge", "serve", "--model", str(bundle), "--host",
               "127.0.0.1", "--port", str(port), "--log-level", "warning", *flags]
    with open(log_path, "wb") as output:
        return subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT, env=env)


async def wait_ready(name: str, process: subprocess.Popen, url: str, log_path: Path) -> None:
    """Until `GET /health/ready` is 200; a server that exits first is a setup error that says
    why (a flag this `laya-edge serve` does not know, above all)."""
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    async with httpx_client(1, 5.0) as client:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                output = log_path.read_text(encoding="utf-8", errors="replace")
                if process.returncode == 2 and "unrecognized arguments" in output:
                    raise SetupError(f"configuration {name!r}: the server refuses its flags "
                                     f"({output.strip().splitlines()[-1]}); this laya-edge serve "
                                     f"does not have them")
                raise SetupError(f"configuration {name!r}: the server exited with "
                                 f"{process.returncode} before it was ready:\n{output[-3000:]}")
            try:
                if (await client.get(f"{url}/health/ready")).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            await asyncio.sleep(0.2)
    raise SetupError(f"configuration {name!r}: not ready after {STARTUP_TIMEOUT_S:.0f} s "
                     f"(log: {log_path})")


def stop_server(process: subprocess.Popen, grace_s: float) -> Dict[str, Any]:
    """SIGTERM, then SIGKILL after `grace_s`: how the server ended."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(grace_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            return {"exit_code": process.returncode, "killed": True}
    return {"exit_code": process.returncode, "killed": False}


def httpx_client(connections: int, timeout_s: float) -> httpx.AsyncClient:
    """A loopback client with a connection for every client task (no proxy from the
    environment)."""
    limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
    return httpx.AsyncClient(limits=limits, timeout=timeout_s, trust_env=False)


def answered(response: httpx.Response) -> set:
    """The question ids a 200's body answers; none when the body is not a result."""
    try:
        body = response.json()
    except ValueError:
        return set()
    answers = body.get("answers") if isinstance(body, dict) else None
    return set(answers) if isinstance(answers, dict) else set()


async def send(client: httpx.AsyncClient, url: str, body: Dict[str, Any], tally: Tally) -> None:
    """One request, its outcome tallied: latency for a 200 that answers the asked questions."""
    started = time.perf_counter()
    try:
        response = await client.post(f"{url}/v1/systemone", json=body)
    except httpx.TransportError as exc:
        tally.dropped[type(exc).__name__] += 1
        return
    elapsed_ms = (time.perf_counter() - started) * 1e3
    tally.statuses[response.status_code] += 1
    if response.status_code == 200:
        if answered(response) == set(body["questions"]):
            tally.latencies_ms.append(elapsed_ms)
        else:
            tally.malformed += 1
    elif response.status_code == 503 and "retry-after" not in response.headers:
        tally.bare_503 += 1


async def run_level(client: httpx.AsyncClient, url: str, bodies: List[Dict[str, Any]],
                    clients: int, seconds: float) -> Dict[str, Any]:
    """`clients` tasks sending `bodies` back to back, each body once, until all are sent or
    `seconds` have passed; the tally and the wall time."""
    tally, claimed = Tally(), itertools.count()
    deadline = time.monotonic() + seconds

    async def worker() -> None:
        for i in claimed:  # one event loop: the tasks take the next index in turn
            if i >= len(bodies) or time.monotonic() >= deadline:
                return
            await send(client, url, bodies[i], tally)

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(clients)))
    return {"tally": tally, "wall_s": time.perf_counter() - started}


def percentile(values: List[float], q: float) -> Optional[float]:
    """Nearest-rank percentile; None without values."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)] if ordered else None


def summarise(config: str, clients: int, tally: Tally, wall_s: float) -> Dict[str, Any]:
    """One (configuration, level) row of the report."""
    statuses = tally.statuses
    ok = len(tally.latencies_ms)
    return {
        "config": config, "clients": clients,
        "sent": sum(statuses.values()) + sum(tally.dropped.values()),
        "seconds": round(wall_s, 3), "requests_per_s": round(ok / wall_s, 2) if wall_s else 0.0,
        "p50_ms": percentile(tally.latencies_ms, 0.50),
        "p90_ms": percentile(tally.latencies_ms, 0.90),
        "p99_ms": percentile(tally.latencies_ms, 0.99),
        "ok": ok, "malformed": tally.malformed,
        "statuses": {str(code): count for code, count in sorted(statuses.items())},
        "status_503": statuses[503], "bare_503": tally.bare_503,
        "other_4xx": sum(n for code, n in statuses.items() if 400 <= code < 500),
        "status_5xx": sum(n for code, n in statuses.items() if code >= 500 and code != 503),
        "dropped": sum(tally.dropped.values()), "dropped_by_error": dict(tally.dropped),
    }


def goal_checks(rows: List[Dict[str, Any]], configs: Sequence[str]) -> List[Dict[str, Any]]:
    """Issue 31's goals per configuration, for the levels this run measured."""
    checks = []
    for config in configs:
        level = {row["clients"]: row for row in rows if row["config"] == config}
        if 1 in level and 16 in level:
            ratio = level[16]["requests_per_s"] / max(level[1]["requests_per_s"], 1e-9)
            checks.append({"config": config, "goal": "16 clients: requests/s >= "
                           f"{SCALING_BAR}x 1 client's", "value": f"{ratio:.2f}x",
                           "passed": ratio >= SCALING_BAR})
        low = [row for clients, row in sorted(level.items()) if clients <= 16]
        if low:
            failed = sum(row["sent"] - row["ok"] for row in low)
            checks.append({"config": config, "goal": "1-16 clients: no failed or lost request",
                           "value": f"{failed} of {sum(row['sent'] for row in low)}",
                           "passed": failed == 0})
        for clients, row in sorted(level.items()):
            if clients > 16:
                unclean = row["sent"] - row["ok"] - row["status_503"] + row["bare_503"]
                checks.append({"config": config, "goal": f"{clients} clients: only 200s and "
                               "503s with Retry-After", "value": f"{unclean} other of "
                               f"{row['sent']}", "passed": unclean == 0})
    return checks


def ms(value: Optional[float]) -> str:
    return "-" if value is None else f"{value:.0f}"


def markdown(report: Dict[str, Any]) -> str:
    """The machine, the command, one table row per (configuration, level), the goals."""
    flags = report["settings"]["configs"]
    lines = [f"Machine: {report['machine']}", "", f"`{report['command']}`", "",
             "| config (server flags) | clients | sent | requests/s | p50 / p90 / p99 ms | 200 | "
             "503 | other 4xx | 5xx | dropped |", "|---|---|---|---|---|---|---|---|---|---|"]
    for row in report["levels"]:
        flag_text = " ".join(flags[row["config"]]) or "defaults"
        lines.append(f"| {row['config']} (`{flag_text}`) | {row['clients']} | {row['sent']} | "
                     f"{row['requests_per_s']:.1f} | {ms(row['p50_ms'])} / {ms(row['p90_ms'])} / "
                     f"{ms(row['p99_ms'])} | {row['ok']} | {row['status_503']} | "
                     f"{row['other_4xx']} | {row['status_5xx']} | {row['dropped']} |")
    lines.append("")
    lines += [f"- {check_line(check)}" for check in report["checks"]]
    return "\n".join(lines)


def check_line(check: Dict[str, Any]) -> str:
    return (f"{'PASS' if check['passed'] else 'FAIL'} {check['config']}: {check['goal']} "
            f"({check['value']})")


def bodies_for(count: int, seed: int) -> List[Dict[str, Any]]:
    return [{"state": text, "questions": QUESTIONS} for text in tickets(count, seed=seed)]


async def start_all(configs: Dict[str, List[str]], bundle: Path, work: Path,
                    stack: AsyncExitStack, stopped: Dict[str, Any],
                    args: argparse.Namespace) -> Dict[str, Tuple[str, httpx.AsyncClient]]:
    """Every configuration's server, ready and warmed up: {name: (url, client)}; the stack
    closes the clients and stops the servers, recording in `stopped` how each ended."""
    servers: Dict[str, Tuple[str, httpx.AsyncClient]] = {}
    for name, flags in configs.items():
        port = free_port()
        log_path = work / f"server-{name}.log"
        log(f"{name}: starting laya-edge serve {' '.join(flags)} on port {port}")
        process = start_server(flags, bundle, port, log_path)
        stack.callback(lambda n=name, p=process: stopped.update(
            {n: stop_server(p, args.stop_timeout)}))
        url = f"http://127.0.0.1:{port}"
        await wait_ready(name, process, url, log_path)
        client = await stack.enter_async_context(
            httpx_client(max(args.clients), args.request_timeout))
        warm = await run_level(client, url, bodies_for(args.warmup, seed=1), 1, args.seconds)
        if len(warm["tally"].latencies_ms) != args.warmup:
            raise SetupError(f"configuration {name!r}: the warm-up was not answered cleanly "
                             f"({summarise(name, 1, warm['tally'], warm['wall_s'])}; log: "
                             f"{log_path})")
        servers[name] = (url, client)
    return servers


async def measure(configs: Dict[str, List[str]], bundle: Path, work: Path,
                  stopped: Dict[str, Any], args: argparse.Namespace) -> List[Dict[str, Any]]:
    """Every level for every configuration, the configurations taking turns."""
    rows = []
    bodies = bodies_for(args.requests, seed=7)
    async with AsyncExitStack() as stack:
        servers = await start_all(configs, bundle, work, stack, stopped, args)
        names = list(configs)
        for turn, clients in enumerate(args.clients):
            for name in names[turn % len(names):] + names[:turn % len(names)]:
                url, client = servers[name]
                result = await run_level(client, url, bodies, clients, args.seconds)
                row = summarise(name, clients, result["tally"], result["wall_s"])
                rows.append(row)
                log(f"{name}, {clients} clients: {row['sent']} sent, "
                    f"{row['requests_per_s']:.1f} requests/s, statuses {row['statuses']}, "
                    f"{row['dropped']} dropped")
    return rows


def default_timeout(args: argparse.Namespace, configs: int) -> float:
    """Enough for every server to start and every level to run out its time and requests."""
    level_s = args.seconds + args.request_timeout
    return configs * (STARTUP_TIMEOUT_S + level_s + args.stop_timeout) + \
        configs * len(args.clients) * level_s


def settings(args: argparse.Namespace) -> Dict[str, Any]:
    """The SETTINGS this run used, by their option's name."""
    names = [flag[2:].replace("-", "_") for flag, *_ in SETTINGS]
    return {name: getattr(args, name) for name in names}


def parse_args(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path,
                        default=Path(tempfile.gettempdir()) / "laya-edge-load-test",
                        help="where the bundle is kept between runs, and the server logs")
    parser.add_argument("--bundle", type=Path, help="serve this bundle instead of exporting one")
    parser.add_argument("--config", action="append", metavar="NAME=FLAGS",
                        help="a server configuration: a name and its `laya-edge serve` flags "
                             f"(repeatable; default: {' and '.join(DEFAULT_CONFIGS)})")
    parser.add_argument("--clients", type=parse_levels, default=[1, 4, 16, 64],
                        help="concurrency levels, comma-separated (default 1,4,16,64)")
    for flag, kind, default, text in SETTINGS:
        parser.add_argument(flag, type=kind, default=default, help=f"{text} (default {default})")
    parser.add_argument("--timeout", type=float,
                        help="the whole run's limit in seconds, servers included (default: "
                             "each server's start and every level's time and request timeout)")
    parser.add_argument("--json", type=Path, help="write the full report here")
    parser.add_argument("--markdown", type=Path, help="write the markdown table here")
    args = parser.parse_args(argv)
    try:
        args.configs = parse_configs(args.config or DEFAULT_CONFIGS)
    except argparse.ArgumentTypeError as exc:
        parser.error(str(exc))
    if args.requests < 1 or args.warmup < 1:
        parser.error("--requests and --warmup take positive counts")
    return args


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    timeout = args.timeout or default_timeout(args, len(args.configs))
    stopped: Dict[str, Any] = {}
    try:
        bundle = args.bundle or ensure_bundle(args.work)
        if not (bundle / MANIFEST).exists():
            raise SetupError(f"--bundle {bundle}: no {MANIFEST} there")
        rows = asyncio.run(asyncio.wait_for(measure(args.configs, bundle, args.work, stopped, args),
                                            timeout))
    except SetupError as exc:
        log(f"load_test: {exc}")
        return 1
    except asyncio.TimeoutError:
        log(f"load_test: the run took more than --timeout {timeout:.0f} s and was stopped")
        return 1
    command = " ".join(["python", "scripts/load_test.py",
                        *map(shlex.quote, sys.argv[1:] if argv is None else argv)])
    report = {"machine": machine(), "command": command, "bundle": str(bundle), "levels": rows,
              "checks": goal_checks(rows, list(args.configs)), "servers": stopped,
              "settings": dict(configs=args.configs, clients=args.clients,
                               questions=list(QUESTIONS), **settings(args))}
    publish(report, markdown(report), args.json, args.markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
