"""What the block-sparse Triton kernels read of a BlockMask, built once per layout, device and causality.

A :class:`kernels.block_mask.BlockMask` lists, per query block, the visited key blocks and which
of them carry an element mask. The kernels want that split further (as FlexAttention's
``kv_indices`` / ``full_kv_indices``):

- *full* blocks: every element allowed, inside the sequence and (when causal) entirely on or
  below the diagonal. They run the unmasked tile body: no mask tile is loaded, no compare is made.
- *partial* blocks: everything else that has at least one allowed element: a partial tile of
  the BlockMask (its int8 element mask is read), a block cut by the causal diagonal, or a block
  crossing the key tail. Blocks entirely above the causal diagonal are dropped.

Both directions are packed, each into one int32 tensor with one row per block:
``[n_full, n_part, full ids (mf), partial ids (mp), partial tile rows (mp)]`` (padded with 0; a
tile row of -1 means "no element mask, only the causal / tail test"). The query-major table
drives the forward and dQ kernels, the key-major one (its transpose) the dK/dV kernel. The
partial masks are converted to int8 once. Everything is memoised in ``bm.plans`` under
``("triton", device, causal)``, so a forward or backward does no host synchronisation and no
per-call conversion: the analysis (which synchronises) runs at the first call only.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ...block_mask import BlockMask


@dataclass(frozen=True)
class TritonPlan:
    q_major: torch.Tensor  # [n_qb, 2 + mf + 2 mp] int32: per query block its key blocks
    q_mf: int
    q_mp: int
    k_major: torch.Tensor  # [n_kb, 2 + mf' + 2 mp'] int32: per key block its query blocks
    k_mf: int
    k_mp: int
    tiles: torch.Tensor  # [max(1, n_tiles), bq, bk] int8 partial-tile masks
    n_full: int  # visited (query block, key block) pairs running unmasked
    n_partial: int  # ... running the masked body


def _pack(
    group: torch.Tensor, member: torch.Tensor, tile: torch.Tensor, is_full: torch.Tensor, n_groups: int, n_members: int
):
    """Pack (group, member) pairs into the per-group rows described in the module docstring.

    Within a group, full members come first in ascending order, then partial ones ascending.
    Returns ``(table [n_groups, 2 + mf + 2 mp] int32, mf, mp)``.
    """
    part = ~is_full
    seg = group * 2 + part.long()  # (group, kind) segment of each pair
    order = torch.argsort(seg * max(1, n_members) + member)
    group, member, tile, part, seg = group[order], member[order], tile[order], part[order], seg[order]
    seg_counts = torch.bincount(seg, minlength=2 * n_groups)
    counts = seg_counts.view(n_groups, 2)  # (n_groups, [full, partial])
    mf = max(1, int(counts[:, 0].max()) if n_groups else 1)
    mp = max(1, int(counts[:, 1].max()) if n_groups else 1)
    slot = torch.arange(group.numel()) - (torch.cumsum(seg_counts, 0) - seg_counts)[seg]
    table = torch.zeros(n_groups, 2 + mf + 2 * mp, dtype=torch.int32)
    table[:, :2] = counts.to(torch.int32)
    col = torch.where(part, 2 + mf + slot, 2 + slot)
    table[group, col] = member.to(torch.int32)
    table[group[part], (2 + mf + mp + slot)[part]] = tile[part].to(torch.int32)
    return table, mf, mp


def build_plan(bm: BlockMask, causal: bool, device) -> TritonPlan:
    """Classify and pack the visited blocks of ``bm`` (see the module docstring)."""
    counts, idx, tile_id = bm.kv_counts.cpu().long(), bm.kv_indices.cpu().long(), bm.kv_tile.cpu().long()
    nqb, max_kb = idx.shape
    nkb = bm.n_k_blocks
    bq, bk, off = bm.block_q, bm.block_k, bm.k_len - bm.q_len  # queries are the last Lq keys
    valid = torch.arange(max_kb)[None, :] < counts[:, None]
    qb = torch.arange(nqb)[:, None].expand(nqb, max_kb)[valid]
    kb, tile = idx[valid], tile_id[valid]
    first_key, last_key = kb * bk, (kb + 1) * bk - 1
    first_row, last_row = qb * bq, (qb + 1) * bq - 1
    keep = torch.ones_like(kb, dtype=torch.bool)
    cut = torch.zeros_like(keep)
    if causal:
        keep = first_key <= last_row + off  # some key at or left of some row's diagonal
        cut = last_key > first_row + off  # some key right of some row's diagonal
    full = (tile < 0) & ~cut & (last_key < bm.k_len)
    qb, kb, tile, full = qb[keep], kb[keep], tile[keep], full[keep]
    q_major, q_mf, q_mp = _pack(qb, kb, tile, full, nqb, nkb)
    k_major, k_mf, k_mp = _pack(kb, qb, tile, full, nkb, nqb)
    tiles = bm.tiles.to(torch.int8) if bm.tiles.shape[0] else torch.zeros(1, bq, bk, dtype=torch.int8)
    dev = torch.device(device)
    return TritonPlan(
        q_major.to(dev),
        q_mf,
        q_mp,
        k_major.to(dev),
        k_mf,
        k_mp,
        tiles.contiguous().to(dev),
        int(full.sum()),
        int((~full).sum()),
    )


def triton_plan(bm: BlockMask, causal: bool, device) -> TritonPlan:
    """The memoised plan of ``bm`` for ``device`` and ``causal`` (built at the first call)."""
    key = ("triton", str(torch.device(device)), bool(causal))
    plan = bm.plans.get(key)
    if plan is None:
        plan = bm.plans[key] = build_plan(bm, causal, device)
    return plan
