"""Pooled maps of linearized attention (linear, Performer), analytically: O(L * features), no L x L.

The effective attention of a feature map is ``p_ij = phi(q_i) . phi(k_j) / Z_i`` with
``Z_i = sum_{j < hi_i} phi(q_i) . phi(k_j)`` (``hi_i = i_abs + 1`` when causal, else ``Lk``; queries
are the last ``Lq`` of the ``Lk`` positions), so every sum of ``p_ij`` over a range of keys is a
difference of the key features' prefix sums ``C_t = sum_{j < t} phi(k_j)``:

- cell ``(a, b)``: ``(1 / n_a) sum_{i in a} phi(q_i) / Z_i . (C_end - C_start)`` over the keys of block
  ``b`` visible from ``i``. Blocks every row of ``a`` sees whole are one matmul
  ``(sum_{i in a} phi(q_i) / Z_i) . (C_{b+1} - C_b)``; only the one or two blocks holding some row's
  causal edge are summed row by row;
- sink mass ``phi(q_i) / Z_i . C_{min(sink_k, hi_i)}``; window mass over keys
  ``[i - w + 1, min(i + w, hi_i))``, a difference of ``C``;
- distance ``sum_j p_ij |j - i|``: with the first moments ``D_t = sum_{j < t} j phi(k_j)``, the keys left of
  ``i`` give ``i C_i - D_i`` and those right of it ``(D_hi - D_{i+1}) - i (C_hi - C_{i+1})``;
- entropy ``-sum_j p_ij ln p_ij`` has no such form: it is summed exactly over chunks of queries
  (``O(L^2 features)`` time, ``O(chunk L)`` memory) up to ``ENTROPY_MAX_LEN`` keys, NaN past it
  (``note`` says so).

Prefix sums are kept in float64: ``D`` grows like ``L^2``, and its differences must stay exact.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..pooled_dense import PooledAttention, check_stats_args, rows_per_block
from ..reference import relative_positions

ENTROPY_MAX_LEN = 4096  # past this many keys the entropy's quadratic pass is skipped
_ENTROPY_CHUNK_BYTES = 8 << 20


def _at(prefix, pos):
    """``prefix [B, h, Lk + 1, F]`` at per-query positions ``pos [Lq]`` -> ``[B, h, Lq, F]``."""
    return prefix.index_select(2, pos)


def _dot(a, b):
    return (a * b).sum(-1)


def pooled_linear(
    phi_q,
    phi_k,
    *,
    causal: bool,
    block_q: int,
    block_k: int | None = None,
    sink_k: int = 4,
    window: int = 64,
    entropy_max_len: int = ENTROPY_MAX_LEN,
) -> PooledAttention:
    """``phi_q [B, h, Lq, F]``, ``phi_k [B, h_kv, Lk, F]`` (feature maps applied) -> :class:`PooledAttention`."""
    check_stats_args(sink_k, window)
    block_k = block_q if block_k is None else block_k
    B, h, lq, nf = phi_q.shape
    hkv, lk = phi_k.shape[1], phi_k.shape[2]
    if h % hkv or phi_k.shape[0] != B or phi_k.shape[3] != nf or lq > lk:
        raise ValueError(f"pooled_linear: phi_q {tuple(phi_q.shape)} and phi_k {tuple(phi_k.shape)} do not match")
    dev, off = phi_q.device, lk - lq
    qd = phi_q.double()
    kd = phi_k.double().repeat_interleave(h // hkv, 1) if h != hkv else phi_k.double()  # (B, h, Lk, F)
    j = torch.arange(lk, device=dev, dtype=torch.float64)
    C = F.pad(kd.cumsum(2), (0, 0, 1, 0))  # (B, h, Lk + 1, F): C_t = sum_{j < t} phi(k_j)
    D = F.pad((kd * j[:, None]).cumsum(2), (0, 0, 1, 0))  # first moments
    i_abs = torch.arange(lq, device=dev) + off
    hi = i_abs + 1 if causal else torch.full_like(i_abs, lk)  # keys [0, hi_i) are visible
    Z = _dot(qd, _at(C, hi))  # (B, h, Lq)
    qn = torch.where(Z[..., None] != 0, qd / Z[..., None], torch.zeros_like(qd))  # phi(q_i) / Z_i

    nqp, nkp = -(-lq // block_q), -(-lk // block_k)
    a_of = torch.arange(lq, device=dev) // block_q
    last = (hi - 1) // block_k  # block of each row's last visible key
    lo_a = torch.full((nqp,), nkp, dtype=torch.long, device=dev).scatter_reduce(0, a_of, last, "amin")
    hi_a = torch.zeros(nqp, dtype=torch.long, device=dev).scatter_reduce(0, a_of, last, "amax")
    # Blocks below lo_a[a] are seen whole by every row of block a: one matmul.
    qa = torch.zeros(B, h, nqp, nf, dtype=torch.float64, device=dev).index_add_(2, a_of, qn)
    edges = torch.clamp(torch.arange(nkp + 1, device=dev) * block_k, max=lk)
    S = _at(C, edges[1:]) - _at(C, edges[:-1])  # (B, h, n_kp, F) key-block sums
    mass = qa @ S.transpose(-1, -2)  # (B, h, n_qp, n_kp)
    mass = mass * (torch.arange(nkp, device=dev)[None, :] < lo_a[:, None])
    # The blocks from lo_a to hi_a (one or two): row by row.
    for t in range(int((hi_a - lo_a).max()) + 1):
        b = lo_a[a_of] + t  # (Lq,) candidate key block of each row
        ok = b <= hi_a[a_of]
        b = b.clamp(max=nkp - 1)
        start = b * block_k
        end = torch.minimum(torch.clamp(hi, min=0), torch.clamp((b + 1) * block_k, max=lk)).clamp(min=start)
        part = _dot(qn, _at(C, end) - _at(C, start)) * ok  # (B, h, Lq)
        mass.view(B, h, -1).index_add_(2, a_of * nkp + b, part)
    mass = mass / rows_per_block(lq, block_q, dev).double()[:, None]

    sink = _dot(qn, _at(C, torch.clamp(hi, max=sink_k)))
    w_lo = torch.clamp(i_abs - (window - 1), min=0)
    w_hi = torch.minimum(hi, i_abs + window).clamp(max=lk)
    local = _dot(qn, _at(C, w_hi) - _at(C, w_lo))
    fi = i_abs.double()[:, None]
    left = fi * _at(C, i_abs) - _at(D, i_abs)  # keys j < i
    nxt = torch.minimum(i_abs + 1, hi)
    right = (_at(D, hi) - _at(D, nxt)) - fi * (_at(C, hi) - _at(C, nxt))  # keys i < j < hi
    distance = _dot(qn, left + right)
    note = ""
    if lk <= entropy_max_len:
        entropy = _entropy(qn, kd, causal, off)
    else:
        entropy = torch.full_like(Z, float("nan"))
        note = (
            f"entropy left out past {entropy_max_len} keys: it has no closed form for a feature map and "
            f"its exact sum costs O(L^2) ({lk} keys)"
        )
    dt = torch.promote_types(phi_q.dtype, torch.float32)
    return PooledAttention(
        mass=mass.to(dt),
        entropy=entropy.to(dt),
        distance=distance.to(dt),
        sink=sink.to(dt),
        local=local.to(dt),
        block_q=block_q,
        block_k=block_k,
        q_len=lq,
        k_len=lk,
        sink_k=int(sink_k),
        window=int(window),
        backend="analytic (feature maps)",
        note=note,
    )


def _entropy(qn, kd, causal: bool, off: int):
    """``-sum_j p_ij ln p_ij`` over chunks of queries (exact, quadratic time, ``O(chunk Lk)`` memory)."""
    B, h, lq, _ = qn.shape
    lk = kd.shape[2]
    step = max(1, _ENTROPY_CHUNK_BYTES // (8 * B * h * lk))
    out = []
    for a in range(0, lq, step):
        p = qn[:, :, a : a + step] @ kd.transpose(-1, -2)  # (B, h, chunk, Lk)
        if causal:
            rel = relative_positions(lq, lk, qn.device)[a : a + step]
            p = p.masked_fill(rel > 0, 0.0)
        out.append(torch.special.entr(p.clamp_min(0)).sum(-1))
    return torch.cat(out, 2)
