"""Block-sparse layout of a section-1 pattern, built in time proportional to the visited tiles.

Each rule gets a *tile bound*: from a tile's row range ``[i0, i1]`` and column range ``[j0, j1]``
it says whether the tile may hold an allowed pair (``maybe``, an over-approximation) and whether
every pair is surely allowed (``full``, an under-approximation). For rules of ``d = i - j`` these
are exact, because a tile's differences form the whole range ``[i0 - j1, i1 - j0]``. Only tiles
that are ``maybe`` but not surely ``full`` are evaluated element by element with the rule itself,
so the layout is exact whatever the bounds' slack, and long sequences never touch the dense
``L x L`` matrix. Keys before the segment (memory, ``prefix``) are always visible.
"""
from __future__ import annotations

import torch

import kernels

from .patterns import RULES


def _diff_range(i0, i1, j0, j1):
    return i0 - j1, i1 - j0


def _sliding(cfg, i0, i1, j0, j1, w=None):
    w = cfg.window if w is None else w
    lo, hi = _diff_range(i0, i1, j0, j1)
    return (lo < w) & (hi > -w), (lo > -w) & (hi < w)


def _dilated(cfg, i0, i1, j0, j1):
    maybe, full = _sliding(cfg, i0, i1, j0, j1, cfg.window * cfg.dilation)
    return maybe, full & (cfg.dilation == 1)


def _strided(cfg, i0, i1, j0, j1):
    s = cfg.stride
    lo, hi = _diff_range(i0, i1, j0, j1)
    has_multiple = torch.div(hi, s, rounding_mode="floor") * s >= lo
    return has_multiple | ((lo <= s) & (hi >= -s)), ((lo >= -s) & (hi <= s)) | (s == 1)


