"""The onnxruntime session a runtime runs its graph in.

One session per agent, shared by every thread (`InferenceSession.run` is thread-safe). CUDA is
used when onnxruntime offers it; a provider that is listed but fails to initialise falls back to
the CPU with a warning instead of failing the load.
"""
from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any, Dict, List, Optional

import numpy as np

from .bundle import GRAPH_OUTPUTS

CPU = "CPUExecutionProvider"
CUDA = "CUDAExecutionProvider"


def providers_for(device: Optional[str], available: List[str]) -> List[Any]:
    """Execution providers for `device`: None/"auto" (CUDA when present), "cpu", "cuda[:N]"."""
    name = "auto" if device is None else str(device).strip().lower()
    if name == "cpu":
        return [CPU]
    if name == "auto":
        return [CUDA, CPU] if CUDA in available else [CPU]
    kind, _, index = name.partition(":")
    if kind != "cuda" or (index and not index.isdigit()):
        raise ValueError(f"device must be None, 'auto', 'cpu', 'cuda' or 'cuda:N', got {device!r}")
    if CUDA not in available:
        warnings.warn(f"laya: device={device!r} asked for CUDA but this onnxruntime has no "
                      "CUDAExecutionProvider; running on the CPU", RuntimeWarning, stacklevel=4)
        return [CPU]
    return [(CUDA, {"device_id": int(index or 0)}), CPU]


def create_session(graph: Path, device: Optional[str] = None,
                   intra_op_threads: Optional[int] = None) -> Any:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.log_severity_level = 3
    if intra_op_threads is not None:
        options.intra_op_num_threads = int(intra_op_threads)
    providers = providers_for(device, ort.get_available_providers())
    try:
        return ort.InferenceSession(str(graph), sess_options=options, providers=providers)
    except Exception:
        if providers == [CPU]:
            raise
        warnings.warn("laya ONNX: CUDAExecutionProvider initialization failed; falling back to "
                      "CPUExecutionProvider.", RuntimeWarning, stacklevel=3)
        return ort.InferenceSession(str(graph), sess_options=options, providers=[CPU])


def run(session: Any, inputs: Dict[str, np.ndarray]):
    """`(logits, act_logits)` for one collated batch."""
    logits, act_logits = session.run(list(GRAPH_OUTPUTS), inputs)
    return logits, act_logits
