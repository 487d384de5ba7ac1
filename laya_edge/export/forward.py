"""The forward pass the graph is exported from: the model's computation, arranged for inference.

Two changes to how the model computes, neither to what it computes (the export verifies the
graph against the model's own forward, as for any graph):

- **Read-out only where read.** The outputs read the head's final hidden states at the option
  markers (scored) and at position 0 (pooled for the act head). The last head layer's queries,
  output projection and feed-forward block are position-wise, so it runs on those positions
  alone, still attending over every position (its keys and values come from the layer before).
  A row of a few hundred tokens saves most of one layer.
- **Separate projection weights.** Each head layer's packed query/key/value matrix is split into
  three weights ahead of time. In the packed form the graph splits it on every run, which hides
  the weights from the int8 quantiser and from the attention fusions.
"""
from __future__ import annotations

from typing import Any


def supports_readout(model: Any) -> bool:
    """Whether the model's head is made of the pre-norm layers this module re-expresses."""
    head = getattr(model, "head", None)
    if head is None or not len(head.layers):
        return False
    return all(getattr(layer, "norm_first", False) and getattr(layer.self_attn, "batch_first", 0)
               and layer.self_attn.in_proj_weight is not None for layer in head.layers)


def readout_module(model: Any) -> Any:
    """A module with the graph's five inputs computing the model's two outputs."""
    import torch
    import torch.nn.functional as F

    def gather(values: Any, positions: Any) -> Any:
        return torch.gather(values, 1, positions[:, :, None].expand(-1, -1, values.size(-1)))

    def linear(weight: Any, bias: Any) -> Any:
        layer = torch.nn.Linear(weight.shape[1], weight.shape[0])
        layer.weight.data.copy_(weight.detach())
        layer.bias.data.copy_(bias.detach())
        return layer

    class HeadLayer(torch.nn.Module):
        """One pre-norm head layer, optionally evaluated at some positions only."""

        def __init__(self, layer: Any):
            super().__init__()
            attention = layer.self_attn
            self.heads = attention.num_heads
            self.norm1, self.norm2 = layer.norm1, layer.norm2
            self.linear1, self.linear2, self.activation = (layer.linear1, layer.linear2,
                                                           layer.activation)
            weights = attention.in_proj_weight.split(attention.embed_dim)
            biases = attention.in_proj_bias.split(attention.embed_dim)
            self.query, self.key, self.value = (linear(w, b) for w, b in zip(weights, biases))
            self.out = attention.out_proj

        def forward(self, hidden: Any, keep: Any, read: Any = None) -> Any:
            normed = self.norm1(hidden)
            queries, residual = ((normed, hidden) if read is None else
                                 (gather(normed, read), gather(hidden, read)))

            def split(values: Any) -> Any:
                return values.unflatten(-1, (self.heads, -1)).transpose(1, 2)

            attended = F.scaled_dot_product_attention(
                split(self.query(queries)), split(self.key(normed)), split(self.value(normed)),
                attn_mask=keep)
            out = residual + self.out(attended.transpose(1, 2).flatten(-2))
            return out + self.linear2(self.activation(self.linear1(self.norm2(out))))

    class Readout(torch.nn.Module):
        def __init__(self, inner: Any):
            super().__init__()
            self.encoder, self.type_emb = inner.encoder, inner.type_emb
            self.scorer, self.act_head = inner.scorer, inner.act_head
            self.layers = torch.nn.ModuleList(HeadLayer(layer) for layer in inner.head.layers)

        def forward(self, input_ids, attention_mask, marker_pos, marker_mask, qtype):
            hidden = self.encoder(input_ids=input_ids,
                                  attention_mask=attention_mask).last_hidden_state
            hidden = hidden + self.type_emb(qtype)[:, None, :]
            keep = attention_mask.bool()[:, None, None, :]
            for layer in self.layers[:-1]:
                hidden = layer(hidden, keep)
            # Read positions: 0 (pooled) first, then the markers (negative ones clamp to 0).
            read = torch.cat([torch.zeros_like(marker_pos[:, :1]), marker_pos.clamp(min=0)], 1)
            out = self.layers[-1](hidden, keep, read)
            logits = self.scorer(out[:, 1:]).squeeze(-1).float()
            logits = logits.masked_fill(~marker_mask, -1e4)
            features = act_features(logits, marker_mask)
            return logits, self.act_head(torch.cat([out[:, 0].float(), features], -1))

    return Readout(model).eval()


def act_features(logits: Any, marker_mask: Any) -> Any:
    """What the act head reads besides the pooled state: how decided the options are (top
    probability, its lead over the second, normalised entropy) and how many there are."""
    import torch

    p = torch.softmax(logits, -1)
    count = marker_mask.sum(-1).clamp(min=2).float()
    entropy = -(p * torch.log(p.clamp_min(1e-9))).sum(-1) / torch.log(count)
    top = p.topk(2, -1).values
    return torch.stack([top[:, 0], top[:, 0] - top[:, 1], entropy, count / 255.0], -1)
