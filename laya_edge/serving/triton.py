"""Answer from a Triton Inference Server that serves a bundle's graph.

`python -m laya_edge.export ... --triton-repo DIR` writes the model repository. Triton runs only
the graph; tokenisation, collation, temperatures, decoding and hooks stay here, in
`ONNXAgent`'s own code path, so a Triton deployment answers exactly as the bundle does locally:

    agent = TritonAgent("./bundles/english", url="localhost:8000", model_name="laya")
    agent.system_one(state, questions)

Needs `tritonclient[http]` (the `triton` extra). The bundle directory supplies the tokenizer
and config; its graph is hashed as usual but never loaded.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..bundle_format import GRAPH_OUTPUTS
from ..onnx_agent import ONNXAgent
from ..session import Plan

DATATYPES = {np.dtype(np.int64): "INT64", np.dtype(np.bool_): "BOOL",
             np.dtype(np.float32): "FP32"}


class TritonSession:
    """The part of `onnxruntime.InferenceSession` the runtime calls (`run`, `get_providers`),
    answered by a Triton model over HTTP. Batches larger than the model's `max_batch_size` are
    sent in slices along the batch axis and joined again."""

    def __init__(self, url: str, model_name: str, client: Any = None,
                 max_batch_size: Optional[int] = None):
        import tritonclient.http as triton_http

        self._http = triton_http
        self.client = client or triton_http.InferenceServerClient(url=url)
        self.model_name = model_name
        if max_batch_size is None:
            config = self.client.get_model_config(model_name)
            max_batch_size = int(config.get("max_batch_size", 0)) or None
        self.max_batch_size = max_batch_size

    def get_providers(self) -> List[str]:
        return [f"Triton:{self.model_name}"]

    def _infer(self, feeds: Dict[str, np.ndarray], names: Sequence[str]) -> List[np.ndarray]:
        inputs = []
        for name, array in feeds.items():
            if name == "qtype":  # rank 1 in the graph, [batch, 1] in Triton's batched form
                array = array.reshape(-1, 1)
            tensor = self._http.InferInput(name, list(array.shape), DATATYPES[array.dtype])
            tensor.set_data_from_numpy(np.ascontiguousarray(array))
            inputs.append(tensor)
        outputs = [self._http.InferRequestedOutput(name) for name in names]
        result = self.client.infer(self.model_name, inputs, outputs=outputs)
        return [result.as_numpy(name) for name in names]

    def run(self, output_names: Optional[Sequence[str]],
            feeds: Dict[str, np.ndarray]) -> List[np.ndarray]:
        names = list(output_names or GRAPH_OUTPUTS)
        rows = len(feeds["qtype"])
        step = self.max_batch_size or rows
        parts = [self._infer({k: v[start:start + step] for k, v in feeds.items()}, names)
                 for start in range(0, rows, step)]
        return [np.concatenate([part[i] for part in parts]) for i in range(len(names))]


class TritonAgent(ONNXAgent):
    """An `ONNXAgent` whose forward pass runs on a Triton server (same answers, same hooks)."""

    def __init__(self, model_id_or_path: str, url: str = "localhost:8000",
                 model_name: str = "laya", client: Any = None, **kwargs: Any):
        self._triton = {"url": url, "model_name": model_name, "client": client}
        super().__init__(model_id_or_path, device="cpu", precision="fp32", **kwargs)

    def _open_session(self, intra_op_threads: Optional[int], session_cache_root: Optional[Path],
                      digest: Callable[[Path], str], check: Callable[[Path], None]
                      ) -> Tuple[TritonSession, Plan]:
        return TritonSession(**self._triton), self.plan
