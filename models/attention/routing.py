"""Routing attention: Roy, Saffar, Vaswani & Grangier 2021, "Efficient Content-Based Sparse
Attention with Routing Transformers".

Each head keeps ``n_clusters`` unit-normalised centroids ``mu [h, C, d_h]`` (a buffer, initialised
from ``cfg.seed``). Queries and keys are unit-normalised and assigned to the centroid of largest
cosine; query ``i`` attends key ``j`` only when both sit in the same cluster (and ``j <= i`` when
causal), with the ordinary scaled dot-product scores of the un-normalised q, k. A query whose
cluster holds no key it may see attends itself (probability 1 on its own position) so every row
of the effective attention sums to 1 and no output is an arbitrary zero.

Training mode only, after the forward has used the current centroids and under ``no_grad``:
``mu_c <- normalize(decay * mu_c + (1 - decay) * mean of the unit q and k assigned to c)`` (mean
over batch and positions, queries and keys pooled as in the paper's update), clusters that got
nothing unchanged; ``decay = cfg.cluster_decay``.

Computation: positions are grouped by cluster (stable sort) into a padded
``[B, h, C, max cluster size]`` layout and attention runs cluster by cluster, so the work is
``sum_c |Q_c| |K_c|``-ish (``C * max|Q_c| * max|K_c|``), ``L^2 / C`` for balanced clusters.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ..capabilities import ROTARY, SCORE_BIAS, AttentionCaps
from ..errors import ConfigError
from ..variant import Param, Variant
from .common import NEG, expand_kv, gather_rows, group_ranks, pair_bias, scatter_dense

N_CLUSTERS = Param("n_clusters", int, 4, range=(1, 128), cap=256, surgery=True)  # clustered attention reads it too
CLUSTER_DECAY = Param("cluster_decay", float, 0.999, surgery=True)

_SALT = 0x2071


def _layout(labels: torch.Tensor, n_groups: int):
    """Slot of every position in a ``[..., n_groups * M]`` padded layout, the slots' positions, M."""
    rank, counts = group_ranks(labels, n_groups)
    m = max(int(counts.max()), 1)
    slot_of = labels * m + rank
    slot_pos = torch.full((*labels.shape[:-1], n_groups * m), -1, dtype=torch.long, device=labels.device)
    slot_pos.scatter_(-1, slot_of, torch.arange(labels.shape[-1], device=labels.device).expand_as(labels))
    return slot_of, slot_pos, m


class RoutingAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        gen = torch.Generator().manual_seed(cfg.seed * 1000003 + _SALT)
        mu = torch.randn(cfg.n_heads, cfg.n_clusters, cfg.d_head, generator=gen)
        self.register_buffer("centroids", F.normalize(mu, dim=-1))  # (h, C, d_h), EMA state

    @torch.no_grad()  # an argmax: no gradient, and nothing saved that the EMA update could invalidate
    def assign(self, x: torch.Tensor) -> torch.Tensor:
        """Nearest centroid by cosine: ``x [B, h, L, d]`` -> cluster ids ``[B, h, L]``."""
        return torch.einsum("bhld,hcd->bhlc", F.normalize(x.float(), dim=-1), self.centroids).argmax(-1)

    def forward(self, q, k, v, mods, ctx):
        cfg = self.cfg
        B, h, lq, d = q.shape
        lk = k.shape[2]
        prefix = lk - lq
        k, v = expand_kv(k, h), expand_kv(v, h)
        cq, ck = self.assign(q), self.assign(k)
        C = cfg.n_clusters
        q_slot, q_pos, mq = _layout(cq, C)
        k_slot, k_pos, mk = _layout(ck, C)
        qg = gather_rows(q, q_pos.clamp(min=0)).view(B, h, C, mq, d)  # (B, h, C, Mq, d_h)
        kg = gather_rows(k, k_pos.clamp(min=0)).view(B, h, C, mk, d)
        vg = gather_rows(v, k_pos.clamp(min=0)).view(B, h, C, mk, d)
        pos_q = q_pos.view(B, h, C, mq, 1)
        pos_k = k_pos.view(B, h, C, 1, mk)
        s = torch.einsum("bhcqd,bhckd->bhcqk", qg.float(), kg.float()) / math.sqrt(d)  # (B, h, C, Mq, Mk)
        if cfg.softcap is not None:
            s = cfg.softcap * torch.tanh(s / cfg.softcap)
        rel = pos_k - (pos_q + prefix)  # j - i_abs
        bias = pair_bias(mods, rel, lk, h)
        if bias is not None:
            s = s + bias
        allowed = (pos_q >= 0) & (pos_k >= 0)
        if cfg.causal:
            allowed = allowed & (rel <= 0)
        has_any = allowed.any(-1)  # (B, h, C, Mq)
        p = torch.softmax(torch.where(allowed, s, NEG), dim=-1)
        p = torch.where(allowed, p, 0.0)  # rows with no key: all 0 here, self fallback below
        out = (p @ vg.float()).view(B, h, C * mq, d)
        out = gather_rows(out, q_slot)  # back to query order (B, h, Lq, d_h)
        has_any = has_any.view(B, h, C * mq).gather(-1, q_slot)  # (B, h, Lq)
        out = torch.where(has_any.unsqueeze(-1), out, v[:, :, prefix:].float())
        probs = None
        if ctx.need_weights:
            probs = scatter_dense(p, pos_q.clamp(min=0).expand_as(p), pos_k.clamp(min=0).expand_as(p), lq, lk, allowed)
            own = torch.arange(lq, device=q.device)
            fallback = torch.zeros_like(probs)
            fallback[:, :, own, own + prefix] = (~has_any).to(probs.dtype)  # self-fallback rows
            probs = (probs + fallback).to(q.dtype)
        if self.training:
            self._ema_update(q, k, cq, ck)
        return out.to(q.dtype), probs, {"clusters": cq, "key_clusters": ck}

    @torch.no_grad()
    def _ema_update(self, q, k, cq, ck):
        h, C, d = self.centroids.shape
        x = torch.cat([F.normalize(q.float(), dim=-1), F.normalize(k.float(), dim=-1)], dim=2)  # (B, h, Lq+Lk, d)
        lab = torch.cat([cq, ck], dim=2)
        x = x.transpose(0, 1).reshape(h, -1, d)  # (h, B*(Lq+Lk), d)
        lab = lab.transpose(0, 1).reshape(h, -1)
        sums = torch.zeros(h, C, d, device=x.device).scatter_add_(1, lab.unsqueeze(-1).expand_as(x), x)
        counts = torch.zeros(h, C, device=x.device).scatter_add_(1, lab, torch.ones_like(lab, dtype=torch.float))
        mean = sums / counts.clamp_min(1).unsqueeze(-1)
        decay = self.cfg.cluster_decay
        new = F.normalize(decay * self.centroids + (1 - decay) * mean, dim=-1)
        self.centroids.copy_(torch.where(counts.unsqueeze(-1) > 0, new, self.centroids))


def check(cfg) -> None:
    d = cfg.cluster_decay
    if not (math.isfinite(d) and 0 < d < 1):
        raise ConfigError("cluster_decay", d, "a number in (0, 1): the EMA keeps decay of the old centroid")


CAPS = AttentionCaps(
    accepts=frozenset({ROTARY, SCORE_BIAS}),
    memory_keys=False,
    refuses_because=("adds no relative key/value vectors inside its clusters (scalar biases such as t5 / alibi work)"),
)

VARIANTS = (
    Variant(
        "routing",
        "Roy et al. 2021 (Routing Transformer)",
        "Queries and keys are routed to their nearest of n_clusters learned centroids and attend only within "
        "the cluster.",
        build=RoutingAttention,
        params=(N_CLUSTERS, CLUSTER_DECAY),
        check=check,
        caps=CAPS,
        surgery=True,
    ),
)
