"""The ``funnel``, ``feedback`` and ``sandwich`` views: what a layer structure did with the layers.

- ``funnel``: the query and key lengths of every layer's ``LayerInfo.attention`` (Funnel-Transformer,
  Dai et al. 2020): the sequence halves from block to block; a pool-query layer has pooled queries
  over unpooled keys.
- ``feedback``: ``LayerInfo.layer_mix`` (Feedback Transformer, Fan et al. 2020): the softmax weights
  over the embedding and every layer's output that make the memory vector of a step.
- ``sandwich``: ``LayerInfo.sublayer_depth`` (Sandwich Transformer, Press et al. 2020): the order in
  which the attention and FFN sublayers actually ran, as an ``a`` / ``f`` string.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from explorer.analysis.views.common import all_have, round_list, to_float64


@dataclass
class FunnelView:
    queries: np.ndarray  # (n,) query positions of each layer's attention
    keys: np.ndarray  # (n,) key positions
    blocks: int

    def summary(self) -> dict:
        return {"funnel_blocks": self.blocks, "query_len": self.queries.tolist(), "key_len": self.keys.tolist()}


def funnel_view(cfg, layers: list):
    if cfg.layer != "funnel" or not all_have(layers, "attention"):
        return None
    shapes = [tuple(i.attention.shape) for i in layers]  # (B, h, Lq, Lk) each
    return FunnelView(
        queries=np.array([s[2] for s in shapes]), keys=np.array([s[3] for s in shapes]), blocks=int(cfg.funnel_blocks)
    )


@dataclass
class FeedbackView:
    weights: np.ndarray  # (n_layers + 1,) softmax(w): embedding, then layer 1..N outputs

    def summary(self) -> dict:
        return {
            "layer_weights": round_list(self.weights, 5),
            "sum": round(float(self.weights.sum()), 6),
            "heaviest": int(self.weights.argmax()),
        }


def feedback_view(cfg, layers: list):
    if not all_have(layers, "layer_mix"):
        return None
    return FeedbackView(weights=to_float64(layers[0].layer_mix))


@dataclass
class SandwichView:
    order: str  # "a" / "f" per sublayer, bottom first, as it ran
    layer_of: list  # which attention / FFN (0-based) sits at each depth
    coeff: int  # sandwich_coeff s

    def summary(self) -> dict:
        return {
            "order": self.order,
            "sandwich_coeff": self.coeff,
            "n_layers": len(self.order) // 2,
            "layer_of": self.layer_of,
        }


def sandwich_view(cfg, layers: list):
    if not layers or not all(isinstance(i.sublayer_depth, tuple) and None not in i.sublayer_depth for i in layers):
        return None
    n = len(layers)
    slots = [""] * (2 * n)
    layer_of = [-1] * (2 * n)
    for j, info in enumerate(layers):
        for kind, depth in zip("af", info.sublayer_depth):
            slots[depth], layer_of[depth] = kind, j
    return SandwichView(order="".join(slots), layer_of=layer_of, coeff=int(cfg.sandwich_coeff))
