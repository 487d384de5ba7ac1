"""A Triton Inference Server model repository for a bundle, in one of two flavours.

`onnxruntime` (token ids in, logits out; Triton's ONNX Runtime backend, in NVIDIA's Triton
images): one model per graph the bundle ships, each batching dynamically along the graph's batch
axis:

- `<name>`: the fp32 graph, on CPU or GPU instances as Triton places them;
- `<name>-fp16`: the fp16 graph, on GPU instances;
- `<name>-int8`: the int8 graph, on CPU instances;
- `<name>-tensorrt`: the fp32 graph on GPU instances with the backend's TensorRT accelerator
  (fp16, optimisation profiles spanning the manifest's shape ranges: the options
  `ONNXAgent(device="tensorrt")` gives onnxruntime).

Tokenisation, collation and decoding stay on the client: `laya_edge.serving.triton.TritonAgent`
wraps a Triton call in the bundle's own encode and decode, so it answers as `ONNXAgent` does.

`python` (text in, JSON answers out; Triton's Python backend): one model `<name>` whose
`model.py` runs `laya_edge.serving.triton_backend`, an `ONNXAgent` over the copy of the bundle
the repository carries. docs/serving.md ("Triton") describes both.
"""
from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any, Dict, List, Optional

from ..accelerators import tensorrt_profile
from ..bundle_format import GRAPH_INPUTS, GRAPH_OUTPUTS, inside, read_manifest

FLAVOURS = ("onnxruntime", "python")
# Graph input/output -> (Triton data type, dims after the batch axis, reshape for the model).
INPUTS = {"input_ids": ("TYPE_INT64", [-1], None), "attention_mask": ("TYPE_INT64", [-1], None),
          "marker_pos": ("TYPE_INT64", [-1], None), "marker_mask": ("TYPE_BOOL", [-1], None),
          # rank 1 in the graph: Triton's batched form needs one dim, reshaped away
          "qtype": ("TYPE_INT64", [1], [])}
# precision -> (model name suffix, instance kind; None: Triton's own placement)
PRECISION_MODELS = {"fp32": ("", None), "fp16": ("-fp16", "KIND_GPU"),
                    "int8": ("-int8", "KIND_CPU")}
# The Python flavour: requests gathered for one `execute` call, and how long Triton waits for them.
PYTHON_MAX_BATCH = 64
PYTHON_QUEUE_DELAY_US = 5000
PYTHON_MODEL = ('"""Triton Python-backend entry point written by `python -m laya_edge.export '
                '--triton-flavour python`."""\n'
                "from laya_edge.serving.triton_backend import TritonPythonModel  # noqa: F401\n")


def _dims(values: List[int]) -> str:
    return "[ " + ", ".join(str(v) for v in values) + " ]"


def _tensor(name: str, data_type: str, dims: List[int], reshape: Optional[List[int]]) -> str:
    text = f'  {{ name: "{name}" data_type: {data_type} dims: {_dims(dims)}'
    if reshape is not None:
        text += f" reshape: {{ shape: {_dims(reshape)} }}"
    return text + " }"


def model_config(name: str, n_act: int, shape_ranges: Dict[str, Dict[str, int]],
                 tensorrt: bool, kind: Optional[str] = None,
                 engine_cache: Optional[Path] = None) -> str:
    """`config.pbtxt` text for one model of the onnxruntime flavour."""
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
        kind = "KIND_GPU"
        parameters = [("precision_mode", "FP16"), ("max_workspace_size_bytes", str(4 << 30))]
        if engine_cache is not None:
            parameters += [("trt_engine_cache_enable", "true"),
                           ("trt_engine_cache_path", str(engine_cache)),
                           ("trt_timing_cache_enable", "true"),
                           ("trt_timing_cache_path", str(engine_cache))]
        parameters += [(f"trt_profile_{bound}_shapes", tensorrt_profile(shape_ranges, bound))
                       for bound in ("min", "opt", "max")]
        rendered = " ".join(f'parameters {{ key: "{k}" value: "{v}" }}' for k, v in parameters)
        lines.append("optimization { execution_accelerators { gpu_execution_accelerator: [ "
                     f'{{ name: "tensorrt" {rendered} }} ] }} }}')
    if kind is not None:
        lines.append(f"instance_group [ {{ kind: {kind} count: 1 }} ]")
    return "\n".join(lines) + "\n"


