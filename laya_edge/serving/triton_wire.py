"""The wire format of the Triton Python-backend flavour: one JSON document per BYTES element.

The request tensor `request` is [rows, 1], each element a UTF-8 JSON request body (the body
`POST /v1/systemone` takes, less the Router's `model`/`task`/`lang_guess`); the response tensor
`response` is [rows, 1], each element the payload `ONNXAgent.system_one` returns for that row.
"""
from __future__ import annotations

import json
from typing import Any, List, Sequence

REQUEST = "request"
RESPONSE = "response"


def to_rows(documents: Sequence[Any]) -> Any:
    """A [len(documents), 1] BYTES (numpy object) array, one UTF-8 JSON document per row."""
    import numpy as np

    rows = np.empty((len(documents), 1), dtype=object)
    for i, document in enumerate(documents):
        rows[i, 0] = json.dumps(document, ensure_ascii=False).encode("utf-8")
    return rows


def from_rows(array: Any, name: str = REQUEST) -> List[Any]:
    """The JSON documents of a [rows, 1] BYTES array; ValueError naming the tensor and the row
    that is not one UTF-8 JSON document."""
    import numpy as np

    array = np.asarray(array)
    if array.ndim != 2 or array.shape[1] != 1:
        raise ValueError(f"tensor {name!r} must have shape [rows, 1], got {list(array.shape)}")
    documents = []
    for row, (raw,) in enumerate(array):
        try:
            text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
            if not isinstance(text, str):
                raise ValueError(f"a {type(raw).__name__}, not bytes")
            documents.append(json.loads(text))
        except ValueError as exc:  # not UTF-8, not JSON, a number past Python's digit limit
            raise ValueError(f"tensor {name!r} row {row} is not one UTF-8 JSON document: "
                             f"{exc}") from None
    return documents
