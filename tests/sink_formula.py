"""Learned attention sinks (gpt-oss, OpenAI 2025) written from the formula, in float64, for the tests.

    p_ij = exp(a_ij - m_i) / (exp(s_n - m_i) + sum_j exp(a_ij - m_i)),   m_i = max(s_n, max_j a_ij)
    out_i = sum_j p_ij v_j                                               (the sink carries no value)

``a_ij = scale q_i . k_j`` on allowed pairs (``allowed [Lq, Lk]``, queries the last Lq of Lk keys).
Independent of the product code: no ``kernels`` or ``models`` import, an explicit max and sum (no
``torch.softmax``), K/V heads repeated by hand.
"""

from __future__ import annotations

import math

import torch


def sink_attention(q, k, v, sinks, allowed=None, causal=False, scale=None):
    """``(out [B, h, Lq, d], p [B, h, Lq, Lk])`` in float64."""
    q, k, v, sinks = (t.double() for t in (q, k, v, sinks))
    B, h, lq, d = q.shape
    lk = k.shape[2]
    rep = h // k.shape[1]
    k = torch.stack([k[:, n // rep] for n in range(h)], 1)  # (B, h, Lk, d)
    v = torch.stack([v[:, n // rep] for n in range(h)], 1)
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    a = scale * torch.einsum("bhid,bhjd->bhij", q, k)  # (B, h, Lq, Lk)
    ok = torch.ones(lq, lk, dtype=torch.bool) if allowed is None else allowed.clone()
    if causal:
        i = torch.arange(lq)[:, None] + (lk - lq)
        ok &= torch.arange(lk)[None, :] <= i
    s = sinks.view(1, h, 1, 1)
    m = torch.maximum(a.masked_fill(~ok, -math.inf).amax(-1, keepdim=True), s)  # row max including the sink
    e = torch.exp(a - m) * ok
    p = e / (torch.exp(s - m) + e.sum(-1, keepdim=True))
    return p @ v, p
