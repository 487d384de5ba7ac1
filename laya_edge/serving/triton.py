"""Answer from a Triton Inference Server that serves a bundle.

`python -m laya_edge.export ... --triton-repo DIR [--triton-flavour onnxruntime|python]` writes
the model repository; docs/serving.md ("Triton") says how to serve it.

- The onnxruntime flavour runs only the graph; `TritonAgent` keeps tokenisation, collation,
  temperatures, decoding and hooks here, in `ONNXAgent`'s own code path, so it answers exactly
  as the bundle does locally:

      agent = TritonAgent("./bundles/english", url="localhost:8000", model_name="laya")
      agent.system_one(state, questions)

- The python flavour runs a whole `ONNXAgent` inside Triton; `TritonTextClient` sends it text
  and questions and returns the payload:

      client = TritonTextClient("localhost:8001", protocol="grpc")
      client.predict(state, questions)

Needs `tritonclient[http]` (the `triton` extra; `tritonclient[grpc]` for gRPC).
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..accelerators import RunLimits
from ..onnx_agent import ONNXAgent
from ..session import Plan
from .triton_wire import REQUEST, RESPONSE, from_rows, to_rows

DATATYPES = {np.dtype(np.int64): "INT64", np.dtype(np.bool_): "BOOL",
             np.dtype(np.float32): "FP32"}
PROTOCOLS = ("http", "grpc")


def _client_module(protocol: str) -> Any:
    if protocol not in PROTOCOLS:
        raise ValueError(f"protocol must be one of {list(PROTOCOLS)}, got {protocol!r}")
    if protocol == "grpc":
        import tritonclient.grpc as module
    else:
        import tritonclient.http as module
    return module


def _inputs(module: Any, feeds: Dict[str, np.ndarray]) -> List[Any]:
    inputs = []
    for name, array in feeds.items():
        datatype = "BYTES" if array.dtype == object else DATATYPES[array.dtype]
        tensor = module.InferInput(name, list(array.shape), datatype)
        tensor.set_data_from_numpy(np.ascontiguousarray(array))
        inputs.append(tensor)
    return inputs


class TritonSession:
    """The part of `onnxruntime.InferenceSession` the runtime calls (`run`, `get_providers`),
    answered by a Triton model over HTTP, one request per run. `max_batch_size` is the model's
    (read from the server when not given): the agent's run limits keep every run within it."""

    def __init__(self, url: str, model_name: str, client: Any = None,
                 max_batch_size: Optional[int] = None):
        self._http = _client_module("http")
        self.client = client or self._http.InferenceServerClient(url=url)
        self.model_name = model_name
        if max_batch_size is None:
            config = self.client.get_model_config(model_name)
            max_batch_size = int(config.get("max_batch_size", 0)) or None
        self.max_batch_size = max_batch_size

    def get_providers(self) -> List[str]:
        return [f"Triton:{self.model_name}"]

    def run(self, output_names: Optional[Sequence[str]],
            feeds: Dict[str, np.ndarray]) -> List[np.ndarray]:
        from ..bundle_format import GRAPH_OUTPUTS

        names = list(output_names or GRAPH_OUTPUTS)
        # qtype is rank 1 in the graph, [batch, 1] in Triton's batched form
        feeds = dict(feeds, qtype=feeds["qtype"].reshape(-1, 1))
        outputs = [self._http.InferRequestedOutput(name) for name in names]
        result = self.client.infer(self.model_name, _inputs(self._http, feeds), outputs=outputs)
        return [result.as_numpy(name) for name in names]


class TritonAgent(ONNXAgent):
    """An `ONNXAgent` whose forward pass runs on a Triton server (same answers, same hooks).

    Runs are sized for the server, not for local onnxruntime: as many rows as the Triton model
    batches (its `max_batch_size`) and no token cap, so one `predict_batch` is as few requests
    as the model allows."""

    def __init__(self, model_id_or_path: str, url: str = "localhost:8000",
                 model_name: str = "laya", client: Any = None, **kwargs: Any):
        self._triton = {"url": url, "model_name": model_name, "client": client}
        super().__init__(model_id_or_path, device="cpu", precision="fp32", **kwargs)

    def _open_session(self, intra_op_threads: Optional[int], session_cache_root: Optional[Path],
                      digest: Callable[[Path], str], check: Callable[[Path], None]
                      ) -> Tuple[TritonSession, Plan]:
        session = TritonSession(**self._triton)
        served = dataclasses.replace(
            self.plan, providers=session.get_providers(),
            limits=RunLimits(rows=session.max_batch_size),
            reasons=self.plan.reasons + [f"runs on Triton model {session.model_name!r}, "
                                         f"{session.max_batch_size or 'any number of'} rows "
                                         "per request"])
        return session, served


class TritonTextClient:
    """A client of the python flavour: text and questions in, `ONNXAgent`'s payload out.

    `url` is the server's HTTP (default port 8000) or gRPC (8001) address, as `protocol` says.
    A request Triton or the model refuses raises `tritonclient.utils.InferenceServerException`
    with the model's message (which names the offending field)."""

    def __init__(self, url: str = "localhost:8000", model_name: str = "laya",
                 protocol: str = "http"):
        self._module = _client_module(protocol)
        self.client = self._module.InferenceServerClient(url=url)
        self.model_name = model_name

    def predict_batch(self, bodies: Sequence[Dict[str, Any]]) -> List[Dict[str, Any]]:
        """One payload per body (`{"state": ..., "questions": ..., controls}`), in one request."""
        inputs = _inputs(self._module, {REQUEST: to_rows(list(bodies))})
        result = self.client.infer(self.model_name, inputs,
                                   outputs=[self._module.InferRequestedOutput(RESPONSE)])
        return from_rows(result.as_numpy(RESPONSE), RESPONSE)

    def predict(self, state: Any, questions: Dict[str, Any], **controls: Any) -> Dict[str, Any]:
        """The payload for one state, as `ONNXAgent.system_one(state, questions, **controls)`."""
        return self.predict_batch([dict(controls, state=state, questions=questions)])[0]
