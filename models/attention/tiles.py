"""Exact block statistics of a boolean rule, in time proportional to the tiles it may touch.

``tile_stats`` is the engine under every section-1 layout (``layout.py``) and under BigBird's
random-block draw (``patterns.py``), so it depends on nothing but torch. Each rule comes with a
*tile bound*: from a tile's row range ``[i0, i1]`` and column range ``[j0, j1]`` it says whether
the tile may hold an allowed pair (``maybe``, an over-approximation) and whether every pair is
surely allowed (``full``, an under-approximation). Only tiles that are ``maybe`` but not surely
``full`` are evaluated element by element with the rule itself, so the result is exact whatever
the bounds' slack, and long sequences never touch the dense ``L x L`` matrix.
"""

from __future__ import annotations

import torch


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
        qb, kb = cand[a : a + batch_tiles, 0], cand[a : a + batch_tiles, 1]
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
