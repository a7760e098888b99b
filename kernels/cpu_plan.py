"""Execution plan of a :class:`BlockMask` on the CPU path: which query blocks run together, and how.

Query blocks are grouped by how many key blocks they visit, so one batched matmul covers a group
(``kernels/cpu_attention.py``). Two layouts get more from the plan:

* **Sliding runs.** With square tiles, a group whose row ``r`` visits key blocks
  ``key_start + r .. key_start + r + c - 1`` sees the same offsets ``j - i`` in every row, so rows with
  equal element masks are one attention window slid along the sequence (a sliding window's bulk).
  Such a run is one fused attention call over overlapping strided views of K and V: the shared mask is
  a ``(1, bq, c * bk)`` window.
* **A stacked prefix.** The rows before the longest run (a window cut by the sequence start) visit a
  handful of key blocks; they are merged into one group whose rows all read the same key range and
  run as one fused call against that range, with a ``(R, bq, K)`` dense mask, instead of one small
  call per count.

The plan depends only on the layout, so it is memoised on the ``BlockMask`` (per device and lengths).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

from .block_mask import BlockMask


@dataclass
class Group:
    rows: torch.Tensor                 # (R,) query blocks of this group
    idx: torch.Tensor                  # (R, c) key blocks they visit
    masked: Optional[torch.Tensor]     # (R, 1, bq, c*bk) True = disallowed; None when every tile is full
    rel: torch.Tensor                  # (R, bq, c*bk) j - i_abs
    has_empty_rows: bool               # some query row has no allowed key (softmax gives NaN there)
    row_start: Optional[int]           # rows are row_start, row_start+1, ...: slice instead of gather
    key_start: Optional[int]           # row r visits key blocks key_start+r .. key_start+r+c-1: a strided view
    # Fused attention: (1, bq, c*bk) mask shared by a sliding run, or (R, bq, c*bk) for a stacked group
    # whose rows all visit key blocks idx[0]. None: the group runs as gathered strips only.
    window: Optional[torch.Tensor] = None
    stacked: bool = False
    # (1, bq/2, c*bk - bq/2): the window of half a query block, when both halves of a run's block
    # see the same window shifted by bq/2 (a sliding window): half-block windows visit fewer keys.
    half: Optional[torch.Tensor] = None


def _consecutive_start(x: torch.Tensor) -> Optional[int]:
    if x.numel() and bool((x == x[0] + torch.arange(x.numel(), device=x.device)).all()):
        return int(x[0])
    return None


def plan(bm: BlockMask, lq: int, lk: int, device) -> tuple:
    """``(groups, inverse)``: the groups, and the permutation back to query-block order (or None)."""
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
        contiguous = c > 0 and bool((idx == idx[:, :1] + torch.arange(c, device=device)).all())
        grp = Group(rows, idx, masked, _rel(rows, idx, bq, bk, lq, lk), empty, _consecutive_start(rows),
                    _consecutive_start(idx[:, 0]) if contiguous else None)
        groups.extend(_window_runs(grp) if bq == bk else [grp])
    groups = _stack_prefix(groups, bq, bk, lq, lk)
    inverse = torch.argsort(torch.cat([g.rows for g in groups]))
    identity = bool((inverse == torch.arange(inverse.numel(), device=device)).all())
    bm.plans[key] = (groups, None if identity else inverse)
    return bm.plans[key]


def _rel(rows, idx, bq, bk, lq, lk):
    """``j - i_abs`` of every (query, key) pair of the strips: (R, bq, c*bk)."""
    R, c = idx.shape
    i_abs = rows[:, None] * bq + torch.arange(bq, device=rows.device)[None, :] + (lk - lq)  # (R, bq)
    j = (idx[:, :, None] * bk + torch.arange(bk, device=rows.device)).reshape(R, 1, c * bk)
    return j - i_abs[:, :, None]


def _window_runs(grp: Group) -> list:
    """Split a group of sliding strips into runs of rows that share one element mask."""
    if grp.row_start is None or grp.key_start is None:
        return [grp]
    R = grp.rows.numel()
    if grp.masked is None:
        same = torch.ones(max(R - 1, 0), dtype=torch.bool, device=grp.rows.device)
    else:
        same = (grp.masked[1:] == grp.masked[:-1]).flatten(1).all(1)
    cuts = [0] + [int(x) + 1 for x in (~same).nonzero().flatten()] + [R]
    runs = []
    for a, b in zip(cuts[:-1], cuts[1:]):
        masked = None if grp.masked is None else grp.masked[a:b]
        allowed = (torch.ones(grp.rel.shape[1:], dtype=torch.bool, device=grp.rows.device)
                   if masked is None else ~masked[0, 0])
        empty = not bool(allowed.any(-1).all())
        runs.append(Group(grp.rows[a:b], grp.idx[a:b], masked, grp.rel[a:b], empty, grp.row_start + a,
                          grp.key_start + a, None if empty else allowed[None],
                          half=None if empty else _half_window(allowed)))
    return runs


def _half_window(allowed: torch.Tensor) -> Optional[torch.Tensor]:
    """The shared window of both halves of a query block, or None if they differ."""
    bq, K = allowed.shape
    s = bq // 2
    if bq % 2 or s < 16:
        return None
    first, second = allowed[:s], allowed[s:]
    if first[:, K - s:].any() or second[:, :s].any() or not torch.equal(first[:, :K - s], second[:, s:]):
        return None
    return first[None, :, :K - s]


def _stack_prefix(groups: list, bq: int, bk: int, lq: int, lk: int) -> list:
    """Merge the groups of the rows before the longest sliding run into one stacked group (or not)."""
    runs = [g for g in groups if g.window is not None and g.rows.numel() > 1]
    if not runs:
        return groups
    p = max(runs, key=lambda g: g.rows.numel()).row_start
    before = [g for g in groups if bool((g.rows < p).any())]
    if len(before) < 2 or any(bool((g.rows >= p).any()) or g.idx.shape[1] == 0 for g in before):
        return groups
    lo = min(int(g.idx.min()) for g in before)
    n = max(int(g.idx.max()) for g in before) - lo + 1
    visited = sum(g.idx.numel() for g in before)
    if p * n > 2 * visited + p:  # the common key range would be mostly wasted work
        return groups
    device = groups[0].rows.device
    allowed = torch.zeros(p, bq, n, bk, dtype=torch.bool, device=device)
    for g in before:
        R, c = g.idx.shape
        a = torch.ones(R, bq, c, bk, dtype=torch.bool, device=device) if g.masked is None \
            else ~g.masked[:, 0].view(R, bq, c, bk)
        for s in range(c):
            allowed[g.rows, :, g.idx[:, s] - lo] = a[:, :, s]
    allowed = allowed.view(p, bq, n * bk)
    if not bool(allowed.any(-1).all()):
        return groups
    rows = torch.arange(p, device=device)
    idx = (lo + torch.arange(n, device=device)).expand(p, n)
    stacked = Group(rows, idx, ~allowed[:, None], _rel(rows, idx, bq, bk, lq, lk), False, 0, None,
                    allowed, stacked=True)
    return [stacked] + [g for g in groups if not any(g is b for b in before)]
