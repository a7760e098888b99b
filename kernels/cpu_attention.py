"""Block-sparse attention in plain PyTorch: the CPU path (and the fallback on any device).

Algorithm: query blocks are grouped by how many key blocks they visit; for each group the visited
key/value blocks are gathered into a contiguous ``(rows, c * block_k)`` strip and one batched
matmul computes the scores of exactly the visited tiles. Partial tiles are masked element-wise;
full tiles run unmasked. Work and memory therefore grow with the number of visited
(query block, key block) pairs, never with ``Lq * Lk`` (cf. BigBird's blocked implementation and
FlexAttention's block masks). Query heads that share a K/V head (GQA / MQA) ride in the matmul's
M dimension, so K/V are never copied per query head.

Score convention: ``kernels/reference.py``.
"""
from __future__ import annotations

import torch

from .block_mask import BlockMask
from .reference import clipped_index


def _softmax_masked(s: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    """Softmax over the last dim with disallowed entries exactly 0 and empty rows all 0."""
    s = s.masked_fill(~allowed, float("-inf"))
    m = s.amax(dim=-1, keepdim=True)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m)).detach()
    e = torch.exp(s - m)
    return e / e.sum(dim=-1, keepdim=True).clamp_min(1e-30)


def block_sparse_attention(q, k, v, bm: BlockMask, *, causal=False, scale=1.0, alibi_slopes=None,
                           rel_bias=None, softcap=None, rel_k=None, rel_v=None):
    """``q [B, h, Lq, d]``, ``k, v [B, h_kv, Lk, d]`` -> ``out [B, h, Lq, d]`` over the visited tiles."""
    B, h, lq, d = q.shape
    hkv, lk = k.shape[1], k.shape[2]
    g = h // hkv
    bq, bk = bm.block_q, bm.block_k
    nqb, nkb = bm.n_q_blocks, bm.n_k_blocks
    dev = q.device
    # Pad to whole blocks; padded keys are never allowed (tiles are False there).
    qp = torch.nn.functional.pad(q, (0, 0, 0, nqb * bq - lq)).view(B, hkv, g, nqb, bq, d)
    kp = torch.nn.functional.pad(k, (0, 0, 0, nkb * bk - lk)).view(B, hkv, nkb, bk, d)
    vp = torch.nn.functional.pad(v, (0, 0, 0, nkb * bk - lk)).view(B, hkv, nkb, bk, d)
    qr = None
    if rel_k is not None:  # q . rel_k for every table row, gathered per pair below
        qr = torch.nn.functional.pad(q @ rel_k.transpose(-1, -2), (0, 0, 0, nqb * bq - lq))
        qr = qr.view(B, hkv, g, nqb, bq, -1)  # (B, h_kv, g, n_qb, bq, R)
    counts = bm.kv_counts.to(dev).long()
    kv_indices = bm.kv_indices.to(dev).long()
    kv_tile = bm.kv_tile.to(dev).long()
    tiles = torch.cat([torch.ones(1, bq, bk, dtype=torch.bool, device=dev), bm.tiles.to(dev)])
    parts, order = [], []
    for c in torch.unique(counts).tolist():
        rows = (counts == c).nonzero().squeeze(1)  # query blocks visiting c key blocks
        order.append(rows)
        if c == 0:  # nothing allowed: output 0
            parts.append(q.new_zeros(B, hkv, g, rows.numel(), bq, d))
            continue
        idx = kv_indices[rows, :c]  # (R, c)
        R = rows.numel()
        kg = kp[:, :, idx].reshape(B, hkv, R, c * bk, d)  # (B, h_kv, R, c*bk, d)
        vg = vp[:, :, idx].reshape(B, hkv, R, c * bk, d)
        qg = qp[:, :, :, rows]  # (B, h_kv, g, R, bq, d)
        s = torch.einsum("bkgrqd,bkrsd->bkgrqs", qg, kg)  # (B, h_kv, g, R, bq, c*bk)
        allowed = tiles[kv_tile[rows, :c] + 1]  # (R, c, bq, bk)
        allowed = allowed.permute(0, 2, 1, 3).reshape(R, bq, c * bk)
        need_rel = causal or alibi_slopes is not None or rel_bias is not None or qr is not None or rel_v is not None
        if need_rel:
            i_abs = rows[:, None] * bq + torch.arange(bq, device=dev)[None, :] + (lk - lq)  # (R, bq)
            j = (idx[:, :, None] * bk + torch.arange(bk, device=dev)).reshape(R, 1, c * bk)
            rel = j - i_abs[:, :, None]  # (R, bq, c*bk)
            if causal:
                allowed = allowed & (rel <= 0)
        if qr is not None:
            ridx = clipped_index(rel, qr.shape[-1])
            s = s + qr[:, :, :, rows].gather(-1, ridx.expand(B, hkv, g, R, bq, c * bk))
        s = s * scale
        if softcap is not None:
            s = softcap * torch.tanh(s / softcap)
        if rel_bias is not None:
            bidx = (rel + lk - 1).clamp(0, rel_bias.shape[-1] - 1)
            s = s + rel_bias[:, bidx].view(1, hkv, g, R, bq, c * bk).to(s.dtype)
        if alibi_slopes is not None:
            s = s - alibi_slopes.view(1, hkv, g, 1, 1, 1).to(s.dtype) * rel.abs().to(s.dtype)
        p = _softmax_masked(s, allowed)
        o = torch.einsum("bkgrqs,bkrsd->bkgrqd", p, vg)  # (B, h_kv, g, R, bq, d)
        if rel_v is not None:
            n_rel = rel_v.shape[-2]
            ridx = clipped_index(rel, n_rel).expand(B, hkv, g, R, bq, c * bk)
            w = p.new_zeros(B, hkv, g, R, bq, n_rel).scatter_add(-1, ridx, p)  # (B, h_kv, g, R, bq, R_rel)
            rv = rel_v.view(1, -1 if rel_v.shape[0] == 1 else hkv, 1 if rel_v.shape[0] == 1 else g, 1, n_rel, d)
            o = o + w @ rv
        parts.append(o)
    out = torch.cat(parts, dim=3)  # query blocks in group order
    inverse = torch.argsort(torch.cat(order))
    out = out[:, :, :, inverse]  # (B, h_kv, g, n_qb, bq, d)
    return out.reshape(B, h, nqb * bq, d)[:, :, :lq]
