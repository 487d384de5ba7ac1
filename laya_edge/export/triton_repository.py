"""A Triton Inference Server model repository for a bundle's graph.

Two models over the same fp32 graph, both on Triton's ONNX Runtime backend:

- `<name>`: CPU or GPU instances as Triton places them;
- `<name>-tensorrt`: GPU instances with the backend's TensorRT execution accelerator (fp16,
  engine cache, optimisation profiles spanning the manifest's shape ranges, the same options
  `ONNXAgent(device="tensorrt")` gives onnxruntime).

Both batch dynamically along the graph's batch axis. Tokenisation, collation and decoding stay
on the client: `laya_edge.serving.triton.TritonAgent` wraps a Triton call in the bundle's own
encode and decode, so a Triton deployment answers exactly as `ONNXAgent` does.
"""
from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any, Dict, List, Optional

from ..accelerators import tensorrt_profile
from ..bundle_format import GRAPH_INPUTS, GRAPH_OUTPUTS, inside, read_manifest

# Graph input/output -> (Triton data type, dims after the batch axis, reshape for the model).
INPUTS = {"input_ids": ("TYPE_INT64", [-1], None), "attention_mask": ("TYPE_INT64", [-1], None),
          "marker_pos": ("TYPE_INT64", [-1], None), "marker_mask": ("TYPE_BOOL", [-1], None),
          # rank 1 in the graph: Triton's batched form needs one dim, reshaped away
          "qtype": ("TYPE_INT64", [1], [])}


def _dims(values: List[int]) -> str:
    return "[ " + ", ".join(str(v) for v in values) + " ]"


def _tensor(name: str, data_type: str, dims: List[int], reshape: Optional[List[int]]) -> str:
    text = f'  {{ name: "{name}" data_type: {data_type} dims: {_dims(dims)}'
    if reshape is not None:
        text += f" reshape: {{ shape: {_dims(reshape)} }}"
    return text + " }"


def model_config(name: str, n_act: int, shape_ranges: Dict[str, Dict[str, int]],
                 tensorrt: bool) -> str:
    """`config.pbtxt` text for one model of the repository."""
    batch = shape_ranges["batch"]
    preferred = sorted({max(1, batch["opt"]), max(1, batch["max"] // 2)})
    inputs = ",\n".join(_tensor(key, *INPUTS[key]) for key in GRAPH_INPUTS)
    outputs = ",\n".join([_tensor(GRAPH_OUTPUTS[0], "TYPE_FP32", [-1], None),
                          _tensor(GRAPH_OUTPUTS[1], "TYPE_FP32", [n_act], None)])
    lines = [f'name: "{name}"', 'platform: "onnxruntime_onnx"',
             f"max_batch_size: {batch['max']}", f"input [\n{inputs}\n]", f"output [\n{outputs}\n]",
             f"dynamic_batching {{ preferred_batch_size: {_dims(preferred)} "
             "max_queue_delay_microseconds: 500 }"]
    if tensorrt:
        parameters = [("precision_mode", "FP16"), ("max_workspace_size_bytes", str(4 << 30)),
                      ("trt_engine_cache_enable", "true")]
        parameters += [(f"trt_profile_{bound}_shapes", tensorrt_profile(shape_ranges, bound))
                       for bound in ("min", "opt", "max")]
        rendered = " ".join(f'parameters {{ key: "{k}" value: "{v}" }}' for k, v in parameters)
        lines += ["instance_group [ { kind: KIND_GPU count: 1 } ]",
                  "optimization { execution_accelerators { gpu_execution_accelerator: [ "
                  f'{{ name: "tensorrt" {rendered} }} ] }} }}']
    return "\n".join(lines) + "\n"


def _graph_files(bundle: Path, manifest: Dict[str, Any]) -> List[Path]:
    variant = (manifest.get("variants") or {}).get("fp32")
    if not variant:
        raise ValueError(f"bundle {str(bundle)!r} has no fp32 graph (exported with --ship?); a "
                         "Triton repository needs it: re-export without --ship")
    return [inside(bundle, relative) for relative in variant["files"]]


def _action_count(graph: Path) -> int:
    import onnx

    model = onnx.load(str(graph), load_external_data=False)
    output = next(o for o in model.graph.output if o.name == GRAPH_OUTPUTS[1])
    return int(output.type.tensor_type.shape.dim[1].dim_value)


def write_triton_repo(bundle: Path, repo: Path, name: str = "laya") -> Dict[str, Path]:
    """Write `<repo>/<name>` and `<repo>/<name>-tensorrt`; returns `{model name: directory}`.

    The graph keeps its file names next to `model.onnx` so an external-data sidecar resolves.
    """
    bundle, repo = Path(bundle), Path(repo)
    manifest = read_manifest(bundle)
    if manifest is None:
        raise ValueError(f"{str(bundle)!r} is not a laya_edge bundle (no laya_edge.json)")
    files = _graph_files(bundle, manifest)
    n_act = _action_count(files[0])
    shape_ranges = manifest["graph"]["shape_ranges"]
    written = {}
    for model, tensorrt in ((name, False), (f"{name}-tensorrt", True)):
        directory = repo / model
        version = directory / "1"
        if version.exists():
            shutil.rmtree(version)
        version.mkdir(parents=True)
        shutil.copyfile(files[0], version / "model.onnx")
        for sidecar in files[1:]:
            shutil.copyfile(sidecar, version / sidecar.name)
        (directory / "config.pbtxt").write_text(
            model_config(model, n_act, shape_ranges, tensorrt), encoding="utf-8")
        written[model] = directory
    return written
