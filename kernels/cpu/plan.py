"""Execution plan of a :class:`BlockMask` on the CPU path: which query blocks run together, and how.

Query blocks are grouped by how many key blocks they visit, and every group gets one of four kinds,
each run by one function of ``kernels/cpu/attention.py``:

* ``"strips"`` (any layout): the group's key/value blocks are gathered into a contiguous
  ``(R, c * bk)`` strip per query block and one batched matmul scores exactly the visited tiles.
* ``"sliding"``: with square tiles, a group whose row ``r`` visits key blocks
  ``key_start + r .. key_start + r + c - 1`` sees the same offsets ``j - i`` in every row, so rows with
  equal element masks are one attention window slid along the sequence (a sliding window's bulk).
  Such a run is one fused attention call over overlapping strided views of K and V: the shared mask is
  a ``(1, bq, c * bk)`` window.
* ``"stacked"``: the rows before the longest sliding run (a window cut by the sequence start) visit
  a handful of key blocks; they are merged into one group whose rows all read the same key range and
  run as one fused call against that range, with a ``(R, bq, K)`` dense mask, instead of one small
  call per count.
* ``"gathered"``: strips whose keys are gathered at a finer grain than the tiles, ``bk`` keys a
  sub-block, keeping only the sub-blocks the pattern uses (``kernels/cpu/compact.py``: BigBird's
  random blocks, Longformer's global keys); run as one fused call over the gathered keys.
* ``"empty"``: query blocks that visit no key block output zeros.

The fused kinds fall back to strips for the arguments the fused kernel cannot take (softcap,
relative tables, a row emptied by causality).

The plan depends only on the layout, so it is memoised in ``bm.plans`` (per device and lengths);
the fused kinds' additive masks are memoised in their group (per dtype, causality and head group).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..block_mask import BlockMask
from .compact import compact

STRIPS, SLIDING, STACKED, GATHERED, EMPTY = "strips", "sliding", "stacked", "gathered", "empty"

# Half-block windows need at least this many queries per half: below it, twice as many (smaller)
# attention problems per call cost the fused kernel more in per-problem overhead than the bq / 2
# keys each query no longer reads save.
_HALF_MIN_QUERIES = 16
# The stacked prefix computes its rows against one common key range; it is kept only while that
# range holds at most twice the tiles the rows visit (plus one tile of slack per row): beyond
# that, the wasted scores cost more than the one small call per count that stacking saves.
_STACK_WASTE = 2


@dataclass
class Group:
    kind: str  # STRIPS, SLIDING, STACKED, GATHERED or EMPTY: which runner computes it
    bq: int  # queries per block
    rows: torch.Tensor  # (R,) query blocks of this group
    idx: torch.Tensor  # (R, c) key blocks they visit
    masked: torch.Tensor | None  # (R, 1, bq, c*bk) True = disallowed; None when every tile is full
    rel_key: torch.Tensor  # (R, 1, c*bk) j - (first query of the row's block); see rel()
    has_empty_rows: bool  # some query row has no allowed key (softmax gives NaN there)
    row_start: int | None  # rows are row_start, row_start+1, ...: slice instead of gather
    key_start: int | None  # row r visits key blocks key_start+r .. key_start+r+c-1: a strided view
    # SLIDING: the (1, bq, c*bk) mask shared by the run; STACKED: (R, bq, K) over key blocks
    # idx[0]; GATHERED: (R, bq, c*bk), each row's own; None for the other kinds.
    window: torch.Tensor | None = None
    # SLIDING only, (1, bq/2, c*bk - bq/2): the window of half a query block, when both halves of
    # the block see the same window shifted by bq/2 (a sliding window): half blocks read fewer keys.
    half: torch.Tensor | None = None
    # The fused kinds' additive masks, by (dtype, causal, heads per K/V head): filled on first use.
    masks: dict = field(default_factory=dict, repr=False)
    # Keys per entry of ``idx``: None for the layout's tiles (``block_k``); the sub-block width for a
    # group made by ``compact`` (GATHERED, or STRIPS when one of its query rows allows no key).
    bk: int | None = None

    def rel(self, r0: int = 0, r1: int | None = None, dtype=None) -> torch.Tensor:
        """``j - i_abs`` of every (query, key) pair of rows ``r0:r1``: (R', bq, c*bk), as integers
        or in ``dtype``. Made on use from one row of key offsets per query block, so the memoised
        plan stays O(R c bk), not O(R bq c bk) (a copy of the score matrix for a dense layout)."""
        if dtype is None:
            return self.rel_key[r0:r1] - self._queries()
        return self.rel_key[r0:r1].to(dtype) - self._queries().to(dtype)

    def future(self, r0: int = 0, r1: int | None = None) -> torch.Tensor:
        """``rel(r0, r1) > 0`` (the pairs causality removes), without the integer tensor."""
        return self.rel_key[r0:r1] > self._queries()

    def _queries(self) -> torch.Tensor:
        return torch.arange(self.bq, device=self.rel_key.device)[:, None]  # (bq, 1)


def _consecutive_start(x: torch.Tensor) -> int | None:
    if x.numel() and bool((x == x[0] + torch.arange(x.numel(), device=x.device)).all()):
        return int(x[0])
    return None


def plan(bm: BlockMask, lq: int, lk: int, device, gather: bool = True) -> tuple:
    """``(groups, inverse)``: the groups, and the permutation back to query-block order (or None).
    ``gather=False``: no GATHERED group, every ``idx`` in the layout's tiles (the pooled maps' walk).

    Planned once per layout, device and lengths, then read from ``bm.plans``."""
    key = ("cpu", str(torch.device(device)), lq, lk) + (() if gather else ("tiles",))
    found = bm.plans.get(key)
    if found is None:  # compute, then keep whichever plan a concurrent caller stored first
        found = bm.plans.setdefault(key, build_plan(bm, lq, lk, device, gather))
    return found


def build_plan(bm: BlockMask, lq: int, lk: int, device, gather: bool = True) -> tuple:
    """The plan of ``bm`` (no memo): ``(groups, inverse)`` as :func:`plan` returns it."""
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
        grp = Group(
            EMPTY if c == 0 else STRIPS,
            bq,
            rows,
            idx,
            masked,
            _rel(rows, idx, bq, bk, lq, lk),
            empty,
            _consecutive_start(rows),
            _consecutive_start(idx[:, 0]) if contiguous else None,
        )
        # Runs slide by one key block per query block: a window moves with its queries only when
        # both blocks have the same size.
        groups.extend(_window_runs(grp) if bq == bk else [grp])
    groups = _stack_prefix(groups, bq, bk, lq, lk)
    if gather:
        groups = _gathered(groups, bq, bk, lq, lk)
    inverse = torch.argsort(torch.cat([g.rows for g in groups]))
    identity = bool((inverse == torch.arange(inverse.numel(), device=device)).all())
    return groups, None if identity else inverse


def _gathered(groups: list, bq: int, bk: int, lq: int, lk: int) -> list:
    """The strips groups re-gathered by the sub-blocks they use where it pays (``compact``)."""

    def make(rows, idx, masked, s, empty):
        allowed = (
            None
            if empty
            else (
                torch.ones(rows.numel(), bq, idx.shape[1] * s, dtype=torch.bool, device=rows.device)
                if masked is None
                else ~masked[:, 0]
            )
        )
        return Group(
            STRIPS if empty else GATHERED,
            bq,
            rows,
            idx,
            masked,
            _rel(rows, idx, bq, s, lq, lk),
            empty,
            _consecutive_start(rows),
            None,
            allowed,
            bk=s,
        )

    return compact(groups, bk, STRIPS, make)


def _rel(rows, idx, bq, bk, lq, lk):
    """``j - i_abs`` of the first query of each row's block, for every key of its strip: (R, 1, c*bk)."""
    R, c = idx.shape
    i0 = rows[:, None, None] * bq + (lk - lq)  # (R, 1, 1)
    j = (idx[:, :, None] * bk + torch.arange(bk, device=rows.device)).reshape(R, 1, c * bk)
    return j - i0


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
        # Every row of a run has the same element mask and, as a window slides by one block of
        # bq = bk keys per block of queries, the same j - i: the plan (memoised for the layout's
        # lifetime) keeps one row of each, broadcast to the run's rows.
        masked = None if grp.masked is None else _one_row(grp.masked[a : a + 1], b - a)
        rel_key = _one_row(grp.rel_key[a : a + 1], b - a)
        allowed = (
            torch.ones(grp.bq, rel_key.shape[2], dtype=torch.bool, device=grp.rows.device)
            if masked is None
            else ~masked[0, 0]
        )
        empty = not bool(allowed.any(-1).all())
        # A window that leaves a query row empty stays strips (they zero such rows).
        runs.append(
            Group(
                STRIPS if empty else SLIDING,
                grp.bq,
                grp.rows[a:b],
                grp.idx[a:b],
                masked,
                rel_key,
                empty,
                grp.row_start + a,
                grp.key_start + a,
                None if empty else allowed[None],
                half=None if empty else _half_window(allowed),
            )
        )
    return runs


