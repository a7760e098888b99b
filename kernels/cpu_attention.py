"""Block-sparse attention in plain PyTorch: the CPU path (and the fallback on any device).

Algorithm: query blocks are grouped by how many key blocks they visit; for each group the visited
key/value blocks are gathered into a contiguous ``(rows, c * block_k)`` strip and one batched
matmul computes the scores of exactly the visited tiles. Partial tiles are masked element-wise;
a group made only of full tiles runs unmasked. Work and memory therefore grow with the number of
visited (query block, key block) pairs, never with ``Lq * Lk`` (cf. BigBird's blocked
implementation and FlexAttention's block masks). Query heads that share a K/V head (GQA / MQA)
ride in the matmul's M dimension, so K/V are never copied per query head.

The grouping ("plan") depends only on the layout, so it is computed once per ``BlockMask`` and
device and memoised on it. Score convention: ``kernels/reference.py``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch
import torch.nn.functional as F

from .block_mask import BlockMask
from .reference import clipped_index


@dataclass
class _Group:
    rows: torch.Tensor                 # (R,) query blocks of this group
    idx: torch.Tensor                  # (R, c) key blocks they visit
    masked: Optional[torch.Tensor]     # (R, 1, bq, c*bk) True = disallowed; None when every tile is full
    rel: torch.Tensor                  # (R, bq, c*bk) j - i_abs
    has_empty_rows: bool               # some query row has no allowed key (softmax gives NaN there)
    row_start: Optional[int]           # rows are row_start, row_start+1, ...: slice instead of gather
    key_start: Optional[int]           # row r visits key blocks key_start+r .. key_start+r+c-1: a strided view


def _consecutive_start(x: torch.Tensor) -> Optional[int]:
    if x.numel() and bool((x == x[0] + torch.arange(x.numel(), device=x.device)).all()):
        return int(x[0])
    return None


def _plan(bm: BlockMask, lq: int, lk: int, device) -> tuple:
    key = (str(device), lq, lk)
    if key in bm.plans:
        return bm.plans[key]
    bq, bk = bm.block_q, bm.block_k
    counts = bm.kv_counts.to(device).long()
    kv_indices = bm.kv_indices.to(device).long()
    kv_tile = bm.kv_tile.to(device).long()
    tiles = torch.cat([torch.ones(1, bq, bk, dtype=torch.bool, device=device), bm.tiles.to(device)])
    groups = []
    for c in torch.unique(counts).tolist():
        rows = (counts == c).nonzero().squeeze(1)
        R = rows.numel()
        idx = kv_indices[rows, :c]
        tile = kv_tile[rows, :c]
        masked, empty = None, c == 0
        if c > 0 and bool((tile >= 0).any()):
            allowed = tiles[tile + 1].permute(0, 2, 1, 3).reshape(R, 1, bq, c * bk)
            masked = ~allowed
            empty = bool((~allowed.any(-1)).any())
        i_abs = rows[:, None] * bq + torch.arange(bq, device=device)[None, :] + (lk - lq)  # (R, bq)
        j = (idx[:, :, None] * bk + torch.arange(bk, device=device)).reshape(R, 1, c * bk)
        contiguous = c > 0 and bool((idx == idx[:, :1] + torch.arange(c, device=device)).all())
        groups.append(_Group(rows, idx, masked, j - i_abs[:, :, None], empty, _consecutive_start(rows),
                             _consecutive_start(idx[:, 0]) if contiguous else None))
    inverse = torch.argsort(torch.cat([g.rows for g in groups]))
    identity = bool((inverse == torch.arange(inverse.numel(), device=device)).all())
    bm.plans[key] = (groups, None if identity else inverse)
    return bm.plans[key]


_CHUNK_BYTES = 2 << 20  # scores of one chunk: cache-sized, so the elementwise passes stay in cache
_MIN_ROWS = 4  # ... but never fewer query blocks than this, or per-op overhead dominates


def _pad(x, n: int):
    """Pad the sequence dim by ``n`` zero rows (no copy when ``n == 0``)."""
    return F.pad(x, (0, 0, 0, n)) if n else x


def _attend(qp, kflat, vflat, kp, vp, qr, grp, r0, r1, causal, softcap, rel_bias, alibi_slopes, rel_v, lk):
    """Attention of query blocks ``grp.rows[r0:r1]`` over their key strips -> (B, h_kv, R, g, bq, d)."""
    B, hkv, _, gbq, d = qp.shape
    bk = kp.shape[3]
    c = grp.idx.shape[1]
    R = r1 - r0
    rel = grp.rel[r0:r1]
    if grp.key_start is not None:  # sliding strips: overlapping windows of the key sequence, no gather
        ks = grp.key_start + r0
        kt = kflat.unfold(2, c * bk, bk)[:, :, ks:ks + R]  # (B, h_kv, R, d, c*bk)
        vg = vflat.unfold(2, c * bk, bk)[:, :, ks:ks + R].transpose(-1, -2)  # (B, h_kv, R, c*bk, d)
    else:
        idx = grp.idx[r0:r1]
        kt = kp[:, :, idx].reshape(B, hkv, R, c * bk, d).transpose(-1, -2)
        vg = vp[:, :, idx].reshape(B, hkv, R, c * bk, d)
    if grp.row_start is not None:
        qg = qp[:, :, grp.row_start + r0:grp.row_start + r1]
    else:
        qg = qp[:, :, grp.rows[r0:r1]]
    bq = rel.shape[1]
    g = gbq // bq
    s = (qg @ kt).view(B, hkv, R, g, bq, c * bk)  # (B, h_kv, R, g, bq, c*bk)
    masked = None if grp.masked is None else grp.masked[r0:r1]
    if causal:
        future = (rel > 0)[:, None]
        masked = future if masked is None else masked | future
    if qr is not None:
        rows = grp.rows[r0:r1]
        ridx = clipped_index(rel, qr.shape[-1])[:, None].expand(B, hkv, R, g, bq, c * bk)
        s = s + qr[:, :, rows].gather(-1, ridx)
    if softcap is not None:
        s = softcap * torch.tanh(s / softcap)
    if rel_bias is not None:
        bidx = (rel + lk - 1).clamp(0, rel_bias.shape[-1] - 1)  # (R, bq, c*bk)
        s = s + rel_bias[:, bidx].view(hkv, g, R, bq, c * bk).permute(0, 2, 1, 3, 4).to(s.dtype)
    if alibi_slopes is not None:
        s = s - alibi_slopes.view(1, hkv, 1, g, 1, 1).to(s.dtype) * rel.abs()[:, None].to(s.dtype)
    if masked is not None:
        s = s.masked_fill_(masked, float("-inf"))  # in place: no op before needs its output
    p = torch.softmax(s, dim=-1)
    if grp.has_empty_rows or causal:
        # rows with no allowed key give NaN; zero them (masked_fill's backward zeroes their grads)
        p = p.nan_to_num(0.0)
    o = (p.view(B, hkv, R, gbq, c * bk) @ vg).view(B, hkv, R, g, bq, d)
    if rel_v is not None:
        n_rel = rel_v.shape[-2]
        ridx = clipped_index(rel, n_rel)[:, None].expand(B, hkv, R, g, bq, c * bk)
        w = p.new_zeros(B, hkv, R, g, bq, n_rel).scatter_add(-1, ridx, p)  # (B, h_kv, R, g, bq, R_rel)
        rv = rel_v.view(1, hkv, 1, g, n_rel, d) if rel_v.shape[0] > 1 else rel_v.view(1, 1, 1, 1, n_rel, d)
        o = o + w @ rv
    return o


def block_sparse_attention(q, k, v, bm: BlockMask, *, causal=False, scale=1.0, alibi_slopes=None,
                           rel_bias=None, softcap=None, rel_k=None, rel_v=None):
    """``q [B, h, Lq, d]``, ``k, v [B, h_kv, Lk, d]`` -> ``out [B, h, Lq, d]`` over the visited tiles."""
    B, h, lq, d = q.shape
    hkv, lk = k.shape[1], k.shape[2]
    g = h // hkv
    bq, bk = bm.block_q, bm.block_k
    nqb, nkb = bm.n_q_blocks, bm.n_k_blocks
    groups, inverse = _plan(bm, lq, lk, q.device)
    q = q * scale  # folded into q: scales q.k and q.rel_k alike
    # Query heads of one K/V head side by side: (B, h_kv, n_qb, g*bq, d).
    qp = _pad(q, nqb * bq - lq).view(B, hkv, g, nqb, bq, d)
    qp = qp.permute(0, 1, 3, 2, 4, 5).reshape(B, hkv, nqb, g * bq, d)
    kflat = _pad(k, nkb * bk - lk)  # (B, h_kv, n_kb*bk, d); padded keys are never allowed
    vflat = _pad(v, nkb * bk - lk)
    kp, vp = kflat.view(B, hkv, nkb, bk, d), vflat.view(B, hkv, nkb, bk, d)
    qr = None
    if rel_k is not None:  # q . rel_k for every table row, gathered per pair below
        qr = F.pad(q @ rel_k.transpose(-1, -2), (0, 0, 0, nqb * bq - lq)).view(B, hkv, g, nqb, bq, -1)
        qr = qr.permute(0, 1, 3, 2, 4, 5)  # (B, h_kv, n_qb, g, bq, R_rel)
    parts = []
    for grp in groups:
        R, c = grp.idx.shape
        if c == 0:  # nothing allowed: output 0
            parts.append(q.new_zeros(B, hkv, R, g, bq, d))
            continue
        # Chunks of query blocks whose scores fit in cache: the elementwise passes (mask, softmax)
        # are memory-bound, and a cache-sized chunk runs them several times faster.
        step = max(_MIN_ROWS, _CHUNK_BYTES // (B * h * bq * c * bk * q.element_size()))
        for r0 in range(0, R, step):
            parts.append(_attend(qp, kflat, vflat, kp, vp, qr, grp, r0, min(R, r0 + step), causal,
                                 softcap, rel_bias, alibi_slopes, rel_v, lk))
    out = parts[0] if len(parts) == 1 else torch.cat(parts, dim=2)
    if inverse is not None:
        out = out[:, :, inverse]  # back to query-block order: (B, h_kv, n_qb, g, bq, d)
    out = out.permute(0, 1, 3, 2, 4, 5).reshape(B, h, nqb * bq, d)
    return out[:, :, :lq]
