"""Variant views of the last family members (no gradio, no plots), found like ``explorer.analysis.views``
from what ``ModelOutput.layers`` records:

- ``induced``: ``info.induced_pack`` / ``induced_unpack`` (ISAB, Lee et al. 2019; Luna, Ma et al.
  2021): step 1, the ``m`` inducing points (Luna: the packed sequence) attending to the tokens
  ``A1 [m, L]``; step 2, the tokens attending to the ``m`` points ``A2 [L, m]``; and their product
  ``A2 A1 [L, L]``, the effective token map (compared with the map the layer reported).
- ``lite``: ``info.conv_taps`` / ``conv_share`` (Lite Transformer, Wu et al. 2020): the softmax
  taps of every convolution head's kernel, and each position's share of the output that comes
  from the convolution heads (squared norm of the concatenated head outputs; the attention
  heads hold the rest).
- ``retrieval``: ``info.lm_*`` (kNN-LM, Khandelwal et al. 2020; SPALM, Yogatama et al. 2021): the
  neighbours retrieved for each position (stored next token, squared distance, stored position),
  the memory's weight in the mixture (fixed ``knn_lambda``; SPALM's ``1 - g`` per position) and
  the next-token distribution without the memory, from the memory alone and mixed.
- ``feedback``: ``info.layer_mix`` (Feedback Transformer, Fan et al. 2020): the softmax weights
  over the embedding and every layer's output that make the memory vector of a step.
- ``sandwich``: ``info.sublayer_depth`` (Press et al. 2020): the order in which the attention and
  FFN sublayers actually ran, as an ``a`` / ``f`` string.

Batch element 0 is shown; every view has a JSON-safe ``summary()`` like ``explorer.analysis.views``.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from explorer.runtime.tokens import token_label


def _np(t) -> np.ndarray:
    return t.detach().double().cpu().numpy()


def _all(layers: list, key: str) -> bool:
    return bool(layers) and all(isinstance(getattr(i, key), torch.Tensor) for i in layers)


def _r(a, nd: int = 4):
    return np.round(np.asarray(a, dtype=np.float64), nd).tolist()


# ---------------------------------------------------------------------------- isab / luna
@dataclass
class InducedView:
    mechanism: str
    pack: np.ndarray             # (n, h, m, L) step 1: each point's softmax over the tokens
    unpack: np.ndarray           # (n, h, L, m) step 2: each token's softmax over the points
    reported: np.ndarray         # (n, h, L, L) the effective attention the layer reported

    @property
    def effective(self) -> np.ndarray:
        return self.unpack @ self.pack  # (n, h, L, L): the matrix applied to V

    def summary(self) -> dict:
        eff = self.effective
        return {"mechanism": self.mechanism, "n_inducing": int(self.pack.shape[2]),
                "max_product_error": round(float(np.abs(eff - self.reported).max()), 8),
                "max_row_sum_error": round(float(np.abs(eff.sum(-1) - 1).max()), 8),
                "points_per_token": _r(self.unpack.max(-1).mean(-1), 4)}  # (n, h) mean top step-2 weight


def induced_view(cfg, layers: list):
    if not (_all(layers, "induced_pack") and _all(layers, "induced_unpack") and _all(layers, "attention")):
        return None
    return InducedView(mechanism=cfg.attention, pack=np.stack([_np(i.induced_pack[0]) for i in layers]),
                       unpack=np.stack([_np(i.induced_unpack[0]) for i in layers]),
                       reported=np.stack([_np(i.attention[0]) for i in layers]))


# ---------------------------------------------------------------------------- lite
@dataclass
class LiteView:
    taps: np.ndarray             # (n, h/2, K) softmax kernel of each convolution head
    offsets: list                # (K,) key position - query position of each tap
    conv_share: np.ndarray       # (n, L) the convolution heads' share of each position's |out|^2
    n_heads: int
    causal: bool

    def summary(self) -> dict:
        return {"conv_kernel": len(self.offsets), "tap_offsets": self.offsets, "taps": _r(self.taps),
                "conv_share": _r(self.conv_share), "mean_conv_share": _r(self.conv_share.mean(-1)),
                "n_attention_heads": self.n_heads - self.taps.shape[1], "n_conv_heads": int(self.taps.shape[1])}


def lite_view(cfg, layers: list):
    if not (_all(layers, "conv_taps") and _all(layers, "conv_share")):
        return None
    K = int(cfg.conv_kernel)
    pad = K - 1 if cfg.causal else K // 2  # the first tap sits at query - pad (models/attention/lite.py)
    return LiteView(taps=np.stack([_np(i.conv_taps) for i in layers]), offsets=[t - pad for t in range(K)],
                    conv_share=np.stack([_np(i.conv_share[0]) for i in layers]), n_heads=int(cfg.n_heads),
                    causal=bool(cfg.causal))


# ---------------------------------------------------------------------------- knn_lm / spalm
@dataclass
class RetrievalView:
    memory: str
    next: np.ndarray             # (L, k) int: stored next token of each neighbour (-1: none), nearest first
    dist: np.ndarray             # (L, k) squared L2 distance (NaN: none)
    pos: np.ndarray              # (L, k) int: position of the stored context (-1: none)
    mix: np.ndarray              # (L,) the memory's weight: knn_lambda / 1 - g (0 while the store is empty)
    p_model: np.ndarray          # (L, V) next-token distribution without the memory
    p_memory: np.ndarray         # (L, V) from the memory alone (NaN rows: empty store)
    p_mixed: np.ndarray          # (L, V) what the model outputs
    segment_len: int = 0         # the store fills after each segment of this many tokens

    @property
    def top(self) -> np.ndarray:
        return self.p_mixed.argmax(-1)  # (L,) the output's most likely next token

    def top_probs(self) -> dict:
        """Probability of the output's top token under each distribution, ``(L,)`` each."""
        idx = self.top[:, None]
        return {n: np.take_along_axis(p, idx, -1)[:, 0] for n, p in
                (("model", self.p_model), ("memory", self.p_memory), ("mixed", self.p_mixed))}

    @property
    def retrieved(self) -> np.ndarray:
        return (self.next >= 0).any(-1)  # (L,) positions that found at least one neighbour

    def summary(self) -> dict:
        got = self.retrieved
        changed = (self.p_model.argmax(-1) != self.top) & got
        return {"memory": self.memory, "knn_k": int(self.next.shape[1]), "segment_len": self.segment_len,
                "positions_with_neighbours": int(got.sum()),
                "neighbour_next": self.next.tolist(), "neighbour_pos": self.pos.tolist(),
                "neighbour_dist": [[None if not np.isfinite(d) else round(float(d), 4) for d in row] for row in self.dist],
                "memory_weight": _r(self.mix), "top_changed": int(changed.sum()),
                "top_token": [token_label(int(t)) for t in self.top]}


