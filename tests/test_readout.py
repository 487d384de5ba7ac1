"""The read-out forward the graph is exported from (laya_edge/export/forward.py): the model's own
outputs, with the last head layer computed at the read positions only."""
import os
import warnings

import numpy as np
import pytest
import torch

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

from laya_edge.export.forward import readout_module, supports_readout  # noqa: E402
from laya_edge.export.reference import Reference  # noqa: E402

STATES = ["My card was charged twice this month, please refund one of the payments.",
          "short",
          {"order": 4711, "status": "late", "notes": ["called twice", "no answer"]}]
QUESTIONS = {
    "dept": {"type": "choice", "instructions": "Which team?",
             "criteria": {"billing": "money", "tech": "bugs", "sales": "quotes"}},
    "solo": {"type": "choice", "instructions": "The only queue", "criteria": ["general"]},
    "sev": {"type": "score", "instructions": "How bad?", "criteria": ["low", "mid", "high",
                                                                     "critical"]},
    "urgent": {"type": "noul", "instructions": "Is it urgent?"},
}


@pytest.fixture(scope="module", params=["modernbert-tiny", "minilm"])
def reference(request, checkpoints):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return Reference(checkpoints[request.param])


def model_outputs(module, batch):
    with torch.no_grad():
        logits, act = module(*[torch.from_numpy(batch[name]) for name in
                               ("input_ids", "attention_mask", "marker_pos", "marker_mask",
                                "qtype")])
    return logits.numpy(), act.numpy()


def test_readout_computes_the_models_outputs(reference):
    """Rows of different lengths padded together, 1 to 4 markers (padded to 4), every type."""
    batch = reference.collate(reference.encode(STATES, QUESTIONS))
    assert supports_readout(reference.model)
    want_logits, want_act = model_outputs(reference.model, batch)
    got_logits, got_act = model_outputs(readout_module(reference.model), batch)
    mask = batch["marker_mask"]
    assert not mask.all() and batch["attention_mask"].min() == 0  # padding of both kinds
    assert np.abs(got_logits - want_logits)[mask].max() < 1e-5
    assert np.all(got_logits[~mask] == want_logits[~mask])
    np.testing.assert_allclose(got_act, want_act, rtol=1e-5, atol=1e-4)


def test_the_last_head_layer_runs_at_the_read_positions_only(reference):
    """Its feed-forward block sees position 0 and the markers, not the whole row; the layers
    before it see every position."""
    batch = reference.collate(reference.encode(STATES[:1], QUESTIONS))
    module = readout_module(reference.model)
    seen = []
    for layer in module.layers:
        layer.linear1.register_forward_hook(lambda mod, args, out: seen.append(args[0].shape))
    model_outputs(module, batch)
    rows, length = batch["input_ids"].shape
    markers = batch["marker_pos"].shape[1]
    assert seen[-1] == (rows, 1 + markers, reference.model.encoder.config.hidden_size)
    assert all(shape[1] == length for shape in seen[:-1]) and len(seen) == len(module.layers)
    assert markers + 1 < length


def test_a_head_without_layers_is_not_rewritten(reference, monkeypatch):
    monkeypatch.setattr(reference.model, "head", None)
    assert not supports_readout(reference.model)
