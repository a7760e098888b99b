"""Pooled attention maps on the block-sparse PyTorch path (CPU, and any device without Triton).

It walks the layout as the block-sparse forward does (``kernels/cpu/plan.py``: query blocks grouped
by how many key blocks they visit, the visited key blocks gathered into one strip per query block,
sliding runs as strided views of K; dense attention is walked tile by tile without a stored plan),
in chunks of (K/V heads, query blocks) sized to stay in cache, and computes the same scores
(``kernels/reference.py``: scale, soft cap, ``rel_k``, ``rel_bias``, ALiBi, the layout's partial
tiles, causality). A strip holds every key its query block visits, so the softmax over the strip is
the forward's ``p``, and its log-sum-exp is ``lse = m - ln max_j p_ij`` (``m`` the row maximum).
Per chunk:

- cells: ``p`` summed over each visited tile's keys, then over the cell's query rows, scattered into
  the ``(n_qp, n_kp)`` grid: the grid, never ``L x L``, is what is kept;
- entropy ``H = lse - sum_j p s`` (one product-sum over the strip);
- distance ``sum p |j - i| = i - sum p j + 2 sum_{j > i} p (j - i)``: ``sum p j`` is each tile's first
  key times its mass plus one matrix-vector product with the offsets inside a tile; the last term is
  evaluated only on the key slots right of the query block's first row (the diagonal alone when
  causal). The window and sink masses likewise read only the slots within reach. Ascending slots
  make each such range one contiguous slice of the strip, a view.

Disallowed pairs get a finite floor (``-1e30``) rather than ``-inf``: ``p`` is exactly 0 there and
``p * s`` stays 0.

Memory: the grid ``O(B h n_qp n_kp)``, the statistics ``O(B h L)``, and two chunk buffers (scores,
probabilities) of ``_CHUNK_BYTES`` each, or one query block's strip for the query heads of one K/V
head when that is larger, reused by every chunk of the call.
"""

from __future__ import annotations

import math
from bisect import bisect_right

import torch
import torch.nn.functional as F

from ..block_mask import BlockMask
from ..pooled_dense import PooledAttention, rows_per_block
from ..reference import clipped_index
from .plan import EMPTY, STRIPS, Group, _rel, plan

_CHUNK_BYTES = 4 << 20  # scores of one chunk of query blocks: cache-sized elementwise passes
_FLOOR = -1e30  # the score of a disallowed pair: exp underflows to exactly 0, and 0 * _FLOOR is 0


def _rel_bias_at(rel_bias, rel, lk: int):
    return rel_bias[:, (rel + lk - 1).clamp(0, rel_bias.shape[-1] - 1)]


def _masked_slots(masked, bk: int):
    """``(first, stop)`` of the key slots where ``masked (Rc, 1, bq, K)`` has a True (a range)."""
    hit = masked.flatten(0, 2).any(0).view(-1, bk).any(-1).nonzero()
    return (int(hit[0]), int(hit[-1]) + 1) if hit.numel() else (0, 0)


def _slot_range(first_keys: list, bk: int, lo: list, hi: list) -> tuple[int, int]:
    """``(first, stop)`` slots of ascending key blocks (``first_keys``: each row's blocks' first keys,
    Python lists) that hold a key in ``[lo, hi]`` (per-row bounds), as one range common to the rows
    (empty: first == stop). Two bisections per row in Python: no tensor op, no synchronisation."""
    a, b = len(first_keys[0]) if first_keys else 0, 0
    for fk, l, h in zip(first_keys, lo, hi):
        s0, s1 = bisect_right(fk, l - bk), bisect_right(fk, h)  # first key > l - bk: last key >= l
        if s1 > s0:
            a, b = min(a, s0), max(b, s1)
    return (a, b) if b > a else (0, 0)


