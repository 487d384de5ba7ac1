"""How much faster a reduced-precision graph runs than fp32 on the build machine.

Measured, not assumed: an int8 graph can be slower than fp32 (weight-only int8 computes in fp32
and dequantises first; a mixed graph with many fp32 nodes pays for the conversions between
them). The two graphs run the probe batches in interleaved rounds, alternating which goes
first, so a noisy shared machine slows both alike; the figure is the median of the per-round
ratios. It is reported in the manifest, never asserted as a test.
"""
from __future__ import annotations

import platform
import statistics
import time
from pathlib import Path
from typing import Any, Dict, List, Sequence

from ..bundle_format import GRAPH_INPUTS, GRAPH_OUTPUTS
from ..session_cache import cpuinfo_fields
from .verify import cpu_session

ROUNDS = 7
# Probe batches longer than this are left out of the timing: a service's requests are mostly
# shorter, and attention over long inputs, which stays fp32, would only dilute the difference.
TIMING_MAX_TOKENS = 512


def cpu_description() -> Dict[str, Any]:
    """The processor the figure was measured on, and whether it has int8 dot-product units."""
    fields = cpuinfo_fields(("model name", "flags")) or {}
    model = fields.get("model name") or platform.processor() or platform.machine()
    flags = set(fields.get("flags", "").split())
    return {"model": model, "avx2": "avx2" in flags,
            "vnni": bool(flags & {"avx512_vnni", "avx_vnni"}),
            "amx": "amx_int8" in flags}


def _seconds(session: Any, batches: Sequence[Dict[str, Any]]) -> float:
    started = time.perf_counter()
    for batch in batches:
        session.run(list(GRAPH_OUTPUTS), {name: batch[name] for name in GRAPH_INPUTS})
    return time.perf_counter() - started


def timing_batches(runs: Sequence[Any]) -> List[Dict[str, Any]]:
    """The probe batches to time on: those up to `TIMING_MAX_TOKENS` long (all if none is)."""
    batches = [run.batch for run in runs]
    return [batch for batch in batches
            if batch["input_ids"].shape[1] <= TIMING_MAX_TOKENS] or batches


def speedup_over(baseline: Path, candidate: Path, batches: Sequence[Dict[str, Any]],
                 rounds: int = ROUNDS) -> Dict[str, Any]:
    """`{"speedup": baseline time / candidate time, ...}` on `batches`, as described above."""
    sessions = {"baseline": cpu_session(baseline), "candidate": cpu_session(candidate)}
    for session in sessions.values():  # the first run of a session allocates
        _seconds(session, batches)
    ratios: List[float] = []
    totals = {"baseline": 0.0, "candidate": 0.0}
    for index in range(rounds):
        order = ("baseline", "candidate") if index % 2 == 0 else ("candidate", "baseline")
        seconds = {which: _seconds(sessions[which], batches) for which in order}
        ratios.append(seconds["baseline"] / seconds["candidate"])
        for which in totals:
            totals[which] += seconds[which]
    return {"speedup": round(statistics.median(ratios), 3), "rounds": rounds,
            "fp32_ms_per_round": round(1000 * totals["baseline"] / rounds, 2),
            "ms_per_round": round(1000 * totals["candidate"] / rounds, 2),
            "cpu": cpu_description()}