def _fixed(cfg, i0, i1, j0, j1):
    s, n = cfg.stride, cfg.n_summary
    same = (i0 // s <= j1 // s) & (j0 // s <= i1 // s)
    summary = (j1 - j0 + 1 >= s) | (j0 // s != j1 // s) | (j1 % s >= s - n)
    full = ((i0 // s == i1 // s) & (j0 // s == j1 // s) & (i0 // s == j0 // s)) | (n == s) | \
           ((j0 % s >= s - n) & (j0 // s == j1 // s))
    return same | summary, full


def _block_local(cfg, i0, i1, j0, j1):
    b = cfg.block_size
    maybe = (i0 // b <= j1 // b) & (j0 // b <= i1 // b)
    return maybe, (i0 // b == i1 // b) & (j0 // b == j1 // b) & (i0 // b == j0 // b)


def _longformer(cfg, i0, i1, j0, j1):
    maybe, full = _sliding(cfg, i0, i1, j0, j1)
    g = cfg.n_global
    return maybe | (i0 < g) | (j0 < g), full | (i1 < g) | (j1 < g)


def _full(cfg, i0, i1, j0, j1):
    ones = torch.ones_like(i0 - j0, dtype=torch.bool)
    return ones, ones


BOUNDS = {"full": _full, "sliding_window": _sliding, "dilated_window": _dilated, "strided": _strided,
          "fixed": _fixed, "block_local": _block_local, "longformer": _longformer, "bigbird": _longformer}


def tile_stats(rule, bounds, lq, lk, bq, bk, causal, prefix=0, outside=False, batch_tiles=2048):
    """Exact ``(visited, full [n_qb, n_kb], tiles [n_partial, bq, bk])`` of ``rule(i, j)`` (ANDed
    with ``j <= i`` when causal) over ``lq`` queries and ``prefix + lk`` keys, the prefix always
    visible; ``bounds(i0, i1, j0, j1) -> (maybe, full)`` prunes the tiles evaluated. Cells past the
    end of the sequence count as ``outside``."""
    nq, nk = -(-lq // bq), -(-(prefix + lk) // bk)
    i0 = torch.arange(nq)[:, None] * bq
    i1 = torch.clamp(i0 + bq - 1, max=lq - 1)
    j0 = torch.arange(nk)[None, :] * bk - prefix  # segment coordinates; negative = memory
    j1 = torch.clamp(j0 + bk - 1, max=lk - 1)
    maybe, full = bounds(i0, i1, j0.clamp(min=0), j1.clamp(min=0))
    in_memory = (j1 < 0).expand(nq, nk)
    straddle = ((j0 < 0) & (j1 >= 0)).expand(nq, nk)
    maybe = maybe.expand(nq, nk) | straddle | in_memory
    full = (full.expand(nq, nk) & ~straddle) | in_memory
    if causal:
        maybe = maybe & (j0 <= i1)
        full = full & (j1 <= i0)
    if not outside:
        full = full & (i0 + bq <= lq) & (j0 + bk <= lk)  # tiles reaching past the end are partial
    full = full & maybe
    cand = (maybe & ~full).nonzero()  # (n, 2), row-major
    visited = full.clone()
    tiles = []
    ar_q, ar_k = torch.arange(bq, dtype=torch.int32), torch.arange(bk, dtype=torch.int32)
    for a in range(0, cand.shape[0], batch_tiles):
        qb, kb = cand[a:a + batch_tiles, 0], cand[a:a + batch_tiles, 1]
        qb32, kb32 = qb.to(torch.int32), kb.to(torch.int32)
        ii = (qb32[:, None] * bq + ar_q)[:, :, None]  # (n, bq, 1)
        jj = (kb32[:, None] * bk + ar_k - prefix)[:, None, :]  # (n, 1, bk)
        m = rule(ii.clamp(max=lq - 1), jj.clamp(0, lk - 1))
        if causal:
            m = m & (jj <= ii)
        m = m | (jj < 0)
        beyond = (ii >= lq) | (jj >= lk)
        m = (m | beyond) if outside else (m & ~beyond)
        any_, all_ = m.any(dim=(1, 2)), m.all(dim=(1, 2))
        visited[qb, kb] = any_
        full[qb, kb] = all_
        tiles.append(m[any_ & ~all_])
    tiles = torch.cat(tiles) if tiles else torch.zeros(0, bq, bk, dtype=torch.bool)
    return visited, full, tiles


def bigbird_table(cfg, causal: bool, L: int) -> torch.Tensor:
    """``[nb, nb]`` random key blocks per query block of ``block_size``: ``n_random`` blocks drawn
    without replacement (seeded) from those the query block does not already fully see in the
    window + global pattern; causal draws only from blocks at or before the query block (the
    masked future counts as seen, and so do positions past the end)."""
    bs = cfg.block_size
    nb = -(-L // bs)
    lf = lambda i, j: RULES["longformer"](i, j, cfg) | ((j > i) if causal else False)  # noqa: E731

    def seen_bounds(i0, i1, j0, j1):
        # Only "fully seen" is used, so ``maybe`` here bounds fullness: a tile can be fully seen only
        # through the window, the global rows / columns, or (causal) the masked future.
        maybe, full = _longformer(cfg, i0, i1, j0, j1)
        if causal:
            maybe, full = maybe | (j1 > i0), full | (j0 > i1)
        return maybe, full

    _, fully, _ = tile_stats(lf, seen_bounds, L, L, bs, bs, causal=False, outside=True)
    candidate = ~fully
    if causal:
        candidate &= torch.arange(nb)[None, :] <= torch.arange(nb)[:, None]
    gen = torch.Generator().manual_seed(cfg.seed)
    score = torch.rand(nb, nb, generator=gen).masked_fill(~candidate, -1.0)
    top = score.topk(min(cfg.n_random, nb), dim=1)
    chosen = torch.zeros(nb, nb, dtype=torch.bool)
    chosen.scatter_(1, top.indices, top.values >= 0)  # a row with fewer candidates takes them all
    return chosen


def _bigbird_bounds(cfg, table):
    """Window + global bounds, widened / tightened by the random-block table (2-D prefix sums)."""
    bs = cfg.block_size
    cum = torch.zeros(table.shape[0] + 1, table.shape[1] + 1, dtype=torch.long)
    cum[1:, 1:] = table.long().cumsum(0).cumsum(1)

    def bounds(i0, i1, j0, j1):
        maybe, full = _longformer(cfg, i0, i1, j0, j1)
        a0, a1, b0, b1 = i0 // bs, i1 // bs + 1, j0 // bs, j1 // bs + 1
        count = cum[a1, b1] - cum[a0, b1] - cum[a1, b0] + cum[a0, b0]
        return maybe | (count > 0), full | (count == (a1 - a0) * (b1 - b0))

    return bounds


def full_rule(cfg, L: int):
    """``rule(i, j) -> bool`` of ``cfg``'s pattern (before the causal AND), random blocks included."""
    base = RULES[cfg.attention]
    if cfg.attention == "bigbird" and cfg.n_random > 0:
        table, bs = bigbird_table(cfg, bool(cfg.causal), L), cfg.block_size
        return lambda i, j: base(i, j, cfg) | table[i // bs, j // bs], _bigbird_bounds(cfg, table)
    return (lambda i, j: base(i, j, cfg)), (lambda *r: BOUNDS[cfg.attention](cfg, *r))


def pattern_layout(cfg, lq: int, prefix: int = 0, block: int = 64) -> kernels.BlockMask:
    """The exact ``BlockMask`` of ``cfg``'s pattern over ``lq`` queries and ``prefix + lq`` keys."""
    rule, bounds = full_rule(cfg, lq)
    visited, full, tiles = tile_stats(rule, bounds, lq, lq, block, block, bool(cfg.causal), prefix)
    return kernels.block_mask_from_tiles(lq, prefix + lq, block, block, visited, full, tiles)