def python_model_config(name: str) -> str:
    """`config.pbtxt` of the Python flavour: one UTF-8 JSON request per row in, one JSON answer
    per row out (`laya_edge.serving.triton_wire`)."""
    from ..serving.triton_wire import REQUEST, RESPONSE

    return "\n".join([
        f'name: "{name}"', 'backend: "python"', f"max_batch_size: {PYTHON_MAX_BATCH}",
        f"input [\n{_tensor(REQUEST, 'TYPE_STRING', [1], None)}\n]",
        f"output [\n{_tensor(RESPONSE, 'TYPE_STRING', [1], None)}\n]",
        f"dynamic_batching {{ max_queue_delay_microseconds: {PYTHON_QUEUE_DELAY_US} }}",
        'parameters { key: "precision" value: { string_value: "auto" } }']) + "\n"


def _shipped_graphs(bundle: Path, manifest: Dict[str, Any]) -> Dict[str, List[Path]]:
    """precision -> [graph, sidecars...] for every variant whose files the bundle holds."""
    graphs = {}
    for precision, variant in (manifest.get("variants") or {}).items():
        files = [inside(bundle, relative) for relative in variant.get("files", [])]
        if precision in PRECISION_MODELS and files and all(f.is_file() for f in files):
            graphs[precision] = files
    if not graphs:
        raise ValueError(f"bundle {str(bundle)!r} holds none of its graphs; re-export it")
    return graphs


def _action_count(graph: Path) -> int:
    import onnx

    model = onnx.load(str(graph), load_external_data=False)
    output = next(o for o in model.graph.output if o.name == GRAPH_OUTPUTS[1])
    return int(output.type.tensor_type.shape.dim[1].dim_value)


def _fresh_version(directory: Path) -> Path:
    version = directory / "1"
    if version.exists():
        shutil.rmtree(version)
    version.mkdir(parents=True)
    return version


def _onnxruntime_models(bundle: Path, manifest: Dict[str, Any], repo: Path, name: str,
                        engine_cache: Optional[Path]) -> Dict[str, Path]:
    graphs = _shipped_graphs(bundle, manifest)
    n_act = _action_count(next(iter(graphs.values()))[0])
    shape_ranges = manifest["graph"]["shape_ranges"]
    models = [(name + PRECISION_MODELS[p][0], p, PRECISION_MODELS[p][1], False) for p in graphs]
    if "fp32" in graphs:  # TensorRT reduces precision itself from the fp32 graph
        models.append((f"{name}-tensorrt", "fp32", None, True))
    written = {}
    for model, precision, kind, tensorrt in models:
        version = _fresh_version(repo / model)
        files = graphs[precision]
        shutil.copyfile(files[0], version / "model.onnx")
        for sidecar in files[1:]:  # keeps its name, so model.onnx's external data resolves
            shutil.copyfile(sidecar, version / sidecar.name)
        (repo / model / "config.pbtxt").write_text(
            model_config(model, n_act, shape_ranges, tensorrt, kind,
                         engine_cache if tensorrt else None), encoding="utf-8")
        written[model] = repo / model
    return written


def _python_model(bundle: Path, repo: Path, name: str) -> Dict[str, Path]:
    version = _fresh_version(repo / name)
    shutil.copytree(bundle, version / "bundle")
    (version / "model.py").write_text(PYTHON_MODEL, encoding="utf-8")
    (repo / name / "config.pbtxt").write_text(python_model_config(name), encoding="utf-8")
    return {name: repo / name}


def write_triton_repo(bundle: Path, repo: Path, name: str = "laya", flavour: str = "onnxruntime",
                      engine_cache: Optional[Path] = None) -> Dict[str, Path]:
    """Write the models of `flavour` under `repo`; returns `{model name: directory}`.

    `engine_cache` (onnxruntime flavour) is where the TensorRT model caches its engines on the
    server: an absolute path (Triton resolves a relative one against its own working
    directory), created here so a server on this machine finds it.
    """
    bundle, repo = Path(bundle), Path(repo)
    if flavour not in FLAVOURS:
        raise ValueError(f"flavour must be one of {list(FLAVOURS)}, got {flavour!r}")
    if engine_cache is not None:
        if flavour != "onnxruntime":
            raise ValueError("engine_cache (--triton-engine-cache) applies to the onnxruntime "
                             "flavour's TensorRT model only")
        if not Path(engine_cache).is_absolute():
            raise ValueError(f"engine_cache (--triton-engine-cache) must be an absolute path "
                             f"on the server, got {str(engine_cache)!r}")
    manifest = read_manifest(bundle)
    if manifest is None:
        raise ValueError(f"{str(bundle)!r} is not a laya_edge bundle (no laya_edge.json)")
    if flavour == "python":
        return _python_model(bundle, repo, name)
    written = _onnxruntime_models(bundle, manifest, repo, name, engine_cache)
    if engine_cache is not None:
        Path(engine_cache).mkdir(parents=True, exist_ok=True)
    return written