def _one_row(x: torch.Tensor, n: int) -> torch.Tensor:
    """``x (1, ...)`` as ``(n, ...)`` without storing ``n`` copies (nor the tensor it was cut from)."""
    return x.clone().expand(n, *x.shape[1:])


def _half_window(allowed: torch.Tensor) -> torch.Tensor | None:
    """The shared window of both halves of a query block, or None if they differ."""
    bq, K = allowed.shape
    s = bq // 2
    if bq % 2 or s < _HALF_MIN_QUERIES:
        return None
    first, second = allowed[:s], allowed[s:]
    if first[:, K - s :].any() or second[:, :s].any() or not torch.equal(first[:, : K - s], second[:, s:]):
        return None
    return first[None, :, : K - s]


def _stack_prefix(groups: list, bq: int, bk: int, lq: int, lk: int) -> list:
    """Merge the groups of the rows before the longest sliding run into one stacked group (or not)."""
    # A one-row "run" is not a window's bulk: nothing to stack in front of it.
    runs = [g for g in groups if g.kind == SLIDING and g.rows.numel() > 1]
    if not runs:
        return groups
    p = max(runs, key=lambda g: g.rows.numel()).row_start
    before = [g for g in groups if bool((g.rows < p).any())]
    # One group before the run is already one call: stacking it saves nothing.
    if len(before) < 2 or any(bool((g.rows >= p).any()) or g.idx.shape[1] == 0 for g in before):
        return groups
    lo = min(int(g.idx.min()) for g in before)
    n = max(int(g.idx.max()) for g in before) - lo + 1
    visited = sum(g.idx.numel() for g in before)
    if p * n > _STACK_WASTE * visited + p:  # the common key range would be mostly wasted work
        return groups
    device = groups[0].rows.device
    allowed = torch.zeros(p, bq, n, bk, dtype=torch.bool, device=device)
    for g in before:
        R, c = g.idx.shape
        a = (
            torch.ones(R, bq, c, bk, dtype=torch.bool, device=device)
            if g.masked is None
            else ~g.masked[:, 0].view(R, bq, c, bk)
        )
        for s in range(c):
            allowed[g.rows, :, g.idx[:, s] - lo] = a[:, :, s]
    allowed = allowed.view(p, bq, n * bk)
    if not bool(allowed.any(-1).all()):
        return groups
    rows = torch.arange(p, device=device)
    idx = (lo + torch.arange(n, device=device)).expand(p, n)
    stacked = Group(STACKED, bq, rows, idx, ~allowed[:, None], _rel(rows, idx, bq, bk, lq, lk), False, 0, None, allowed)
    return [stacked] + [g for g in groups if not any(g is b for b in before)]
