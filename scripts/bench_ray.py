#!/usr/bin/env python3
"""Throughput of the Ray Serve deployment (laya_edge.serving.ray) with 1 and 2 replicas.

For each replica count: a local Ray instance, the deployment over the given bundles, a warm-up,
then `--requests` single-state requests from `--clients` concurrent HTTP clients over loopback.
Prints requests/s, p50/p99 latency and the batch sizes Ray Serve formed, as JSON.

    python scripts/bench_ray.py --english models/tiny-english --multilingual models/tiny-multilingual
    python scripts/bench_ray.py --english B --multilingual B --requests 600 --clients 32
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

ROOT = Path(__file__).resolve().parents[1]

# scripts/ is on the path when a script runs: the load test's tickets and question sets
from stress import QUESTION_SETS, TICKETS  # noqa: E402


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def measure(models: Dict[str, str], replicas: int, requests: int, clients: int,
            cpus: int) -> Dict[str, Any]:
    import httpx
    import ray
    from ray import serve

    from laya_edge.serving.ray import NAME, deployment

    ray.init(num_cpus=cpus, include_dashboard=False, log_to_driver=False)
    try:
        port = free_port()
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        serve.run(deployment(models, replicas=replicas, num_cpus=cpus / replicas,
                             max_batch_size=16, batch_wait_timeout_s=0.01),
                  name=NAME, route_prefix="/")
        url = f"http://127.0.0.1:{port}/v1/systemone"
        bodies = [{"state": TICKETS[i % len(TICKETS)], "questions": QUESTION_SETS[1]}
                  for i in range(requests)]
        with httpx.Client(timeout=300) as client:
            for body in bodies[:20]:
                client.post(url, json=body).raise_for_status()

            def ask(body: Dict[str, Any]) -> float:
                started = time.perf_counter()
                client.post(url, json=body).raise_for_status()
                return (time.perf_counter() - started) * 1000

            started = time.perf_counter()
            with ThreadPoolExecutor(clients) as pool:
                latencies = sorted(pool.map(ask, bodies))
            wall = time.perf_counter() - started
        handle = serve.get_app_handle(NAME)
        batches: Dict[str, List[int]] = {}
        for _ in range(20 * replicas):
            stats = handle.stats.remote().result(timeout_s=60)
            batches[stats["replica"]] = stats["batch_sizes"]
        sizes = [size for each in batches.values() for size in each]
        return {"replicas": replicas, "requests": requests, "clients": clients,
                "requests_per_s": round(requests / wall, 1),
                "p50_ms": round(statistics.median(latencies), 1),
                "p99_ms": round(latencies[int(0.99 * (len(latencies) - 1))], 1),
                "mean_batch": round(statistics.mean(sizes), 2), "max_batch": max(sizes)}
    finally:
        serve.shutdown()
        ray.shutdown()


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--english", default=str(ROOT / "models" / "tiny-english"))
    parser.add_argument("--multilingual", default=str(ROOT / "models" / "tiny-multilingual"))
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--cpus", type=int, default=os.cpu_count() or 2)
    args = parser.parse_args(argv)
    models = {"english": args.english, "multilingual": args.multilingual}
    runs = [measure(models, replicas, args.requests, args.clients, args.cpus)
            for replicas in (1, 2)]
    print(json.dumps({"runs": runs, "speed_up_2_vs_1": round(
        runs[1]["requests_per_s"] / runs[0]["requests_per_s"], 2), "cpus": args.cpus},
        indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
