"""Plain PyTorch reference of the attention every backend computes.

Conventions (shared by the CPU block-sparse path and the Triton kernels):
- ``q [B, h, Lq, d]``, ``k, v [B, h_kv, Lk, d]``; query head ``n`` reads K/V head
  ``n // (h // h_kv)`` (contiguous groups, LLaMA's ``repeat_kv``).
- Queries are the *last* ``Lq`` of the ``Lk`` key positions: query ``i`` sits at absolute position
  ``i + Lk - Lq`` (so memory / cached keys come first). ``rel = j - i_abs``.
- score = ``scale * (q_i . k_j + q_i . rel_k[r])``, then ``softcap * tanh(score / softcap)``,
  then ``+ rel_bias[n, rel + Lk - 1] - alibi_slopes[n] * |rel|``;
  ``r = clamp(rel + c, 0, R - 1)`` with ``R = rel_k.shape[-2]`` and ``c = (R - 1) // 2``
  (Shaw's clipped relative index; a table of ``2 Lk - 1`` rows is unclipped).
- Disallowed pairs (``mask`` False, or ``j > i_abs`` when ``causal``) get probability exactly 0;
  a query row with no allowed key outputs 0.
- ``out = P v + P rel_v`` (``rel_v`` indexed like ``rel_k``).
- Learned attention sinks (``sinks [h]``, gpt-oss, OpenAI 2025): one extra logit ``s_n`` per query
  head joins every row's softmax denominator and carries no value:
  ``p_ij = exp(a_ij - m_i) / (exp(s_n - m_i) + sum_j exp(a_ij - m_i))``, ``m_i`` the row max including
  ``s_n``; ``P`` is returned without the sink column, so a row sums to ``1 - p_sink_i < 1`` and a row
  with no allowed key gives all its mass to the sink (output 0, as without sinks).
"""

from __future__ import annotations

import math

import torch


def relative_positions(lq: int, lk: int, device=None) -> torch.Tensor:
    """``rel[i, j] = j - (i + lk - lq)`` as a LongTensor ``[lq, lk]``."""
    i = torch.arange(lq, device=device)[:, None] + (lk - lq)
    j = torch.arange(lk, device=device)[None, :]
    return j - i


def clipped_index(rel: torch.Tensor, n_rel: int) -> torch.Tensor:
    """Row of a relative table of ``n_rel`` rows centred at ``(n_rel - 1) // 2``."""
    return (rel + (n_rel - 1) // 2).clamp(0, n_rel - 1)


def expand_kv(x: torch.Tensor, n_heads: int) -> torch.Tensor:
    """Repeat K/V heads to query heads (reference only: kernels index the shared head)."""
    rep = n_heads // x.shape[1]
    return x if rep == 1 else x.repeat_interleave(rep, dim=1)


def attention_ref(
    q,
    k,
    v,
    *,
    causal=False,
    mask=None,
    block_mask=None,
    alibi_slopes=None,
    rel_bias=None,
    softcap=None,
    scale=None,
    rel_k=None,
    rel_v=None,
    pair_bias=None,
    sinks=None,
):
    """Dense reference. Returns ``(out [B, h, Lq, d], probs [B, h, Lq, Lk])``.

        ``mask`` is a dense bool ``[Lq, Lk]`` pattern; ``block_mask`` a :class:`BlockMask` (its dense
        form is used). ``rel_bias [h, 2 Lk - 1]``; ``alibi_slopes [h]``; ``rel_k, rel_v [h or 1, R, d]``;
    ``sinks [h]`` learned sink logits (module docstring).
    """
    B, h, lq, d = q.shape
    lk = k.shape[2]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    k, v = expand_kv(k, h), expand_kv(v, h)
    rel = relative_positions(lq, lk, q.device)
    s = q @ k.transpose(-1, -2)  # (B, h, Lq, Lk)
    if rel_k is not None:
        idx = clipped_index(rel, rel_k.shape[-2])
        qr = q @ rel_k.transpose(-1, -2)  # (B, h, Lq, R)
        s = s + qr.gather(-1, idx.expand(B, h, lq, lk))
    acc = torch.promote_types(q.dtype, torch.float32)  # fp16/bf16 accumulate in fp32
    s = s.to(acc) * scale
    if softcap is not None:
        s = softcap * torch.tanh(s / softcap)
    if rel_bias is not None:
        s = s + rel_bias.to(acc)[:, rel + lk - 1]
    if alibi_slopes is not None:
        s = s - alibi_slopes.to(acc)[:, None, None] * rel.abs()
    if pair_bias is not None:  # [B or 1, h, Lq, Lk], added like rel_bias
        s = s + pair_bias.to(acc)
    allowed = torch.ones(lq, lk, dtype=torch.bool, device=q.device)
    if mask is not None:
        allowed = allowed & mask
    if block_mask is not None:
        allowed = allowed & block_mask.to_dense().to(q.device)
    if causal:
        allowed = allowed & (rel <= 0)
    s = s.masked_fill(~allowed, float("-inf"))
    if sinks is not None:  # the sink logit as one more column of the softmax, dropped after it
        sink = sinks.to(acc).view(1, h, 1, 1).expand(B, h, lq, 1)
        p = torch.softmax(torch.cat([s, sink], dim=-1), dim=-1)[..., :-1]
    else:
        p = torch.softmax(s, dim=-1).nan_to_num(0.0)  # empty rows -> all zeros
    p = p.to(q.dtype)
    out = p @ v
    if rel_v is not None:
        idx = clipped_index(rel, rel_v.shape[-2])
        n_rel = rel_v.shape[-2]
        w = torch.zeros(B, h, lq, n_rel, dtype=p.dtype, device=p.device)
        w = w.scatter_add(-1, idx.expand(B, h, lq, lk), p)  # (B, h, Lq, R)
        out = out + w @ rel_v
    return out, p