def pooled_block_sparse(
    q,
    k,
    bm: BlockMask | None,
    *,
    block_q: int,
    block_k: int,
    causal=False,
    scale=None,
    alibi_slopes=None,
    rel_bias=None,
    softcap=None,
    rel_k=None,
    sink_k: int = 4,
    window: int = 64,
    tile: int = 64,
) -> PooledAttention:
    """``q [B, h, Lq, d]``, ``k [B, h_kv, Lk, d]`` over the layout ``bm`` -> :class:`PooledAttention`.

    ``bm`` None: dense attention (``causal`` or not) on ``tile x tile`` tiles, walked without a stored
    plan (a dense layout's plan would hold every partial row's element mask: ``O(L^2)`` bits)."""
    B, h, lq, d = q.shape
    hkv, lk = k.shape[1], k.shape[2]
    g = h // hkv
    bq, bk = (tile, tile) if bm is None else (bm.block_q, bm.block_k)
    if block_q % bq or block_k % bk:
        raise ValueError(f"pooled blocks {block_q}x{block_k} must be multiples of the layout tile {bq}x{bk}")
    nqb = -(-lq // bq)
    nqp, nkp = -(-lq // block_q), -(-lk // block_k)
    acc = torch.promote_types(q.dtype, torch.float32)
    dev = q.device
    c = _Call(
        q,
        k,
        bq,
        bk,
        causal,
        1.0 / math.sqrt(d) if scale is None else float(scale),
        acc,
        alibi_slopes,
        rel_bias,
        softcap,
        rel_k,
        int(sink_k),
        int(window),
        block_q // bq,
        block_k // bk,
        nkp,
    )
    grid = torch.zeros(B * hkv, g, nqp * nkp, dtype=acc, device=dev)
    stats = torch.zeros(4, B * hkv, nqb, g, bq, dtype=acc, device=dev)  # entropy, distance, sink, local
    groups = plan(bm, lq, lk, dev, False)[0] if bm is not None else _dense_groups(lq, lk, bq, bk, causal, dev)
    for grp in groups:
        if grp.kind == EMPTY:
            continue
        R, n_slots = grp.idx.shape
        # Chunks of (K/V heads, query blocks) whose scores stay cache-sized.
        per_head_row = g * bq * n_slots * bk * torch.finfo(acc).bits // 8
        heads = max(1, min(B * hkv, _CHUNK_BYTES // per_head_row))
        step = max(1, _CHUNK_BYTES // (per_head_row * heads))
        for h0 in range(0, B * hkv, heads):
            for r0 in range(0, R, step):
                _chunk(c, grp, slice(h0, min(B * hkv, h0 + heads)), r0, min(R, r0 + step), grid, stats)
    mass = grid.view(B, h, nqp, nkp) / rows_per_block(lq, block_q, dev).to(acc)[:, None]
    stats = stats.view(4, B, hkv, nqb, g, bq).permute(0, 1, 2, 4, 3, 5).reshape(4, B, h, nqb * bq)[..., :lq]
    return PooledAttention(
        mass=mass,
        entropy=stats[0],
        distance=stats[1],
        sink=stats[2],
        local=stats[3],
        block_q=block_q,
        block_k=block_k,
        q_len=lq,
        k_len=lk,
        sink_k=int(sink_k),
        window=int(window),
        backend=f"torch-{dev.type} block-sparse",
    )


class _Call:
    """The inputs of one call, laid out as the chunks read them (K/V heads of the batch flattened)."""

    def __init__(
        self, q, k, bq, bk, causal, scale, acc, alibi_slopes, rel_bias, softcap, rel_k, sink_k, window, fq, fk, nkp
    ):
        B, h, lq, d = q.shape
        hkv, lk = k.shape[1], k.shape[2]
        self.g, self.d, self.lq, self.lk, self.off = h // hkv, d, lq, lk, lk - lq
        self.bq, self.bk, self.nkb = bq, bk, -(-lk // bk)
        nqb = -(-lq // bq)
        self.causal, self.acc, self.softcap = causal, acc, softcap
        self.sink_k, self.window, self.fq, self.fk, self.nkp = sink_k, window, fq, fk, nkp
        qs = F.pad(q.to(acc) * scale, (0, 0, 0, nqb * self.bq - lq))
        # (B h_kv, n_qb, g*bq, d): the query heads of one K/V head side by side, as the forward lays them.
        self.qp = (
            qs.view(B, hkv, self.g, nqb, self.bq, d)
            .permute(0, 1, 3, 2, 4, 5)
            .reshape(B * hkv, nqb, self.g * self.bq, d)
        )
        self.kflat = F.pad(k.to(acc), (0, 0, 0, self.nkb * self.bk - lk)).reshape(B * hkv, -1, d)
        self.qr = None
        if rel_k is not None:  # q . rel_k for every table row: (B h_kv, n_qb, g, bq, R_rel)
            qr = F.pad(qs[:, :, :lq] @ rel_k.to(acc).transpose(-1, -2), (0, 0, 0, nqb * self.bq - lq))
            self.qr = (
                qr.view(B, hkv, self.g, nqb, self.bq, -1)
                .permute(0, 1, 3, 2, 4, 5)
                .reshape(B * hkv, nqb, self.g, self.bq, -1)
            )
        self.slopes = (
            None if alibi_slopes is None else alibi_slopes.to(acc).view(hkv, 1, self.g, 1, 1).repeat(B, 1, 1, 1, 1)
        )
        self.rel_bias = None if rel_bias is None else rel_bias.to(acc).view(hkv, self.g, -1).repeat(B, 1, 1)
        # each key's offset inside its block, for a strip of up to every key block (sliced per chunk)
        self.t_local = torch.arange(self.bk, device=q.device, dtype=acc).repeat(self.nkb)
        self._work = [q.new_empty(0, dtype=acc), q.new_empty(0, dtype=acc)]

    def work(self, i: int, n: int) -> torch.Tensor:
        """The first ``n`` elements of reused buffer ``i`` (0: scores, 1: probabilities), grown by
        doubling: one allocation for all the chunks of a call, not one (page-faulted afresh) per chunk."""
        if self._work[i].numel() < n:
            self._work[i] = self._work[i].new_empty(max(n, 2 * self._work[i].numel()))
        return self._work[i][:n]


def _strip(c: _Call, grp, hs: slice, r0: int, r1: int):
    """Queries ``(H', Rc, g*bq, d)`` and transposed key strips ``(H', Rc, d, n_slots*bk)`` of a chunk:
    views when the rows are consecutive and slide by one key block each (a window's bulk)."""
    Rc, (_, n_slots) = r1 - r0, grp.idx.shape
    K = n_slots * c.bk
    if grp.row_start is not None:
        qg = c.qp[hs, grp.row_start + r0 : grp.row_start + r1]
    else:
        qg = c.qp[hs].index_select(1, grp.rows[r0:r1])
    if getattr(grp, "shared_keys", False):  # one strip for every row: a view, broadcast over the rows
        kt = c.kflat[hs, None, :K].transpose(-1, -2)  # (H', 1, d, K)
    elif grp.key_start is not None:  # overlapping windows, bk keys apart: a strided view, no copy
        kf = c.kflat[hs, (grp.key_start + r0) * c.bk :]
        kt = kf.as_strided((kf.shape[0], Rc, K, c.d), (kf.stride(0), c.bk * c.d, c.d, 1)).transpose(-1, -2)
    else:
        H = qg.shape[0]
        kblocks = c.kflat[hs].view(H, c.nkb, c.bk, c.d)
        kt = kblocks.index_select(1, grp.idx[r0:r1].flatten()).view(H, Rc, K, c.d).transpose(-1, -2)
    return qg, kt


def _chunk(c: _Call, grp, hs: slice, r0: int, r1: int, grid, stats) -> None:
    """Scores of one chunk, their softmax, and its cells and statistics added into ``grid`` / ``stats``."""
    rows, idx = grp.rows[r0:r1], grp.idx[r0:r1]  # (Rc,), (Rc, n_slots)
    Rc, n_slots = idx.shape
    bq, bk, g, acc = c.bq, c.bk, c.g, c.acc
    K = n_slots * bk
    qg, kt = _strip(c, grp, hs, r0, r1)
    H = qg.shape[0]
    s = c.work(0, H * Rc * g * bq * K).view(H, Rc, g * bq, K)
    if kt.shape[1] == 1:  # a shared strip: the rows ride in the matmul's M dimension
        torch.bmm(qg.reshape(H, Rc * g * bq, c.d), kt[:, 0], out=s.view(H, Rc * g * bq, K))
    else:  # one batched matmul per head: its batch stride is the strip's, so strided views stay views
        for n in range(H):
            torch.bmm(qg[n], kt[n], out=s[n])
    s = s.view(H, Rc, g, bq, K)  # (H', Rc, g, bq, K)
    needs_rel = c.qr is not None or c.rel_bias is not None or c.slopes is not None
    rel = grp.rel(r0, r1) if needs_rel else None  # (Rc, bq, K): j - i_abs
    if c.qr is not None:
        ridx = clipped_index(rel, c.qr.shape[-1])[None, :, None].expand(H, Rc, g, bq, K)
        s = s + c.qr[hs].index_select(1, rows).gather(-1, ridx)
    if c.softcap is not None:
        s = c.softcap * torch.tanh(s / c.softcap)
    if c.rel_bias is not None:
        s = s + _rel_bias_at(c.rel_bias[hs].reshape(-1, c.rel_bias.shape[-1]), rel, c.lk).view(
            H, g, Rc, bq, K
        ).transpose(1, 2)
    if c.slopes is not None:
        s = s - c.slopes[hs] * rel.abs().to(acc)[None, :, None]
    # Disallowed pairs get a finite floor: p = 0 exactly there, and p * s stays 0 (not NaN). Each mask
    # is applied on the slots it touches only: the layout's partial tiles, the keys right of the
    # block's first query (causal), the keys past the sequence (dense walk).
    first_keys, row_i0 = (idx * bk).tolist(), [r * bq + c.off for r in rows.tolist()]
    key_end = [c.nkb * bk] * Rc
    right_of_first = _slot_range(first_keys, bk, [i + 1 for i in row_i0], key_end)  # causal cut, |j - i| fix
    if grp.masked is not None:
        masked = grp.masked[r0:r1]  # (Rc, 1, bq, K)
        a, b = _masked_slots(masked, bk)
        if b > a:
            s[..., a * bk : b * bk].masked_fill_(masked[..., a * bk : b * bk], _FLOOR)
    if c.causal:
        a, b = right_of_first
        if b > a:
            s[..., a * bk : b * bk].masked_fill_((_rel_slice(grp, r0, r1, a, b, bk, torch.long) > 0)[:, None], _FLOOR)
    a, b = _slot_range(first_keys, bk, [c.lk] * Rc, key_end)
    if b > a:
        past = (idx[:, a:b, None] * bk + torch.arange(bk, device=idx.device)) >= c.lk  # (Rc, b - a, bk)
        s[..., a * bk : b * bk].masked_fill_(past.view(Rc, 1, 1, -1), _FLOOR)
    m = s.amax(-1)  # (H', Rc, g, bq)
    p = torch.softmax(s, dim=-1, out=c.work(1, s.numel()).view(s.shape))
    live = m > _FLOOR / 2  # rows with an allowed key (the others get p = 0)
    valid = (rows[:, None] * bq + torch.arange(bq, device=rows.device) < c.lq)[:, None]  # (Rc, 1, bq)
    keep = (live & valid).to(acc)
    lse = m - torch.log(p.amax(-1).clamp_min(torch.finfo(acc).tiny))  # p at the row max is exp(m - lse)
    entropy = lse - s.mul_(p).sum(-1)  # H = lse - sum p s (s is not read again: its buffer takes p s)
    tiles = p.view(H, Rc, g, bq, n_slots, bk).sum(-1)  # (H', Rc, g, bq, n_slots)
    i_abs = (rows[:, None] * bq + torch.arange(bq, device=rows.device) + c.off).to(acc)  # (Rc, bq)
    # sum p j: each block's first key times its mass, plus the offsets inside the blocks (one matvec)
    first = (tiles * (idx * bk).to(acc).view(Rc, 1, 1, n_slots)).sum(-1) + p @ c.t_local[:K]
    dist = i_abs[:, None] - first  # sum p (i - j) with sum p = 1
    a, b = right_of_first
    if b > a:  # keys right of some row: twice their (j - i), so (i - j) becomes |j - i|
        right = _rel_slice(grp, r0, r1, a, b, bk, acc).clamp(min=0)[:, None]
        dist = dist + 2 * (p[..., a * bk : b * bk] * right).sum(-1)
    local = torch.zeros_like(m)
    a, b = _slot_range(
        first_keys, bk, [i - (c.window - 1) for i in row_i0], [i + bq - 1 + (c.window - 1) for i in row_i0]
    )
    if b > a:
        near = (_rel_slice(grp, r0, r1, a, b, bk, acc).abs() < c.window)[:, None]
        local = (p[..., a * bk : b * bk] * near).sum(-1)
    sink = torch.zeros_like(m)
    a, b = _slot_range(first_keys, bk, [0] * Rc, [c.sink_k - 1] * Rc)
    if b > a and c.sink_k > 0:
        first_keys = (idx[:, a:b, None] * bk + torch.arange(bk, device=idx.device)) < c.sink_k
        sink = (p[..., a * bk : b * bk] * first_keys.view(Rc, 1, 1, -1).to(acc)).sum(-1)
    part = torch.stack([entropy, dist, sink, local]) * keep  # (4, H', Rc, g, bq)
    stats[:, hs].index_copy_(2, rows, part)
    cells = (tiles * keep[..., None]).sum(3)  # (H', Rc, g, n_slots): summed over the block's rows
    cell = (rows // c.fq)[:, None] * c.nkp + idx // c.fk  # (Rc, n_slots)
    grid[hs].scatter_add_(2, cell.flatten().expand(H, g, -1), cells.permute(0, 2, 1, 3).reshape(H, g, -1))


def _rel_slice(grp, r0: int, r1: int, a: int, b: int, bk: int, dtype) -> torch.Tensor:
    """``j - i_abs`` of rows ``r0:r1`` on key slots ``a:b`` only: (Rc, bq, (b - a) bk)."""
    rel_key = grp.rel_key[r0:r1, :, a * bk : b * bk]
    return rel_key.to(dtype) - torch.arange(grp.bq, device=rel_key.device, dtype=dtype)[:, None]


_DENSE_ROWS = 16  # query blocks per generated group of a dense walk: bounds its j - i table


def _dense_groups(lq: int, lk: int, bq: int, bk: int, causal: bool, device):
    """The groups of dense attention, made one at a time: query blocks ``r`` with the same number of
    key blocks (``0 .. last``; causal: up to the block's last row's diagonal), in runs of at most
    ``_DENSE_ROWS``, each a strip of consecutive key blocks from 0 (a view of K)."""
    nqb, nkb, off = -(-lq // bq), -(-lk // bk), lk - lq
    rows = torch.arange(nqb, device=device)
    last_row = torch.clamp(rows * bq + bq - 1, max=lq - 1) + off
    counts = torch.clamp(last_row // bk + 1, max=nkb) if causal else torch.full_like(rows, nkb)
    start = 0
    while start < nqb:
        stop = start + 1
        while stop < nqb and stop - start < _DENSE_ROWS and counts[stop] == counts[start]:
            stop += 1
        c = int(counts[start])
        r = rows[start:stop]
        idx = torch.arange(c, device=device).expand(stop - start, c)
        yield _DenseGroup(STRIPS, bq, r, idx, None, _rel(r, idx, bq, bk, lq, lk), False, start, None)
        start = stop


class _DenseGroup(Group):
    """A group of the dense walk: every row reads the same keys, ``0 .. c bk - 1``."""

    shared_keys = True
