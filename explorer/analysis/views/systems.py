"""Variant views of attention systems whose maps hide their mechanism (no gradio, no plots).

- ``sinkhorn``: ``info.sinkhorn``, the Sinkhorn-balanced block sorting matrix ``P [nb, nb]`` per head
  (Tay et al. 2020): row ``a`` is how much of each key block is soft-sorted next to query block ``a``.
  The attention map only shows the mix spread over keys; ``P`` shows the learned permutation itself
  and how close Sinkhorn balancing brought it to doubly stochastic.
- ``probsparse``: ``info.active_queries`` (Zhou et al. 2021, Informer): which queries were among the
  top-u by ``max - mean`` of their scores and attended, and which were given the mean of V.
- ``talking_heads``: ``info.head_mix`` (Shazeer et al. 2020): the learned ``[h, h]`` matrices that mix
  the heads' scores before the softmax and their weights after it (identity at initialisation).
- ``residual``: ``info.prior_share`` (RealFormer, predictive attention): how much of each layer's
  pre-softmax scores comes from the previous layer's scores / maps, and ``info.prior_alpha``, the
  learned mixing weight of predictive attention.
- ``pkm``: ``info.slot_counts`` (Lample et al. 2019): how many of the ``pkm_subkeys^2`` value rows of
  the product-key memory were read, and how often each (summed over every segment and FFN call).
- ``funnel``: the query and key lengths of every layer's attention (Dai et al. 2020): the sequence
  halves from block to block; a pool-query layer has pooled queries over unpooled keys.

Batch element 0 is shown; every view has a JSON-safe ``summary()`` like ``explorer.analysis.views``.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from models.attention.probsparse import n_active


def _all(layers: list, key: str) -> bool:
    return bool(layers) and all(isinstance(getattr(i, key), torch.Tensor) for i in layers)


# ---------------------------------------------------------------------------- sinkhorn
@dataclass
class SinkhornView:
    P: np.ndarray                # (n, h, nb, nb) sorting matrix per layer and head
    block_size: int
    iters: int
    causal: bool

    @property
    def row_sums(self) -> np.ndarray:
        return self.P.sum(-1)    # (n, h, nb): 1 for every row with a block to sort (causal: not block 0)

    @property
    def col_sums(self) -> np.ndarray:
        return self.P.sum(-2)    # (n, h, nb): 1 at Sinkhorn convergence (bidirectional)

    def summary(self) -> dict:
        return {"n_blocks": int(self.P.shape[-1]), "block_size": self.block_size, "sinkhorn_iters": self.iters,
                "causal": self.causal, "P": np.round(self.P, 4).tolist(),
                "max_row_sum_error": round(float(_sum_error(self.row_sums, self.causal)), 6),
                "max_col_sum_error": round(float(_sum_error(self.col_sums, self.causal, cols=True)), 6)}


def _sum_error(sums: np.ndarray, causal: bool, cols: bool = False) -> float:
    """Largest ``|sum - 1|`` over the rows (columns) that have allowed entries; causal P is strictly lower
    triangular, so row 0 and the last column are empty, and column sums are not balanced to 1 (a column is
    normalised over the rows up to each row in turn), so the causal column error is reported as is."""
    if causal:
        sums = sums[..., :-1] if cols else sums[..., 1:]
    return float(np.abs(sums - 1).max()) if sums.size else 0.0


def sinkhorn_view(cfg, layers: list):
    if not _all(layers, "sinkhorn"):
        return None
    P = np.stack([i.sinkhorn[0].detach().double().cpu().numpy() for i in layers])  # (n, h, nb, nb)
    return SinkhornView(P=P, block_size=int(cfg.block_size), iters=int(cfg.sinkhorn_iters), causal=bool(cfg.causal))


# ---------------------------------------------------------------------------- probsparse
@dataclass
class ProbSparseView:
    active: np.ndarray           # (n, h, L) bool: the query attended (else: mean of V)
    u: int                       # probsparse_factor * ceil(ln L), at most L
    causal: bool

    def summary(self) -> dict:
        return {"u": self.u, "causal": self.causal, "active": self.active.astype(int).tolist(),
                "n_active": self.active.sum(-1).tolist()}


def probsparse_view(cfg, layers: list):
    if not _all(layers, "active_queries"):
        return None
    active = np.stack([i.active_queries[0].cpu().numpy().astype(bool) for i in layers])  # (n, h, L)
    return ProbSparseView(active=active, u=n_active(cfg, active.shape[-1]), causal=bool(cfg.causal))


# ---------------------------------------------------------------------------- talking heads
@dataclass
class HeadMixView:
    pre: np.ndarray              # (n, h, h) [new head, old head] mixing of the scores (before softmax)
    post: np.ndarray             # (n, h, h) mixing of the attention weights (after softmax)

    def summary(self) -> dict:
        eye = np.eye(self.pre.shape[-1])
        return {"pre_softmax": np.round(self.pre, 4).tolist(), "post_softmax": np.round(self.post, 4).tolist(),
                "max_off_identity": round(float(max(np.abs(self.pre - eye).max(), np.abs(self.post - eye).max())), 6),
                "post_row_sums": np.round(self.post.sum(-1), 4).tolist()}


def head_mix_view(cfg, layers: list):
    if not _all(layers, "head_mix"):
        return None
    mix = np.stack([i.head_mix.detach().double().cpu().numpy() for i in layers])  # (n, 2, h, h)
    return HeadMixView(pre=mix[:, 0], post=mix[:, 1])


# ---------------------------------------------------------------------------- residual attention
@dataclass
class PriorView:
    attention: str
    share: np.ndarray            # (n, h) |prior| / (|prior| + |own|) of the layer's scores (0: layer 0)
    alpha: np.ndarray            # (n,) predictive attention's sigmoid(a) (NaN where unused or realformer)

    def summary(self) -> dict:
        return {"attention": self.attention, "prior_share": np.round(self.share, 4).tolist(),
                "alpha": [None if not np.isfinite(a) else round(float(a), 4) for a in self.alpha]}


def prior_view(cfg, layers: list):
    if not _all(layers, "prior_share"):
        return None
    share = np.stack([i.prior_share[0].detach().double().cpu().numpy() for i in layers])  # (n, h)
    alpha = np.array([float(i.prior_alpha) if isinstance(i.prior_alpha, torch.Tensor) else np.nan for i in layers])
    return PriorView(attention=cfg.attention, share=share, alpha=alpha)


# ---------------------------------------------------------------------------- product-key memory
@dataclass
class SlotView:
    counts: np.ndarray           # (n, pkm_subkeys^2) reads of each value row per layer
    topk: int
    heads: int

    @property
    def used(self) -> np.ndarray:
        return (self.counts > 0).sum(-1)  # (n,) rows read at least once

    def summary(self) -> dict:
        top = np.argsort(-self.counts, axis=-1, kind="stable")[:, :10]  # (n, 10) most-read rows
        return {"n_slots": int(self.counts.shape[-1]), "pkm_topk": self.topk, "pkm_heads": self.heads,
                "reads": self.counts.sum(-1).tolist(), "used": self.used.tolist(),
                "top_slots": top.tolist(), "top_counts": np.take_along_axis(self.counts, top, -1).tolist()}


def slot_view(cfg, layers: list):
    if not layers or not all(isinstance(p.slot_counts, torch.Tensor) for i in layers for p in i.parts()):
        return None
    counts = np.stack([sum(p.slot_counts.cpu().numpy().astype(np.int64) for p in i.parts()) for i in layers])
    return SlotView(counts=counts, topk=int(cfg.pkm_topk), heads=int(cfg.pkm_heads))


# ---------------------------------------------------------------------------- funnel lengths
@dataclass
class FunnelView:
    queries: np.ndarray          # (n,) query positions of each layer's attention
    keys: np.ndarray             # (n,) key positions
    blocks: int

    def summary(self) -> dict:
        return {"funnel_blocks": self.blocks, "query_len": self.queries.tolist(), "key_len": self.keys.tolist()}


def funnel_view(cfg, layers: list):
    if cfg.layer != "funnel" or not _all(layers, "attention"):
        return None
    shapes = [tuple(i.attention.shape) for i in layers]  # (B, h, Lq, Lk) each
    return FunnelView(queries=np.array([s[2] for s in shapes]), keys=np.array([s[3] for s in shapes]),
                      blocks=int(cfg.funnel_blocks))
