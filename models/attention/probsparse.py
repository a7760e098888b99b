"""ProbSparse self-attention: Zhou et al. 2021, "Informer: Beyond Efficient Transformer for Long
Sequence Time-Series Forecasting".

Scores ``s_ij = q_i . k_j / sqrt(d_h)`` (plus the position bias, soft-capped, as the softmax sees
them). Each query's sparsity measurement is ``M(q_i, K) = max_j s_ij - mean_j s_ij``, computed
*exactly* over all its keys (the paper samples ``c ln L`` keys to estimate it in O(L ln L); here the
whole score matrix is formed, so the measurement is exact and deterministic, and the explorer shows
the selection rule rather than its speed). ``u = probsparse_factor * ceil(ln L)`` (capped at ``L``)
"active" queries get ordinary softmax attention; every other ("lazy") query outputs the mean of
``V`` (bidirectional) or the cumulative mean ``mean_{j <= i} v_j`` (causal, as Informer's decoder).
The effective attention of a lazy query is that uniform row.

Causal: the measurement only uses keys ``j <= i``, and a query is active when its ``M`` is among the
``u`` largest of the queries ``<= i`` (a running top-u). Informer's decoder takes the top-u of the
whole sequence, which would let a future token decide whether a past query gets full attention (a
leak in an autoregressive model; Informer sidesteps it by feeding zeros for the future). The running
rule is causal; it activates at least ``u`` queries (about ``u (1 + ln(L / u))`` if the ``M`` came in a
random order; more in practice, since ``M`` over ``i + 1`` keys tends to grow with ``i``).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ..capabilities import ROTARY, SCORE_BIAS, AttentionCaps
from ..variant import Param, Variant
from .common import NEG, expand_kv, pair_bias

PROBSPARSE_FACTOR = Param("probsparse_factor", int, 5, range=(1, 1024), cap=64, surgery=True)  # Informer's c


def n_active(cfg, L: int) -> int:
    """Informer's ``u = c * ceil(ln L)``, at most ``L`` (0 for ``L = 1``, where the mean of V is the attention)."""
    return min(L, cfg.probsparse_factor * math.ceil(math.log(L)))


def sparsity(s: torch.Tensor, allowed: torch.Tensor | None) -> torch.Tensor:
    """``M(q_i, K) = max_j s_ij - mean_j s_ij`` over the allowed keys (``allowed [L, L]`` or None for
    all): ``s [B, h, L, L] -> [B, h, L]``."""
    if allowed is None:
        return s.amax(-1) - s.mean(-1)
    top = s.masked_fill(~allowed, float("-inf")).amax(-1)
    return top - s.masked_fill(~allowed, 0.0).sum(-1) / allowed.sum(-1).clamp_min(1)


def active_queries(m: torch.Tensor, u: int, causal: bool) -> torch.Tensor:
    """Bool ``[B, h, L]``: global top-u of ``m`` (bidirectional) or running top-u (causal)."""
    L = m.shape[-1]
    if not causal:
        idx = m.topk(u, dim=-1).indices
        return torch.zeros_like(m, dtype=torch.bool).scatter_(-1, idx, True)
    # rank of m_i among m_0..m_i: how many earlier queries beat it (ties go to the earlier query)
    earlier = torch.ones(L, L, dtype=torch.bool, device=m.device).tril(-1)  # [i, j]: j < i
    beats = (m.unsqueeze(-2) >= m.unsqueeze(-1)) & earlier  # (B, h, L, L): m_j >= m_i, j < i
    return beats.sum(-1) < u


class ProbSparseAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg

    def forward(self, q, k, v, mods, ctx):
        cfg = self.cfg
        B, h, L, d = q.shape
        k, v = expand_kv(k, h), expand_kv(v, h)
        work = torch.promote_types(q.dtype, torch.float32)  # at least fp32, float64 kept
        s = (q.to(work) @ k.to(work).transpose(-1, -2)) / math.sqrt(d)  # (B, h, L, L)
        if cfg.softcap is not None:
            s = cfg.softcap * torch.tanh(s / cfg.softcap)
        pos = torch.arange(L, device=q.device)
        rel = pos[None, :] - pos[:, None]  # (L, L): j - i
        bias = pair_bias(mods, rel[None, None], L, h)
        if bias is not None:
            s = s + bias
        allowed = rel <= 0 if cfg.causal else None  # (L, L), None: every key
        active = active_queries(sparsity(s, allowed), n_active(cfg, L), cfg.causal)  # (B, h, L)
        if allowed is None:
            full, lazy = torch.softmax(s, dim=-1), s.new_full((L, L), 1.0 / L)
        else:
            full = torch.softmax(s.masked_fill(~allowed, NEG), dim=-1)
            lazy = allowed.to(work) / allowed.sum(-1, keepdim=True)  # uniform over the visible keys
        p = torch.where(active.unsqueeze(-1), full, lazy)  # (B, h, L, L)
        out = (p @ v.to(work)).to(q.dtype)
        return out, p.to(q.dtype) if ctx.need_weights else None, {"active_queries": active.detach()}


CAPS = AttentionCaps(
    accepts=frozenset({ROTARY, SCORE_BIAS}),
    memory_keys=False,
    refuses_because="adds no relative key/value vectors (scalar biases such as t5 / alibi and rope work)",
)

VARIANTS = (
    Variant(
        "probsparse",
        "Zhou et al. 2021 (Informer, ProbSparse)",
        "Only the probsparse_factor * ceil(ln L) queries with the most peaked scores (max - mean) attend; "
        "the others output the mean of the values.",
        build=ProbSparseAttention,
        params=(PROBSPARSE_FACTOR,),
        caps=CAPS,
        surgery=True,
    ),
)
