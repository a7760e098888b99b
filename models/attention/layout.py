"""A pattern record turned into masks: dense rows for display, an exact block layout for the kernels.

``full_rule(cfg, L)`` composes the chosen ``Pattern``'s element rule with its block-level additions
(e.g. BigBird's random blocks), for any pattern, from the record alone. ``pattern_rows(cfg, L)``
evaluates it (ANDed with ``j <= i`` when causal) a band of rows at a time, so the block-sparse layout
of a long sequence never needs the dense ``L x L`` matrix; ``pattern_mask(cfg, L)`` is the dense form
for display and tests; ``pattern_layout`` the ``kernels.BlockMask`` over the visited tiles (keys
before the segment, memory, are always visible). Results are memoised because the explorer asks
for the same pattern at every redraw (tensors are returned read-only by convention: callers never
modify them).
"""

from __future__ import annotations

from functools import lru_cache

import torch

import kernels

from ..errors import ConfigError
from .patterns import PATTERNS
from .tiles import tile_stats


class ParamView:
    """The fields of a config a pattern reads (rebuilt from a memo key)."""

    def __init__(self, d):
        self.__dict__.update(d)


def pattern_key(cfg) -> tuple:
    spec = PATTERNS[cfg.attention]
    defaults = {r.name: r.default for r in spec.param_records}  # a partial view (poolingformer's band) lacks some
    return tuple((p, getattr(cfg, p, defaults.get(p))) for p in spec.params)


def _block_bounds(bounds, table, bs):
    """Tile bounds widened / tightened by a block table (2-D prefix sums over its blocks)."""
    cum = torch.zeros(table.shape[0] + 1, table.shape[1] + 1, dtype=torch.long)
    cum[1:, 1:] = table.long().cumsum(0).cumsum(1)

    def widened(i0, i1, j0, j1):
        maybe, full = bounds(i0, i1, j0, j1)
        a0, a1, b0, b1 = i0 // bs, i1 // bs + 1, j0 // bs, j1 // bs + 1
        count = cum[a1, b1] - cum[a0, b1] - cum[a1, b0] + cum[a0, b0]
        return maybe | (count > 0), full | (count == (a1 - a0) * (b1 - b0))

    return widened


def _with_sinks(rule, bounds, n: int):
    """The rule and bounds with the first ``n`` keys always visible (attention sinks)."""

    def sink_rule(i, j):
        return rule(i, j) | (j < n)

    def sink_bounds(i0, i1, j0, j1):
        maybe, full = bounds(i0, i1, j0, j1)
        return maybe | (j0 < n), full | (j1 < n)

    return sink_rule, sink_bounds


def full_rule(cfg, L: int):
    """``(rule(i, j), bounds(i0, i1, j0, j1))`` of ``cfg``'s pattern over ``L`` positions, before the
    causal AND, attention sinks (the first ``n_sinks`` keys, StreamingLLM) and block additions included."""
    spec = PATTERNS[cfg.attention]
    rule = lambda i, j: spec.rule(i, j, cfg)  # noqa: E731
    bounds = lambda *r: spec.bounds(cfg, *r)  # noqa: E731
    sinks = getattr(cfg, "n_sinks", 0) if "n_sinks" in spec.params else 0
    if sinks:
        rule, bounds = _with_sinks(rule, bounds, sinks)
    extra = spec.blocks(cfg, bool(cfg.causal), L) if spec.blocks is not None else None
    if extra is None:
        return rule, bounds
    table, bs = extra
    return (lambda i, j: rule(i, j) | table[i // bs, j // bs]), _block_bounds(bounds, table, bs)


def pattern_rows(cfg, L: int):
    """``rows(a, b) -> bool [b - a, L]``: rows ``a .. b-1`` of the pattern of ``L`` positions."""
    rule, _ = full_rule(cfg, L)
    j = torch.arange(L)[None, :]

    def rows(a: int, b: int) -> torch.Tensor:
        i = torch.arange(a, b)[:, None]
        m = rule(i, j)
        if cfg.causal:
            m = m & (j <= i)
        return m

    return rows


@lru_cache(maxsize=32)
def _pattern_cached(attention: str, params: tuple, causal: bool, L: int) -> torch.Tensor:
    cfg = ParamView({**dict(params), "attention": attention, "causal": causal})
    return pattern_rows(cfg, L)(0, L)


def pattern_mask(cfg, L: int) -> torch.Tensor:
    """Boolean pattern ``[L, L]`` of ``cfg.attention`` (section 1), ANDed with ``j <= i`` when causal."""
    if cfg.attention not in PATTERNS:
        raise ConfigError("attention", cfg.attention, f"a structured pattern for pattern_mask: {list(PATTERNS)}")
    return _pattern_cached(cfg.attention, pattern_key(cfg), bool(cfg.causal), int(L))


def pattern_layout(cfg, lq: int, prefix: int = 0, block: int = 64) -> kernels.BlockMask:
    """The exact ``BlockMask`` of ``cfg``'s pattern over ``lq`` queries and ``prefix + lq`` keys."""
    rule, bounds = full_rule(cfg, lq)
    visited, full, tiles = tile_stats(rule, bounds, lq, lq, block, block, bool(cfg.causal), prefix)
    return kernels.block_mask_from_tiles(lq, prefix + lq, block, block, visited, full, tiles)
