"""Clustered attention: Vyas, Katharopoulos & Fleuret 2020, "Fast Transformers with Clustered
Attention".

Per batch element and head, the queries are grouped into ``C = min(n_clusters, L)`` clusters by
K-means: the initial centroids are ``C`` distinct queries drawn with a generator seeded by
``cfg.seed`` (the same positions on every call of a given length, so the model is deterministic), then ``lloyd_iters``
Lloyd iterations (assign each query to the nearest centroid in Euclidean distance, move each centroid
to the mean of its queries; a centroid that lost all its queries stays where it was). The
assignment is an argmin and carries no gradient (it runs under ``no_grad``).

Each cluster's centroid ``Q^c`` is then the mean of its member queries (with gradient to them), and
one softmax row is computed per centroid: ``A^c = softmax(Q^c K^T / sqrt(d_h))``, ``V^c = A^c V``;
every query takes its cluster's ``V^c``. The effective attention of query ``i`` is its centroid's
row ``A^{c(i)}``, so ``C`` distinct rows, and ``out = A V`` exactly.

Deviation: the paper clusters the queries' Hamming codes (``B``-bit locality-sensitive hashes) to
make K-means cheap; here Lloyd runs on the queries themselves (the explorer's sizes are small), which
is the clustering that hashing approximates. Bidirectional only, as the paper: a centroid averages
queries from every position, so its row would have to look at the future of its earliest member.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ..capabilities import ROTARY, AttentionCaps
from ..variant import Param, Variant
from .common import expand_kv
from .routing import N_CLUSTERS

LLOYD_ITERS = Param("lloyd_iters", int, 10, range=(1, 100), cap=20)

_SALT = 0xC1A5


def initial_centroids(q: torch.Tensor, C: int, seed: int) -> torch.Tensor:
    """``C`` distinct queries of ``q [B, h, L, d]`` at seeded positions -> ``[B, h, C, d]``."""
    gen = torch.Generator().manual_seed(seed * 1000003 + _SALT)
    idx = torch.randperm(q.shape[2], generator=gen)[:C].to(q.device)
    return q[:, :, idx]


@torch.no_grad()
def kmeans(q: torch.Tensor, C: int, iters: int, seed: int) -> torch.Tensor:
    """Lloyd's algorithm on ``q [B, h, L, d]`` -> cluster ids ``[B, h, L]`` in ``[0, C)``."""
    x = q.to(torch.promote_types(q.dtype, torch.float32))
    mu = initial_centroids(x, C, seed)  # (B, h, C, d)
    for _ in range(iters):
        labels = torch.cdist(x, mu).argmin(-1)  # (B, h, L)
        onehot = nn.functional.one_hot(labels, C).to(x.dtype)  # (B, h, L, C)
        counts = onehot.sum(2).unsqueeze(-1)  # (B, h, C, 1)
        mean = onehot.transpose(-1, -2) @ x / counts.clamp_min(1)
        mu = torch.where(counts > 0, mean, mu)
    return torch.cdist(x, mu).argmin(-1)


class ClusteredAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg

    def forward(self, q, k, v, mods, ctx):
        cfg = self.cfg
        B, h, L, d = q.shape
        work = torch.promote_types(q.dtype, torch.float32)  # at least fp32, float64 kept
        k, v = expand_kv(k, h).to(work), expand_kv(v, h).to(work)
        C = min(cfg.n_clusters, L)
        labels = kmeans(q, C, cfg.lloyd_iters, cfg.seed)  # (B, h, L)
        member = nn.functional.one_hot(labels, C).to(work)  # (B, h, L, C)
        counts = member.sum(2).unsqueeze(-1)  # (B, h, C, 1)
        centroids = member.transpose(-1, -2) @ q.to(work) / counts.clamp_min(1)  # (B, h, C, d_h), grad to q
        s = centroids @ k.transpose(-1, -2) / math.sqrt(d)  # (B, h, C, L)
        if cfg.softcap is not None:
            s = cfg.softcap * torch.tanh(s / cfg.softcap)
        a = torch.softmax(s, dim=-1)  # one attention row per centroid
        idx = labels.unsqueeze(-1)  # (B, h, L, 1)
        out = (a @ v).gather(2, idx.expand(B, h, L, d)).to(q.dtype)  # (B, h, L, d_h)
        probs = a.gather(2, idx.expand(B, h, L, L)).to(q.dtype) if ctx.need_weights else None
        return out, probs, {"clusters": labels}


CAPS = AttentionCaps(
    accepts=frozenset({ROTARY}),
    memory_keys=False,
    refuses_because=(
        "attends from cluster centroids, which sit at no single position, so a per-(query, key) "
        "distance bias or relative vector has no query position (rope acts on q, k and works)"
    ),
    causal_modes=frozenset({False}),
    causal_reason=(
        "it is bidirectional only, as the paper: a centroid averages queries from every position, so "
        "its shared attention row would have to see the future of its earliest member"
    ),
)

VARIANTS = (
    Variant(
        "clustered",
        "Vyas et al. 2020 (Fast Transformers with Clustered Attention)",
        "Queries are grouped by K-means into n_clusters; one softmax row per centroid, shared by every query "
        "of the cluster.",
        build=ClusteredAttention,
        params=(N_CLUSTERS, LLOYD_ITERS),
        caps=CAPS,
    ),
)