def retrieval_view(cfg, layers: list):
    found = [i for i in layers if isinstance(i.lm_mix, torch.Tensor)]
    if not found:
        return None
    i = found[-1]  # the memory records on the last layer
    return RetrievalView(memory=cfg.memory, next=i.lm_next[0].cpu().numpy().astype(np.int64),
                         dist=_np(i.lm_dist[0]), pos=i.lm_pos[0].cpu().numpy().astype(np.int64), mix=_np(i.lm_mix[0]),
                         p_model=_np(i.lm_p_model[0]), p_memory=_np(i.lm_p_memory[0]), p_mixed=_np(i.lm_p_mixed[0]),
                         segment_len=int(cfg.segment_len))


# ---------------------------------------------------------------------------- feedback
@dataclass
class FeedbackView:
    weights: np.ndarray          # (n_layers + 1,) softmax(w): embedding, then layer 1..N outputs

    def summary(self) -> dict:
        return {"layer_weights": _r(self.weights, 5), "sum": round(float(self.weights.sum()), 6),
                "heaviest": int(self.weights.argmax())}


def feedback_view(cfg, layers: list):
    if not _all(layers, "layer_mix"):
        return None
    return FeedbackView(weights=_np(layers[0].layer_mix))


# ---------------------------------------------------------------------------- sandwich
@dataclass
class SandwichView:
    order: str                   # "a" / "f" per sublayer, bottom first, as it ran
    layer_of: list               # which attention / FFN (0-based) sits at each depth
    coeff: int                   # sandwich_coeff s

    def summary(self) -> dict:
        return {"order": self.order, "sandwich_coeff": self.coeff, "n_layers": len(self.order) // 2,
                "layer_of": self.layer_of}


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
