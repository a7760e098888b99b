"""Gathered groups of the CPU plan at a finer key grain than the layout's tiles.

A layout's tile (``block_k`` keys, 64 for the models' patterns) is the grain at which the strips of
``kernels/cpu/plan.py`` gather keys, so a query block that needs a few keys scattered over many
tiles pays for every key of each tile. BigBird is the case: each random block is 16 keys seen by 16
query rows, yet it costs a whole ``64 x 64`` tile, four times its keys, and a default BigBird row
visits about ten tiles for some 100 keys. Here the rows of a gathered group are re-gathered from
sub-blocks of ``s`` keys (``s`` dividing ``block_k``): each query block keeps only the sub-blocks
its element mask touches, so the strip holds the keys the pattern allows at the pattern's own grain,
and the work follows them. The element mask of every kept sub-block is the layout's own, so the
result is exact; only sub-blocks with no allowed pair in the whole query block are dropped.

Rows are regrouped by their number of kept sub-blocks (a strip is one batched matmul only when its
rows have equal lengths). A group is left as it is when compaction would keep most of its keys
(``_KEEP``): a window's rows, a dense layout's partial last column.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

# Compact a group only when the sub-blocks keep at most this fraction of its tiles' keys: below it,
# the scores saved outweigh the gather's copy and the extra groups.
_KEEP = 0.75
# The finest grain tried: narrower sub-blocks make the gather a copy of rows too short to stream.
_MIN_SUB = 8


def sub_block(allowed_cols: torch.Tensor, bk: int) -> tuple[int, torch.Tensor]:
    """``(s, used)``: the sub-block width that keeps the fewest keys (the widest among those within
    10% of the fewest: fewer, longer rows to gather) and ``used (R, c * bk / s)``, the sub-blocks
    holding an allowed key. ``allowed_cols (R, c * bk)``: keys allowed to some row of each block."""
    R, K = allowed_cols.shape
    widths = [s for s in (bk, bk // 2, bk // 4, bk // 8) if s >= _MIN_SUB and bk % s == 0] or [bk]
    found = [(s, allowed_cols.view(R, K // s, s).any(-1)) for s in widths]
    kept = [int(used.sum()) * s for s, used in found]
    fewest = min(kept)
    return next((s, used) for (s, used), n in zip(found, kept) if n <= 1.1 * fewest)


def compact(groups: list, bk: int, kind: str, make: Callable) -> list:
    """``groups`` with those of ``kind`` (tiles of ``bk`` keys, partial ones masked) re-gathered at a
    finer grain where it pays: their rows pooled by (sub-block width, kept sub-blocks) across groups,
    each pool made a group by ``make(rows, idx, masked, s, empty)``; the other groups as they are."""
    out, pools = [], {}
    for grp in groups:
        parts = _parts(grp, bk) if grp.kind == kind else None
        if parts is None:
            out.append(grp)
            continue
        for s, rows, idx, kept in parts:
            pools.setdefault((s, idx.shape[1]), []).append((rows, idx, kept))
    for (s, _), parts in pools.items():
        rows, idx, kept = (torch.cat(x) for x in zip(*parts))
        empty = not bool(kept.any(-1).all())
        out.append(make(rows, idx, None if bool(kept.all()) else ~kept, s, empty))
    return out


def _parts(grp, bk: int):
    """``[(s, rows, idx (R', n), kept (R', 1, bq, n s))]``: the group's rows by their number ``n`` of
    kept sub-blocks, with those sub-blocks' ids and element masks; None when not worth it."""
    if grp.masked is None:  # every tile full: every key is used
        return None
    R, c = grp.idx.shape
    bq = grp.bq
    allowed = ~grp.masked[:, 0]  # (R, bq, c*bk)
    s, used = sub_block(allowed.any(1), bk)
    if s == bk or int(used.sum()) * s > _KEEP * R * c * bk:
        return None
    per = bk // s
    # ids of every sub-block of each row's tiles, in strip order: (R, c*per)
    sub_ids = (grp.idx[:, :, None] * per + torch.arange(per, device=grp.idx.device)).reshape(R, c * per)
    counts = used.sum(1)
    parts = []
    for n in torch.unique(counts).tolist():
        sel = (counts == n).nonzero().squeeze(1)
        m = sel.numel()
        slots = used[sel].nonzero()[:, 1].view(m, n)  # kept slots of each row, ascending
        kept = allowed[sel].view(m, bq, c * per, s).gather(2, slots[:, None, :, None].expand(m, bq, n, s))
        parts.append((s, grp.rows[sel], sub_ids[sel].gather(1, slots), kept.reshape(m, 1, bq, n * s)))
    return parts
