"""Choosing where and at which precision a bundle runs, and the onnxruntime session that does it.

`plan()` is pure: from the requested device/precision, the providers this onnxruntime offers and
the bundle's variants it decides the graph file and the provider list, and says why. Then one
session per agent is created (shared by every thread: `InferenceSession.run` is thread-safe). A
provider that is listed but fails to initialise falls back with one RuntimeWarning naming it.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from .bundle import GRAPH_INPUTS, GRAPH_OUTPUTS

CPU = "CPUExecutionProvider"
CUDA = "CUDAExecutionProvider"
TENSORRT = "TensorrtExecutionProvider"
# onnxruntime fusions a CPU session leaves off: its CPU SkipLayerNormalization kernel is slower
# than the Add and LayerNormalization it would replace (the exporter splits the ones onnxscript
# fused, see export/fusion.py). Accelerator sessions keep it: their fused kernel is the fast one.
CPU_DISABLED_OPTIMIZERS = ("SkipLayerNormFusion",)
DEVICES = ("auto", "cpu", "cuda", "tensorrt")
PRECISIONS = ("auto", "fp32", "fp16", "int8")
DUAL_INSTALL = ("both onnxruntime and onnxruntime-gpu are installed; they share the onnxruntime "
                "package, so whichever was installed last won. Keep one: `pip uninstall -y "
                "onnxruntime onnxruntime-gpu && pip install onnxruntime-gpu`")


@dataclass
class Plan:
    """What a session will run: the device, the variant, the providers, and why."""

    device: str
    device_id: int
    precision: str
    graph: Path
    providers: List[Any]
    reasons: List[str] = field(default_factory=list)


def parse_device(device: Optional[str]) -> Tuple[str, int]:
    """`(kind, index)` of `None`, "auto", "cpu", "cuda", "cuda:N", "tensorrt" or "tensorrt:N"."""
    name = "auto" if device is None else str(device).strip().lower()
    kind, _, index = name.partition(":")
    if kind not in DEVICES or (index and (not index.isdigit() or kind in ("auto", "cpu"))):
        raise ValueError("device must be None, 'auto', 'cpu', 'cuda', 'cuda:N', 'tensorrt' or "
                         f"'tensorrt:N', got {device!r}")
    return kind, int(index or 0)


def dual_install() -> bool:
    """Whether the CPU and GPU builds of onnxruntime are both installed (they clash)."""
    from importlib import metadata  # ~20 ms to import; only fallbacks and runtime_info ask

    names = {(dist.metadata["Name"] or "").lower() for dist in metadata.distributions()}
    return {"onnxruntime", "onnxruntime-gpu"} <= names


def _pick_device(kind: str, available: Sequence[str], reasons: List[str]) -> str:
    if kind == "auto":
        chosen = "cuda" if CUDA in available else "cpu"
        reasons.append(f"device=auto: {chosen} ({'CUDA' if chosen == 'cuda' else 'no CUDA'} "
                       "execution provider in this onnxruntime; TensorRT only when asked for, "
                       "as building its engines takes minutes)")
        return chosen
    wanted = {"cpu": CPU, "cuda": CUDA, "tensorrt": TENSORRT}[kind]
    if wanted in available:
        reasons.append(f"device={kind}: {wanted} is available")
        return kind
    fallback = "cuda" if kind == "tensorrt" and CUDA in available else "cpu"
    note = f" ({DUAL_INSTALL})" if dual_install() else ""
    warnings.warn(f"laya: device={kind!r} needs {wanted}, which this onnxruntime does not offer"
                  f"{note}; running on {fallback}", RuntimeWarning, stacklevel=4)
    reasons.append(f"device={kind}: {wanted} unavailable, fell back to {fallback}")
    return fallback


def _pick_precision(precision: Optional[str], device: str, variants: Mapping[str, Path],
                    reasons: List[str]) -> str:
    name = "auto" if precision is None else str(precision).strip().lower()
    if name not in PRECISIONS:
        raise ValueError(f"precision must be one of {list(PRECISIONS)}, got {precision!r}")
    if name == "auto":
        preferred = "int8" if device == "cpu" else "fp16"
        chosen = next(p for p in (preferred, "fp32", *PRECISIONS[1:]) if p in variants)
        reasons.append(f"precision=auto on {device}: {chosen}"
                       + ("" if chosen == preferred else f" (the bundle has no {preferred} "
                                                         "variant)"))
        return chosen
    if name not in variants:
        how = ("re-export it without --ship" if name == "fp32" else
               f"export one with `python -m laya_edge.export ... --precision fp32,{name}`")
        raise ValueError(f"this bundle has no {name} variant (it has {sorted(variants)}); {how}")
    reasons.append(f"precision={name}: as asked")
    return name


def cuda_options(device_id: int) -> Dict[str, Any]:
    return {"device_id": device_id}


def _gpu_name(device_id: int) -> str:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return "unknown-gpu"
    try:
        done = subprocess.run([smi, "--query-gpu=name", "--format=csv,noheader", "-i",
                               str(device_id)], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return "unknown-gpu"
    return done.stdout.strip() or "unknown-gpu"


def _tensorrt_version() -> str:
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
    """TensorRT provider options: fp16, engine and timing caches, and optimisation profiles
    spanning the manifest's shape ranges, so engines are built once, not per shape."""
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


