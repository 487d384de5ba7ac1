"""The model Triton's Python backend runs for a `--triton-flavour python` repository.

Each model instance holds one `ONNXAgent` over the bundle copied into the model's version
directory, on the instance's device (a GPU instance: `cuda:<its device>`; a CPU instance: the
CPU) at the precision the config's `precision` parameter names (`auto` by default). Triton's
dynamic batcher hands `execute` the requests that arrived together; those that share questions
and controls are answered by one `predict_batch`, and each request gets exactly its own answer
or its own error (a bad request fails alone). The wire format is `triton_wire`'s.

Runs inside Triton, where `triton_python_backend_utils` is importable; the Python environment
of the backend needs laya_edge installed (docs/serving.md, "Triton").
"""
from __future__ import annotations

import json
from collections import OrderedDict
from pathlib import Path
from typing import Any, Dict, List, Optional

from .batching import answer_each, batch_key
from .triton_wire import REQUEST, RESPONSE, from_rows, to_rows

# What a request body may hold: the input and the controls ONNXAgent.predict_batch takes.
FIELDS = ("state", "questions", "lang", "max_len", "head_max_len", "min_confidence")
ROUTER_FIELDS = ("model", "task", "lang_guess")


class RequestError(ValueError):
    """A request body this model cannot answer; the message names the offending field."""


def check_body(body: Any) -> Dict[str, Any]:
    """The body as predict_batch's input, or RequestError naming what is wrong. The values of
    the controls are the agent's to check (with the same errors its API raises)."""
    if not isinstance(body, dict):
        raise RequestError(f"a request must be a JSON object, got {type(body).__name__}")
    routed = sorted(set(body) & set(ROUTER_FIELDS))
    if routed:
        raise RequestError(f"field(s) {routed} choose among a Router's models; this Triton model "
                           "serves one bundle")
    unknown = sorted(set(body) - set(FIELDS))
    if unknown:
        raise RequestError(f"unknown field(s) {unknown}; a request takes {list(FIELDS)}")
    for field in ("state", "questions"):
        if body.get(field) is None:
            raise RequestError(f"field {field!r} is required")
    if not isinstance(body["questions"], dict) or not body["questions"]:
        raise RequestError("field 'questions' must be a non-empty object of question id -> "
                           "definition")
    return body


def answer_bodies(agent: Any, bodies: List[Any]) -> List[Any]:
    """One answer (a payload dict) or exception per body, in order; bodies sharing questions and
    controls go through one `predict_batch`."""
    results: List[Any] = [None] * len(bodies)
    groups: "OrderedDict[str, List[int]]" = OrderedDict()
    for i, body in enumerate(bodies):
        try:
            groups.setdefault(batch_key(check_body(body)), []).append(i)
        except RequestError as exc:
            results[i] = exc
    for indices in groups.values():
        first = bodies[indices[0]]
        questions = first["questions"]
        controls = {k: v for k, v in first.items() if k not in ("state", "questions")}

        def answer(part: List[int]) -> List[Any]:
            return agent.predict_batch([bodies[i]["state"] for i in part], questions, **controls)
        for i, result in zip(indices, answer_each(answer, indices)):
            results[i] = result
    return results


def instance_device(args: Dict[str, str], parameters: Dict[str, str]) -> str:
    """The device of this instance: the config's `device` parameter when set, else the
    instance's own (Triton places GPU instances on a device and says which)."""
    if parameters.get("device"):
        return parameters["device"]
    if args.get("model_instance_kind") == "GPU":
        return f"cuda:{int(args.get('model_instance_device_id') or 0)}"
    return "cpu"


def check_tensor_exchange() -> None:
    """Refuse to start where the backend's stub and this Python's numpy disagree on the array
    layout (a stub built against numpy 1 under numpy 2 hands over every element as the first
    one): answers would be silently wrong, so the model fails to load with the fix instead."""
    import numpy as np
    import triton_python_backend_utils as pb_utils

    sent = np.frombuffer(b"laya", dtype=np.uint8)
    # through the stub's own C++ array code, as request tensors come
    received = pb_utils.Tensor.from_dlpack("probe", pb_utils.Tensor("probe", sent).to_dlpack()
                                           ).as_numpy()
    if received.tobytes() != sent.tobytes():
        raise RuntimeError(
            f"this Triton Python backend stub corrupts numpy {np.__version__} arrays (it was "
            "built for another numpy ABI); run the model in a Python environment with "
            "numpy<2 (docs/serving.md, 'Triton')")


def first_error(answers: List[Any]) -> Optional[str]:
    """What fails a request: its first row that failed, as `row N: Type: message` (without the
    row when the request holds one), or None when every row was answered."""
    for row, answer in enumerate(answers):
        if isinstance(answer, BaseException):
            where = f"row {row}: " if len(answers) > 1 else ""
            return f"{where}{type(answer).__name__}: {answer}"
    return None


class TritonPythonModel:
    """The Python backend's model interface (`initialize`, `execute`)."""

    def initialize(self, args: Dict[str, str]) -> None:
        from ..onnx_agent import ONNXAgent

        check_tensor_exchange()
        config = json.loads(args["model_config"])
        parameters = {key: value.get("string_value", "")
                      for key, value in (config.get("parameters") or {}).items()}
        bundle = Path(args["model_repository"]) / str(args["model_version"]) / "bundle"
        self.agent = ONNXAgent(str(bundle), device=instance_device(args, parameters),
                               precision=parameters.get("precision") or "auto")

    def execute(self, requests: List[Any]) -> List[Any]:
        import triton_python_backend_utils as pb_utils

        spans, bodies, failures = [], [], {}
        for index, request in enumerate(requests):
            try:
                rows = from_rows(pb_utils.get_input_tensor_by_name(request, REQUEST).as_numpy())
            except ValueError as exc:
                failures[index] = f"{type(exc).__name__}: {exc}"
                rows = []
            spans.append((len(bodies), len(rows)))
            bodies.extend(rows)
        answers = answer_bodies(self.agent, bodies)
        responses = []
        for index, (start, count) in enumerate(spans):
            mine = answers[start:start + count]
            problem = failures.get(index) or first_error(mine)
            if problem is not None:
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(problem)))
            else:
                responses.append(pb_utils.InferenceResponse(
                    output_tensors=[pb_utils.Tensor(RESPONSE, to_rows(mine))]))
        return responses
