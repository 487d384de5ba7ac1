"""One session run of a collated batch, with its inputs and outputs where the device wants them.

On the CPU a plain `session.run`. On an accelerator the inputs are copied to the device once, as
OrtValues, and the outputs are bound on the device and copied back once, so onnxruntime stages
nothing per node (the pattern of optimum's IO-binding helper).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, Optional, Tuple

from .bundle_format import GRAPH_OUTPUTS

if TYPE_CHECKING:
    import numpy as np


def run(session: Any, inputs: Dict[str, np.ndarray],
        binding: Optional[Tuple[str, int]] = None) -> Tuple[np.ndarray, np.ndarray]:
    """`(logits, act_logits)` for one collated batch; `binding` is `(device type, index)` of
    the device the session runs on (`Plan.binding`), or None for a plain run."""
    if binding is None:
        logits, act_logits = session.run(list(GRAPH_OUTPUTS), inputs)
        return logits, act_logits
    import numpy as np
    from onnxruntime import OrtValue

    device_type, device_id = binding
    bound = session.io_binding()
    for name, array in inputs.items():
        bound.bind_ortvalue_input(name, OrtValue.ortvalue_from_numpy(
            np.ascontiguousarray(array), device_type, device_id))
    for name in GRAPH_OUTPUTS:
        bound.bind_output(name, device_type, device_id)
    session.run_with_iobinding(bound)
    logits, act_logits = bound.copy_outputs_to_cpu()
    return logits, act_logits