def plan(device: Optional[str], precision: Optional[str], available: Sequence[str],
         variants: Mapping[str, Path], graph_sha256: str = "",
         shape_ranges: Optional[Mapping[str, Mapping[str, int]]] = None,
         providers: Optional[Sequence[Any]] = None,
         provider_options: Optional[Sequence[Dict[str, Any]]] = None,
         trt_cache_root: Optional[str] = None) -> Plan:
    """Decide device, variant and providers. `variants` maps precision -> graph file."""
    kind, device_id = parse_device(device)
    reasons: List[str] = []
    chosen = _pick_device(kind, available, reasons)
    wanted_precision = _pick_precision(precision, chosen, variants, reasons)
    graph = variants[wanted_precision]
    if providers is not None:
        chosen_providers = list(providers)
        if provider_options is not None:
            chosen_providers = [(name, dict(options)) for name, options in
                                zip(providers, provider_options)]
        reasons.append("providers=: used exactly as given")
    elif chosen == "tensorrt":
        # TensorRT reduces precision itself; it is fed the fp32 graph.
        if "fp32" not in variants:
            raise ValueError(f"device={kind!r} builds its engine from the fp32 graph, which this "
                             f"bundle does not ship (it has {sorted(variants)}); re-export "
                             "without --ship or run on device='cuda'")
        graph = variants["fp32"]
        cache = tensorrt_cache_dir(graph_sha256, _gpu_name(device_id), _tensorrt_version(),
                                   trt_cache_root)
        ranges = shape_ranges or {"batch": {"min": 1, "opt": 8, "max": 64},
                                  "sequence": {"min": 4, "opt": 256, "max": 512},
                                  "markers": {"min": 2, "opt": 4, "max": 64}}
        chosen_providers = [(TENSORRT, tensorrt_options(device_id, wanted_precision == "fp16",
                                                        cache, ranges)),
                            (CUDA, cuda_options(device_id)), CPU]
        reasons.append(f"tensorrt: fp32 graph, trt_fp16_enable={wanted_precision == 'fp16'}, "
                       f"engine cache {cache}")
    elif chosen == "cuda":
        chosen_providers = [(CUDA, cuda_options(device_id)), CPU]
    else:
        chosen_providers = [CPU]
    return Plan(chosen, device_id, wanted_precision, graph, chosen_providers, reasons)


def _provider_name(entry: Any) -> str:
    return entry[0] if isinstance(entry, (tuple, list)) else entry


def disabled_optimizers_for(provider_names: Sequence[str]) -> Dict[str, List[str]]:
    """The `InferenceSession` keyword for a session on these providers: CPU alone leaves
    CPU_DISABLED_OPTIMIZERS off."""
    return ({"disabled_optimizers": list(CPU_DISABLED_OPTIMIZERS)}
            if list(provider_names) == [CPU] else {})


def create_session(chosen: Plan, intra_op_threads: Optional[int] = None,
                   cache_root: Optional[Path] = None, graph_sha256: str = "") -> Any:
    """The session for a plan; a failing or silently dropped accelerator warns once, names
    itself, and the plan is updated to what actually runs. A CPU session goes through the
    session cache (laya_edge.session_cache) when `cache_root` is set and the graph's digest is
    known."""
    import onnxruntime as ort

    def options(optimise: bool = True) -> Any:
        made = ort.SessionOptions()
        made.graph_optimization_level = (ort.GraphOptimizationLevel.ORT_ENABLE_ALL if optimise
                                          else ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
        made.log_severity_level = 3
        if intra_op_threads is not None:
            made.intra_op_num_threads = int(intra_op_threads)
        return made

    def make(path: str, session_options: Any, providers: Sequence[Any]) -> Any:
        return ort.InferenceSession(path, sess_options=session_options, providers=providers,
                                    **disabled_optimizers_for(
                                        [_provider_name(entry) for entry in providers]))

    names = [_provider_name(entry) for entry in chosen.providers]
    if names == [CPU] and cache_root is not None and graph_sha256:
        from . import session_cache

        key = session_cache.entry_key(graph_sha256, CPU_DISABLED_OPTIMIZERS)
        return session_cache.open_session(lambda path, opts: make(path, opts, [CPU]),
                                          chosen.graph, options, cache_root, key, chosen.reasons)
    try:
        session = make(str(chosen.graph), options(), chosen.providers)
    except Exception:
        if names == [CPU]:
            raise
        warnings.warn(f"laya ONNX: {names[0]} initialization failed; falling back to "
                      f"{CPU}.", RuntimeWarning, stacklevel=3)
        chosen.reasons.append(f"{names[0]} failed to initialise; running on the CPU")
        chosen.device, chosen.providers = "cpu", [CPU]
        return make(str(chosen.graph), options(), [CPU])
    active = session.get_providers()
    if names[0] not in active:
        warnings.warn(f"laya ONNX: {names[0]} was requested but onnxruntime did not enable it; "
                      f"running on {active[0]}.", RuntimeWarning, stacklevel=3)
        chosen.reasons.append(f"{names[0]} not enabled by onnxruntime; running on {active[0]}")
        chosen.device = {CPU: "cpu", CUDA: "cuda", TENSORRT: "tensorrt"}.get(active[0], active[0])
    return session


def run(session: Any, inputs: Dict[str, np.ndarray], io_binding: bool = False):
    """`(logits, act_logits)` for one collated batch.

    With `io_binding` (accelerators), inputs are copied to the device once and the outputs read
    back once, instead of onnxruntime staging them per node.
    """
    if not io_binding:
        logits, act_logits = session.run(list(GRAPH_OUTPUTS), inputs)
        return logits, act_logits
    binding = session.io_binding()
    for name, array in inputs.items():
        binding.bind_cpu_input(name, array)
    for name in GRAPH_OUTPUTS:
        binding.bind_output(name)
    session.run_with_iobinding(binding)
    logits, act_logits = binding.copy_outputs_to_cpu()
    return logits, act_logits
