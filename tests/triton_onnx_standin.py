"""Test stand-in for Triton's ONNX Runtime backend, which the nvidia-pytriton server lacks: a
Python-backend model that runs the repository's model.onnx with onnxruntime.

The tests serve the onnxruntime flavour's config.pbtxt unchanged but for `platform` ->
`backend: "python"`, so the real Triton server checks every request against the config (names,
types, dims, reshape, max_batch_size) and batches it; only the graph execution is this file's.
"""
import json
from pathlib import Path

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        import onnxruntime

        config = json.loads(args["model_config"])
        self.inputs = [tensor["name"] for tensor in config["input"]]
        self.outputs = [tensor["name"] for tensor in config["output"]]
        graph = Path(args["model_repository"]) / args["model_version"] / "model.onnx"
        self.session = onnxruntime.InferenceSession(str(graph),
                                                    providers=["CPUExecutionProvider"])

    def execute(self, requests):
        responses = []
        for request in requests:
            feeds = {name: pb_utils.get_input_tensor_by_name(request, name).as_numpy()
                     for name in self.inputs}
            results = self.session.run(self.outputs, feeds)
            responses.append(pb_utils.InferenceResponse(
                [pb_utils.Tensor(name, value) for name, value in zip(self.outputs, results)]))
        return responses
