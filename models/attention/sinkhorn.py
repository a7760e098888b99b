"""Sparse Sinkhorn attention: Tay, Bahri, Yang, Metzler & Juan 2020, "Sparse Sinkhorn Attention".

The sequence is cut into ``nb = ceil(L / b)`` blocks of ``b = block_size`` positions (the last one
padded; padding is never attended).

1. Block summaries: the mean of each block's keys. The paper sum-pools the block of layer inputs;
   the core only sees the projected heads, and a head's keys are a learned linear projection of
   those inputs, so this is the same summary up to a linear map and the factor ``b`` (both absorbed
   by the sorting network), with the padded last block on the same scale. Causal: the summary of block ``a`` is the mean
   of the keys of blocks ``< a`` (the paper's cumulative pooling, taken over the past only, so a block's sorting never
   depends on its own later tokens); block 0 has no past.
2. Meta sorting network, per head: ``R_a = W2 relu(W1 s_a + b1) + b2`` with ``W2`` of width
   ``ceil(max_len / b)`` (one logit per key block, sliced to ``nb``): ``R [nb, nb]``.
3. Sinkhorn balancing in log space: ``Z = R / sinkhorn_temperature``; ``sinkhorn_iters`` times,
   normalise the columns then the rows (``Z -= logsumexp``); ``P = exp(Z)``. Ending on the rows
   makes every row an exact distribution over key blocks (the sorted block is a convex mix of
   blocks), the columns balanced up to convergence. Causal Sinkhorn balancing: only entries
   ``c < a`` (strictly past blocks) exist; rows are normalised over them and each column over the
   rows up to the current one (a cumulative logsumexp), so no block's sorting reads a later block;
   block 0 has no sorted block. No Gumbel noise is added (the paper's optional Gumbel-Sinkhorn
   sampling), so the forward is deterministic.
4. Each query block ``a`` attends, in one softmax over ``2b`` keys, its own block (causal: keys
   ``j <= i``) and the *sorted block*: slot ``t`` holds ``sum_c P[a, c] k_{c, t}`` (and the same mix of
   values), renormalised over the blocks where slot ``t`` is a real position.

Effective attention ``[B, h, L, L]``: the own-block probabilities at their keys, plus each sorted
slot's probability spread over the blocks it mixes (``p_t P[a, c]`` on key ``(c, t)``); ``A V`` is the
output exactly and rows sum to 1.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ..capabilities import ROTARY, AttentionCaps
from ..errors import ConfigError
from ..variant import Param, Variant
from .common import NEG, expand_kv
from .patterns import BLOCK_SIZE

SINKHORN_ITERS = Param("sinkhorn_iters", int, 7, range=(1, 64), cap=20)
SINKHORN_TEMPERATURE = Param("sinkhorn_temperature", float, 0.75)

_SALT = 0x51C4


def n_key_blocks(cfg) -> int:
    return -(-cfg.max_len // cfg.block_size)


def block_summaries(k: torch.Tensor, valid: torch.Tensor, causal: bool) -> torch.Tensor:
    """``k [B, h, nb, b, d]``, ``valid [nb, b]`` -> ``[B, h, nb, d]`` (mean of the block, or of the past)."""
    w = valid.to(k.dtype)[..., None]  # (nb, b, 1)
    sums, counts = (k * w).sum(3), w.sum(1)  # (B, h, nb, d), (nb, 1)
    if causal:  # blocks strictly before a: exclusive prefix sums
        sums, counts = sums.cumsum(2) - sums, counts.cumsum(0) - counts
    return sums / counts.clamp_min(1)


def sinkhorn(logits: torch.Tensor, allowed: torch.Tensor, iters: int, causal: bool) -> torch.Tensor:
    """Log-space Sinkhorn over the ``allowed`` entries of ``logits [..., n, n]``, ending on the rows.

    Causal: a column is normalised over the rows up to the current one (``logcumsumexp``), so row
    ``a`` only ever depends on rows ``<= a``; a full column sum would let later query blocks (whose
    summaries see the future of block ``a``) change row ``a``. Masked entries stay at a finite ``NEG``
    (never ``-inf``, whose logsumexp has a NaN gradient) and are zero in the result; a row or column
    with no allowed entry stays all zero.
    """
    z = logits.masked_fill(~allowed, NEG)
    for _ in range(iters):
        col = torch.logcumsumexp(z, dim=-2) if causal else torch.logsumexp(z, dim=-2, keepdim=True)
        z = torch.where(allowed, z - col, NEG)
        z = torch.where(allowed, z - torch.logsumexp(z, dim=-1, keepdim=True), NEG)
    return torch.where(allowed, z.exp(), 0.0)


class SinkhornAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        h, dh, n = cfg.n_heads, cfg.d_head, n_key_blocks(cfg)
        gen = torch.Generator().manual_seed(cfg.seed * 1000003 + _SALT)
        # nn.Linear's default init (uniform +-1/sqrt(fan_in)) per head
        self.w1 = nn.Parameter((torch.rand(h, dh, dh, generator=gen) * 2 - 1) / math.sqrt(dh))
        self.b1 = nn.Parameter((torch.rand(h, dh, generator=gen) * 2 - 1) / math.sqrt(dh))
        self.w2 = nn.Parameter((torch.rand(h, dh, n, generator=gen) * 2 - 1) / math.sqrt(dh))
        self.b2 = nn.Parameter((torch.rand(h, n, generator=gen) * 2 - 1) / math.sqrt(dh))

    def sorting_matrix(self, k: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        """``P [B, h, nb, nb]``: row ``a`` says how much of each key block is sorted next to query block ``a``."""
        cfg = self.cfg
        nb = k.shape[2]
        s = block_summaries(k, valid, cfg.causal)  # (B, h, nb, d_h)
        w1, b1, w2, b2 = (p.to(s.dtype) for p in (self.w1, self.b1, self.w2, self.b2))
        hidden = torch.relu(torch.einsum("bhnd,hde->bhne", s, w1) + b1[:, None])
        logits = torch.einsum("bhne,hem->bhnm", hidden, w2[:, :, :nb]) + b2[:, None, :nb]  # (B, h, nb, nb)
        allowed = torch.ones(nb, nb, dtype=torch.bool, device=k.device)
        if cfg.causal:
            allowed = allowed.tril(-1)  # strictly past blocks
        return sinkhorn(logits / cfg.sinkhorn_temperature, allowed, cfg.sinkhorn_iters, cfg.causal)

    def forward(self, q, k, v, mods, ctx):
        cfg = self.cfg
        B, h, L, d = q.shape
        dtype = q.dtype
        if L > cfg.max_len:
            raise ConfigError(
                "max_len",
                cfg.max_len,
                f"an integer >= {L}: the sorting network has one logit per key block of the first "
                f"max_len={cfg.max_len} positions but the input has {L}; raise max_len or shorten it",
            )
        k, v = expand_kv(k, h), expand_kv(v, h)
        b = min(cfg.block_size, L)
        nb = -(-L // b)
        pad = nb * b - L
        work = torch.promote_types(dtype, torch.float32)  # at least fp32, float64 kept
        q, k, v = (F.pad(t.to(work), (0, 0, 0, pad)).view(B, h, nb, b, d) for t in (q, k, v))  # (B, h, nb, b, d_h)
        valid = (torch.arange(nb * b, device=q.device) < L).view(nb, b)
        P = self.sorting_matrix(k, valid)  # (B, h, nb, nb)
        mix = P[..., None] * valid.to(P.dtype)  # (B, h, nb, nb, b): weight of key (c, t) in slot t of block a
        slot_mass = mix.sum(3)  # (B, h, nb, b)
        mix = mix / slot_mass.clamp_min(1e-30)[:, :, :, None]
        ks = torch.einsum("bhact,bhctd->bhatd", mix, k)  # (B, h, nb, b, d_h) sorted keys
        vs = torch.einsum("bhact,bhctd->bhatd", mix, v)
        slot_ok = slot_mass > 0  # (B, h, nb, b)
        i = torch.arange(b, device=q.device)
        own_ok = valid[:, None, :].expand(nb, b, b)  # (nb, b_q, b_k)
        if cfg.causal:
            own_ok = own_ok & (i[None, :] <= i[:, None])
        s_own = q @ k.transpose(-1, -2) / math.sqrt(d)  # (B, h, nb, b, b)
        s_sort = q @ ks.transpose(-1, -2) / math.sqrt(d)
        s = torch.cat([s_own, s_sort], dim=-1)  # (B, h, nb, b, 2b)
        if cfg.softcap is not None:
            s = cfg.softcap * torch.tanh(s / cfg.softcap)
        ok = torch.cat([own_ok.expand(B, h, nb, b, b), slot_ok[:, :, :, None, :].expand(B, h, nb, b, b)], dim=-1)
        p = torch.softmax(s.masked_fill(~ok, NEG), dim=-1)
        p = torch.where(ok, p, 0.0)
        p_own, p_sort = p[..., :b], p[..., b:]
        out = (p_own @ v + p_sort @ vs).view(B, h, nb * b, d)[:, :, :L].to(dtype)
        probs = None
        if ctx.need_weights:
            eye = torch.eye(nb, device=q.device, dtype=p.dtype)
            dense = torch.einsum("bhait,bhact->bhaict", p_sort, mix) + torch.einsum("bhaij,ac->bhaicj", p_own, eye)
            probs = dense.reshape(B, h, nb * b, nb * b)[:, :, :L, :L].to(dtype)  # (B, h, L, L)
        return out, probs, {"sinkhorn": P.detach()}  # (B, h, nb, nb) for the views


def check(cfg) -> None:
    t = cfg.sinkhorn_temperature
    if not (math.isfinite(t) and t > 0):
        raise ConfigError("sinkhorn_temperature", t, "a finite number > 0: the sorting logits are divided by it")


CAPS = AttentionCaps(
    accepts=frozenset({ROTARY}),
    memory_keys=False,
    refuses_because=(
        "attends sorted keys that are mixtures of blocks at different positions, so a (query, key) pair has no "
        "single distance for a bias or relative vector (rope acts on q, k and works)"
    ),
)

VARIANTS = (
    Variant(
        "sinkhorn",
        "Tay et al. 2020 (Sparse Sinkhorn Attention)",
        "A learned sorting network, balanced by Sinkhorn iterations, brings one soft-sorted key block next to "
        "each query block; attention covers the own block and the sorted one.",
        build=SinkhornAttention,
        params=(BLOCK_SIZE, SINKHORN_ITERS, SINKHORN_TEMPERATURE, "max_len"),
        check=check,
        caps=CAPS,
        n_params=lambda c: c.n_heads * (c.d_head * c.d_head + c.d_head + (c.d_head + 1) * n_key_blocks(c)),
    ),
)
