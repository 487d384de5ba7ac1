"""CUDA and TensorRT settings: provider options, which GPU an index means, engine caches, and
how large one session run may be on each device.

Nothing here opens a session (laya_edge.session does); everything but `gpu_name` and
`tensorrt_version` is pure, so the rules are tested on machines without a GPU.
docs/devices.md explains the choices.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence

from .bundle_format import GRAPH_INPUTS

# Padded tokens per session run on a CPU: runs of about a thousand tokens keep the attention
# scores in cache and answer faster than one big run (scripts/bench.py).
CPU_RUN_TOKENS = 1024
# Padded tokens per CUDA run: 64 rows of 512 tokens. A larger call is split, so its activations
# cannot run the GPU out of memory however many states it brings.
CUDA_RUN_TOKENS = 64 * 512
# The TensorRT profile of a bundle whose manifest has none (bundles exported before it was kept).
DEFAULT_SHAPE_RANGES = {"batch": {"min": 1, "opt": 8, "max": 64},
                        "sequence": {"min": 4, "opt": 256, "max": 512},
                        "markers": {"min": 2, "opt": 4, "max": 64}}
UNKNOWN_GPU = "unknown-gpu"


@dataclass(frozen=True)
class RunLimits:
    """The most one session run may hold: rows, padded tokens (rows x longest row) and option
    markers per row. `None` is no limit."""

    rows: Optional[int] = None
    tokens: Optional[int] = None
    markers: Optional[int] = None


def run_limits(device: str, shape_ranges: Optional[Mapping[str, Mapping[str, int]]] = None
               ) -> RunLimits:
    """A TensorRT engine is built for its profile: every run must fit it, or TensorRT rebuilds
    the engine on the request path (or rejects the shape). CUDA gets a token cap; the CPU runs
    of about a thousand tokens that answer fastest."""
    if device == "tensorrt":
        ranges = shape_ranges or DEFAULT_SHAPE_RANGES
        rows = int(ranges["batch"]["max"])
        return RunLimits(rows=rows, tokens=rows * int(ranges["sequence"]["max"]),
                         markers=int(ranges["markers"]["max"]))
    if device == "cuda":
        return RunLimits(tokens=CUDA_RUN_TOKENS)
    if device == "cpu":
        return RunLimits(tokens=CPU_RUN_TOKENS)
    return RunLimits()


def check_gpu_mem_limit(gpu_mem_limit: Any) -> Optional[int]:
    """Bytes the CUDA arena may take (several replicas sharing one GPU each set it)."""
    if gpu_mem_limit is None:
        return None
    if isinstance(gpu_mem_limit, bool) or not isinstance(gpu_mem_limit, int) or gpu_mem_limit <= 0:
        raise ValueError("gpu_mem_limit must be a positive number of bytes, got "
                         f"{gpu_mem_limit!r}")
    return gpu_mem_limit


def cuda_options(device_id: int, gpu_mem_limit: Optional[int] = None) -> Dict[str, Any]:
    options: Dict[str, Any] = {"device_id": device_id}
    if gpu_mem_limit is not None:
        options["gpu_mem_limit"] = gpu_mem_limit
    return options


def visible_gpu(device_id: int, environ: Mapping[str, str]) -> Optional[str]:
    """What `nvidia-smi -i` must be given for CUDA device `device_id` of this process.

    CUDA numbers only the GPUs in CUDA_VISIBLE_DEVICES (Ray and Kubernetes set it), while
    nvidia-smi numbers all of them: `cuda:0` under `CUDA_VISIBLE_DEVICES=3` is nvidia-smi's 3.
    Entries may be indices or UUIDs, both of which `-i` takes. None when the index names no
    visible GPU.
    """
    listed = environ.get("CUDA_VISIBLE_DEVICES")
    if listed is None:
        return str(device_id)
    entries = [entry.strip() for entry in listed.split(",")]
    visible: List[str] = []
    for entry in entries:
        # CUDA stops at the first entry that is not a valid device
        if not entry or entry.startswith("-") or not (entry.isdigit() or entry.startswith(
                ("GPU-", "MIG-"))):
            break
        visible.append(entry)
    return visible[device_id] if device_id < len(visible) else None


def gpu_name(device_id: int, environ: Optional[Mapping[str, str]] = None) -> str:
    """The model name of CUDA device `device_id` (part of the TensorRT engine cache key)."""
    environ = os.environ if environ is None else environ
    target, smi = visible_gpu(device_id, environ), shutil.which("nvidia-smi")
    if target is None or smi is None:
        return UNKNOWN_GPU
    try:
        done = subprocess.run([smi, "--query-gpu=name", "--format=csv,noheader", "-i", target],
                              capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return UNKNOWN_GPU
    names = done.stdout.strip().splitlines()
    return names[0].strip() if done.returncode == 0 and names else UNKNOWN_GPU


def tensorrt_version() -> str:
    from importlib import metadata

    for name in ("tensorrt", "tensorrt-cu12", "tensorrt-cu13", "tensorrt_libs"):
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return "unknown-trt"


def tensorrt_cache_dir(graph_sha256: str, gpu: str, trt_version: str,
                       root: Optional[str] = None) -> Path:
    """Engines are only valid for one graph, GPU model and TensorRT version: key on all three."""
    base = root or os.environ.get("LAYA_EDGE_TRT_CACHE") or os.path.join(
        "~", ".cache", "laya_edge", "tensorrt")
    key = hashlib.sha256(f"{graph_sha256}|{gpu}|{trt_version}".encode()).hexdigest()[:16]
    return Path(os.path.expanduser(base)) / key


def tensorrt_profile(shape_ranges: Mapping[str, Mapping[str, int]], bound: str) -> str:
    batch = shape_ranges["batch"][bound]
    sequence = shape_ranges["sequence"][bound]
    markers = max(2, shape_ranges["markers"][bound])
    dims = {"input_ids": f"{batch}x{sequence}", "attention_mask": f"{batch}x{sequence}",
            "marker_pos": f"{batch}x{markers}", "marker_mask": f"{batch}x{markers}",
            "qtype": f"{batch}"}
    return ",".join(f"{name}:{dims[name]}" for name in GRAPH_INPUTS)


def tensorrt_options(device_id: int, fp16: bool, cache_dir: Path,
                     shape_ranges: Mapping[str, Mapping[str, int]]) -> Dict[str, Any]:
    """TensorRT provider options: fp16, engine and timing caches, and one optimisation profile
    spanning the manifest's shape ranges (the run limits keep every run inside it), so engines
    are built once, not per shape."""
    return {
        "device_id": device_id,
        "trt_fp16_enable": bool(fp16),
        "trt_engine_cache_enable": True,
        "trt_engine_cache_path": str(cache_dir),
        "trt_timing_cache_enable": True,
        "trt_timing_cache_path": str(cache_dir),
        "trt_profile_min_shapes": tensorrt_profile(shape_ranges, "min"),
        "trt_profile_opt_shapes": tensorrt_profile(shape_ranges, "opt"),
        "trt_profile_max_shapes": tensorrt_profile(shape_ranges, "max"),
    }


def prepare_provider_directories(providers: Sequence[Any]) -> None:
    """Create the TensorRT cache directories a provider list names: TensorRT creates only the
    last path component, and on a fresh machine fails to start without the rest."""
    for entry in providers:
        if isinstance(entry, (tuple, list)) and len(entry) == 2 and isinstance(entry[1], dict):
            for key in ("trt_engine_cache_path", "trt_timing_cache_path"):
                if entry[1].get(key):
                    Path(entry[1][key]).mkdir(parents=True, exist_ok=True)
