"""The PyTorch reference: upstream laya's own model, encoding and calibration for a checkpoint.

The graph is exported from this model and verified against it, so what the bundle computes is
what upstream computes, by construction and then by measurement.
"""
from __future__ import annotations

import os
import warnings
from typing import Any, Dict, List, Sequence

import numpy as np

from ..bundle_format import MIN_MARKERS

QTYPE_IDS = {"choice": 0, "score": 1, "noul": 2}


class Reference:
    """Upstream `laya.Agent` for one checkpoint, on the CPU in fp32."""

    def __init__(self, directory: Any):
        os.environ.setdefault("USE_TF", "0")
        import torch
        from laya.agent import Agent

        with warnings.catch_warnings():
            # Upstream warns about clamped temperatures; the manifest records the raw values.
            warnings.simplefilter("ignore", RuntimeWarning)
            self.agent = Agent(str(directory), device="cpu")
        self.model = self.agent.model.float().eval()
        self.model.encoder.config.reference_compile = False
        self._torch = torch

    @property
    def pad_id(self) -> int:
        return int(self.agent.tok.pad_token_id)

    def encode(self, states: Sequence[Any], questions: Dict[str, Dict[str, Any]]) -> List[Dict]:
        """One row per (state, question), state-major, as upstream encodes a batch."""
        ids = list(questions)
        internal = {}
        for qid in ids:
            self.agent._check_question(qid, questions[qid])
            internal[qid] = self.agent._to_internal(questions[qid])
        rows = []
        for state in states:
            for qid, item in zip(ids, self.agent._encode_state(state, ids, internal)):
                item["qid"] = qid
                item["qtype_name"] = internal[qid]["t"]
                rows.append(item)
        return rows

    def collate(self, rows: Sequence[Dict]) -> Dict[str, np.ndarray]:
        """The graph's five inputs for `rows`, padded as the runtime pads them."""
        longest = max(len(row["ids"]) for row in rows)
        markers = max(MIN_MARKERS, max(len(row["markers"]) for row in rows))
        batch = {
            "input_ids": np.full((len(rows), longest), self.pad_id, dtype=np.int64),
            "attention_mask": np.zeros((len(rows), longest), dtype=np.int64),
            "marker_pos": np.zeros((len(rows), markers), dtype=np.int64),
            "marker_mask": np.zeros((len(rows), markers), dtype=bool),
            "qtype": np.array([row["qtype"] for row in rows], dtype=np.int64),
        }
        for r, row in enumerate(rows):
            batch["input_ids"][r, :len(row["ids"])] = row["ids"]
            batch["attention_mask"][r, :len(row["ids"])] = 1
            batch["marker_pos"][r, :len(row["markers"])] = row["markers"]
            batch["marker_mask"][r, :len(row["markers"])] = True
        return batch

    def forward(self, batch: Dict[str, np.ndarray]):
        """`(logits, act_logits)` of the PyTorch model, as float32 numpy arrays."""
        torch = self._torch
        with torch.no_grad():
            tensors = [torch.from_numpy(batch[name]) for name in
                       ("input_ids", "attention_mask", "marker_pos", "marker_mask", "qtype")]
            logits, act_logits = self.model(*tensors)
        return logits.float().numpy(), act_logits.float().numpy()

    def temperature(self, qtype: int, markers: int) -> float:
        """The (clamped) temperature upstream divides this row's logits by."""
        from laya.common import temp_bucket

        return float(self.agent.temperature_by_options.get(temp_bucket(qtype, markers),
                                                           self.agent.temperature[qtype]))
