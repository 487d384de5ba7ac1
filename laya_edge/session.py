"""Choosing where and at which precision a bundle runs, and opening the onnxruntime session.

`plan()` is pure: from the requested device/precision (or the caller's own provider list), the
providers this onnxruntime offers and the bundle's variants it decides the graph file, the
providers, how large one run may be, and the plans to fall back to (TensorRT -> CUDA -> CPU),
and says why. `create_session` walks that chain: a provider that fails to start, or that
onnxruntime silently leaves out, costs one RuntimeWarning naming it, and the next plan runs
with its own precision (the fp16 graph chosen for a GPU never runs on the CPU) and device
index. One session per agent is shared by every thread (`InferenceSession.run` is thread-safe).
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import (AbstractSet, Any, Callable, Dict, List, Mapping, Optional, Sequence,
                    Tuple)

from .accelerators import (DEFAULT_SHAPE_RANGES, RunLimits, check_gpu_mem_limit, cuda_options,
                           gpu_name, prepare_provider_directories, run_limits, tensorrt_cache_dir,
                           tensorrt_options, tensorrt_version)

CPU = "CPUExecutionProvider"
CUDA = "CUDAExecutionProvider"
TENSORRT = "TensorrtExecutionProvider"
PROVIDER_DEVICES = {CPU: "cpu", CUDA: "cuda", TENSORRT: "tensorrt"}
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
    """What a session will run: the device, the variant, the providers, how large one run may
    be, the plan to try if these providers fail, and why."""

    device: str
    device_id: int
    precision: str
    graph: Path
    providers: List[Any]
    reasons: List[str] = field(default_factory=list)
    limits: RunLimits = field(default_factory=RunLimits)
    fallback: Optional["Plan"] = None

    @property
    def binding(self) -> Optional[Tuple[str, int]]:
        """Where a run's inputs and outputs live: onnxruntime's device type and index on CUDA and
        TensorRT (whose tensors are CUDA memory); `None` (a plain run) on the CPU and on any
        other provider a caller names."""
        return ("cuda", self.device_id) if self.device in ("cuda", "tensorrt") else None


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


def provider_name(entry: Any) -> str:
    return entry[0] if isinstance(entry, (tuple, list)) else entry


def device_of(provider: str) -> str:
    """The device a provider runs on, as `runtime_info()` reports it."""
    return PROVIDER_DEVICES.get(provider, provider)


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


def _check_precision(precision: Optional[str]) -> str:
    name = "auto" if precision is None else str(precision).strip().lower()
    if name not in PRECISIONS:
        raise ValueError(f"precision must be one of {list(PRECISIONS)}, got {precision!r}")
    return name


def _pick_precision(name: str, device: str, variants: Mapping[str, Path],
                    reasons: List[str], slow: AbstractSet[str] = frozenset()) -> str:
    """The variant to run; `slow` names those the exporter timed slower than fp32 on the CPU,
    which auto leaves for fp32 there."""
    if name == "auto":
        preferred = {"cpu": "int8", "cuda": "fp16", "tensorrt": "fp16"}.get(device, "fp32")
        skipped = device == "cpu" and preferred in slow and "fp32" in variants
        chosen = next(p for p in (preferred, "fp32", *PRECISIONS[1:])
                      if p in variants and not (skipped and p == preferred))
        why = ("" if chosen == preferred else
               f" (its {preferred} variant was timed slower than fp32 at export)" if skipped else
               f" (the bundle has no {preferred} variant)")
        reasons.append(f"precision=auto on {device}: {chosen}{why}")
        return chosen
    if name not in variants:
        how = ("re-export it without --ship" if name == "fp32" else
               f"export one with `python -m laya_edge.export ... --precision fp32,{name}`")
        raise ValueError(f"this bundle has no {name} variant (it has {sorted(variants)}); {how}")
    reasons.append(f"precision={name}: as asked")
    return name


def _cpu_fallback(requested: str, device_id: int, variants: Mapping[str, Path],
                  slow: AbstractSet[str]) -> Plan:
    """The last resort: the CPU, with the precision planned for the CPU. An fp16 request was
    for the GPU: the CPU runs fp32 in its place when the bundle has it."""
    reasons: List[str] = []
    name = "fp32" if requested == "fp16" and "fp32" in variants else requested
    if name != "auto" and name not in variants:
        name = "auto"
    precision = _pick_precision(name, "cpu", variants, reasons, slow)
    return Plan("cpu", device_id, precision, variants[precision], [CPU], reasons,
                run_limits("cpu"))


def _device_plan(device: str, device_id: int, requested: str, variants: Mapping[str, Path],
                 available: Sequence[str], reasons: List[str], graph_sha256: str,
                 shape_ranges: Optional[Mapping[str, Mapping[str, int]]],
                 trt_cache_root: Optional[str], gpu_mem_limit: Optional[int],
                 slow: AbstractSet[str]) -> Plan:
    precision = _pick_precision(requested, device, variants, reasons, slow)
    graph = variants[precision]
    if device == "cpu":
        return Plan("cpu", device_id, precision, graph, [CPU], reasons, run_limits("cpu"))
    cuda = (CUDA, cuda_options(device_id, gpu_mem_limit))
    if device == "cuda":
        return Plan("cuda", device_id, precision, graph, [cuda, CPU], reasons, run_limits("cuda"),
                    _cpu_fallback(requested, device_id, variants, slow))
    # TensorRT reduces precision itself; it is fed the fp32 graph.
    if "fp32" not in variants:
        raise ValueError(f"device='tensorrt' builds its engine from the fp32 graph, which this "
                         f"bundle does not ship (it has {sorted(variants)}); re-export without "
                         "--ship or run on device='cuda'")
    ranges = shape_ranges or DEFAULT_SHAPE_RANGES
    cache = tensorrt_cache_dir(graph_sha256, gpu_name(device_id), tensorrt_version(),
                               trt_cache_root)
    trt = (TENSORRT, tensorrt_options(device_id, precision == "fp16", cache, ranges))
    reasons.append(f"tensorrt: fp32 graph, trt_fp16_enable={precision == 'fp16'}, "
                   f"engine cache {cache}")
    fallback = (_device_plan("cuda", device_id, requested, variants, available, [],
                             graph_sha256, shape_ranges, trt_cache_root, gpu_mem_limit, slow)
                if CUDA in available else _cpu_fallback(requested, device_id, variants, slow))
    return Plan("tensorrt", device_id, precision, variants["fp32"], [trt, cuda, CPU],
                reasons, run_limits("tensorrt", ranges), fallback)


def _caller_providers(providers: Any, provider_options: Any) -> List[Any]:
    """The caller's `providers=`/`provider_options=` as one list onnxruntime takes, refused
    with a clear error where onnxruntime would guess or silently drop entries."""
    if isinstance(providers, (str, bytes)) or not isinstance(providers, (list, tuple)) \
            or not providers:
        raise ValueError("providers must be a non-empty list of provider names or (name, "
                         f"options) pairs, got {providers!r}")
    entries: List[Any] = []
    for entry in providers:
        if isinstance(entry, str):
            entries.append(entry)
        elif (isinstance(entry, (list, tuple)) and len(entry) == 2 and isinstance(entry[0], str)
              and isinstance(entry[1], dict)):
            entries.append((entry[0], dict(entry[1])))
        else:
            raise ValueError("providers entries must be a provider name or a (name, options "
                             f"dict) pair, got {entry!r}")
    if provider_options is None:
        return entries
    if not isinstance(provider_options, (list, tuple)) or len(provider_options) != len(entries):
        raise ValueError("provider_options must be a list with one options dict per provider "
                         f"({len(entries)}), got {provider_options!r}")
    if any(not isinstance(entry, str) for entry in entries):
        raise ValueError("give provider options either inside providers as (name, options) "
                         "pairs or in provider_options, not both")
    if any(not isinstance(options, dict) for options in provider_options):
        raise ValueError(f"provider_options entries must be dicts, got {provider_options!r}")
    return [(name, dict(options)) for name, options in zip(entries, provider_options)]


def _caller_plan(kind: str, device_id: int, index_given: bool, requested: str,
                 providers: List[Any], variants: Mapping[str, Path], reasons: List[str],
                 shape_ranges: Optional[Mapping[str, Mapping[str, int]]],
                 slow: AbstractSet[str]) -> Plan:
    """A plan for the caller's own provider list: the device is the first provider's, and
    `device=` may only agree with it."""
    first = providers[0]
    device = device_of(provider_name(first))
    if kind != "auto" and kind != device:
        raise ValueError(f"device={kind!r} disagrees with providers=, whose first provider "
                         f"{provider_name(first)!r} runs on {device!r}; pass one of them")
    listed = first[1].get("device_id") if isinstance(first, tuple) else None
    if listed is not None and (isinstance(listed, bool) or not str(listed).isdigit()):
        raise ValueError(f"providers=: {provider_name(first)}'s device_id must be a GPU index, "
                         f"got {listed!r}")
    if listed is not None and index_given and int(listed) != device_id:
        raise ValueError(f"device=':{device_id}' disagrees with providers=, whose options set "
                         f"device_id={listed}; pass one of them")
    device_id = device_id if listed is None else int(listed)
    reasons.append(f"providers=: used as given; device {device} (their first provider)")
    precision = _pick_precision(requested, device, variants, reasons, slow)
    graph = variants["fp32" if device == "tensorrt" and "fp32" in variants else precision]
    fallback = None if device == "cpu" else _cpu_fallback(requested, device_id, variants, slow)
    return Plan(device, device_id, precision, graph, providers, reasons,
                run_limits(device, shape_ranges), fallback)


def plan(device: Optional[str], precision: Optional[str], available: Sequence[str],
         variants: Mapping[str, Path], graph_sha256: str = "",
         shape_ranges: Optional[Mapping[str, Mapping[str, int]]] = None,
         providers: Optional[Sequence[Any]] = None,
         provider_options: Optional[Sequence[Dict[str, Any]]] = None,
         trt_cache_root: Optional[str] = None, gpu_mem_limit: Optional[int] = None,
         slower_than_fp32: AbstractSet[str] = frozenset()) -> Plan:
    """Decide device, variant, providers, run limits and fallbacks. `variants` maps precision
    -> graph file; `slower_than_fp32` names the variants the exporter timed slower than fp32
    on the CPU (the manifest's record), which precision="auto" passes over there."""
    kind, device_id = parse_device(device)
    requested = _check_precision(precision)
    gpu_mem_limit = check_gpu_mem_limit(gpu_mem_limit)
    reasons: List[str] = []
    if providers is not None:
        return _caller_plan(kind, device_id, ":" in str(device or ""), requested,
                            _caller_providers(providers, provider_options), variants, reasons,
                            shape_ranges, slower_than_fp32)
    if provider_options is not None:
        raise ValueError("provider_options needs providers= (one options dict per provider)")
    chosen = _pick_device(kind, available, reasons)
    return _device_plan(chosen, device_id, requested, variants, available, reasons,
                        graph_sha256, shape_ranges, trt_cache_root, gpu_mem_limit,
                        slower_than_fp32)


def disabled_optimizers_for(provider_names: Sequence[str]) -> Dict[str, List[str]]:
    """The `InferenceSession` keyword for a session on these providers: CPU alone leaves
    CPU_DISABLED_OPTIMIZERS off."""
    return ({"disabled_optimizers": list(CPU_DISABLED_OPTIMIZERS)}
            if list(provider_names) == [CPU] else {})


def _fall_back(failed: Plan, successor: Plan, why: str) -> None:
    name = provider_name(failed.providers[0])
    warnings.warn(f"laya ONNX: {name} {why}; falling back to "
                  f"{provider_name(successor.providers[0])} ({successor.precision}).",
                  RuntimeWarning, stacklevel=4)
    successor.reasons[:0] = [*failed.reasons, f"{name} {why}; fell back to "
                             f"{successor.device} ({successor.precision} graph)"]


def create_session(chosen: Plan, intra_op_threads: Optional[int] = None,
                   cache_root: Optional[Path] = None,
                   digest: Callable[[Path], str] = lambda graph: "",
                   check: Callable[[Path], None] = lambda graph: None) -> Tuple[Any, Plan]:
    """The session for a plan and the plan it actually runs.

    The chosen plan's graph was checked by the caller; a fallback's graph goes through `check`
    before it is parsed. A CPU session goes through the session cache (laya_edge.session_cache)
    when `cache_root` is set and the graph's digest is known. onnxruntime's own fallback is off:
    it would retry on CUDA without the provider options (the device index lost) and print to
    stdout.
    """
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
                                    enable_fallback=0, **disabled_optimizers_for(
                                        [provider_name(entry) for entry in providers]))

    attempts = [chosen]
    while attempts[-1].fallback is not None:
        attempts.append(attempts[-1].fallback)
    checked = {chosen.graph}
    for index, attempt in enumerate(attempts):
        last = index == len(attempts) - 1
        if attempt.graph not in checked:
            check(attempt.graph)
            checked.add(attempt.graph)
        names = [provider_name(entry) for entry in attempt.providers]
        missing = [name for name in names if name not in ort.get_available_providers()]
        if missing and not last:
            _fall_back(attempt, attempts[index + 1], "is not offered by this onnxruntime"
                       f"{' (' + DUAL_INSTALL + ')' if dual_install() else ''}")
            continue
        sha256 = digest(attempt.graph) if names == [CPU] and cache_root is not None else ""
        if sha256:
            from . import session_cache

            key = session_cache.entry_key(sha256, CPU_DISABLED_OPTIMIZERS)
            session = session_cache.open_session(lambda path, opts: make(path, opts, [CPU]),
                                                 attempt.graph, options, cache_root, key,
                                                 attempt.reasons)
            return session, attempt
        try:
            prepare_provider_directories(attempt.providers)
            session = make(str(attempt.graph), options(), attempt.providers)
        except Exception as error:
            if last:
                raise
            _fall_back(attempt, attempts[index + 1],
                       f"failed to initialise ({type(error).__name__}: {str(error)[:300]})")
            continue
        if names[0] in session.get_providers() or last:
            return session, attempt
        _fall_back(attempt, attempts[index + 1], "was not enabled by onnxruntime (are its "
                   "libraries and the driver installed?)")
    raise AssertionError("unreachable: the last attempt returns or raises")


def session_device(session: Any) -> str:
    """The device the session's first active provider runs on: what actually runs."""
    return device_of(session.get_providers()[0])

