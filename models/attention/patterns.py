"""Structured sparse attention patterns (CATALOGUE.md section 1), one small pure rule each.

Each rule maps index tensors ``i`` (queries, column vector) and ``j`` (keys, row vector) to a
boolean ``M[i, j]`` (True = may attend), attention-gym style, so patterns compose with ``&`` / ``|``.
References: Child et al. 2019 (Sparse Transformer: strided, fixed), Parmar et al. 2018 (Image
Transformer local blocks), Beltagy et al. 2020 (Longformer: sliding, dilated, global),
Zaheer et al. 2020 (BigBird: window + global + random blocks).

``pattern_rows(cfg, L)`` evaluates the chosen rule (ANDed with ``j <= i`` when causal) a band of
rows at a time, so the block-sparse layout of a long sequence never needs the dense ``L x L``
matrix; ``pattern_mask(cfg, L)`` is the dense form for display and tests. Results are memoised
because the explorer asks for the same pattern at every redraw (tensors are returned read-only
by convention: callers never modify them).
"""
from __future__ import annotations

from functools import lru_cache

import torch


def full(i, j, cfg):
    return torch.ones(i.shape[0], j.shape[1], dtype=torch.bool)


def sliding_window(i, j, cfg):
    return (i - j).abs() < cfg.window


def dilated_window(i, j, cfg):
    d = i - j
    return (d.abs() < cfg.window * cfg.dilation) & (d % cfg.dilation == 0)


def strided(i, j, cfg):
    d = i - j
    return (d.abs() <= cfg.stride) | (d % cfg.stride == 0)


def fixed(i, j, cfg):
    return (i // cfg.stride == j // cfg.stride) | (j % cfg.stride >= cfg.stride - cfg.n_summary)


def block_local(i, j, cfg):
    return i // cfg.block_size == j // cfg.block_size


def longformer(i, j, cfg):
    return sliding_window(i, j, cfg) | (i < cfg.n_global) | (j < cfg.n_global)


def bigbird(i, j, cfg):
    """The window + global part; random blocks are added by :func:`_bigbird_table` (block-level)."""
    return longformer(i, j, cfg)


RULES = {
    "full": full, "sliding_window": sliding_window, "dilated_window": dilated_window,
    "strided": strided, "fixed": fixed, "block_local": block_local, "longformer": longformer,
    "bigbird": bigbird,
}

# Config fields each rule reads (the memo key, and the app's parameter controls).
PARAMS = {
    "full": (), "sliding_window": ("window",), "dilated_window": ("window", "dilation"),
    "strided": ("stride",), "fixed": ("stride", "n_summary"), "block_local": ("block_size",),
    "longformer": ("window", "n_global"),
    "bigbird": ("window", "n_global", "n_random", "block_size", "seed"),
}


def _bigbird_table(cfg, causal: bool, L: int, chunk: int = 1024) -> torch.Tensor:
    """``[nb, nb]`` random key blocks per query block of ``block_size``: ``n_random`` blocks drawn
    without replacement (seeded) from those the query block does not already fully see in the
    window + global pattern; causal draws only from blocks at or before the query block."""
    bs = cfg.block_size
    nb = -(-L // bs)
    j = torch.arange(nb * bs, dtype=torch.int32)[None, :]
    step = max(1, chunk // bs) * bs
    fully = []
    for a in range(0, nb * bs, step):
        i = torch.arange(a, min(nb * bs, a + step), dtype=torch.int32)[:, None]
        seen = longformer(i, j, cfg) | (i >= L) | (j >= L)  # positions past L do not exist
        if causal:  # the future is masked anyway: judge "fully seen" on the allowed part
            seen |= j > i
        fully.append(seen.view(-1, bs, nb, bs).all(dim=3).all(dim=1))
    candidate = ~torch.cat(fully)
    if causal:
        candidate &= torch.arange(nb)[None, :] <= torch.arange(nb)[:, None]
    gen = torch.Generator().manual_seed(cfg.seed)
    score = torch.rand(nb, nb, generator=gen).masked_fill(~candidate, -1.0)
    top = score.topk(min(cfg.n_random, nb), dim=1)
    chosen = torch.zeros(nb, nb, dtype=torch.bool)
    chosen.scatter_(1, top.indices, top.values >= 0)  # a row with fewer candidates takes them all
    return chosen


def pattern_rows(cfg, L: int, prefix: int = 0):
    """``rows(a, b) -> bool [b - a, prefix + L]``: rows of the pattern of a segment of ``L`` queries
    whose keys are ``prefix`` memory positions (always visible) followed by the segment."""
    rule = RULES[cfg.attention]
    causal = bool(cfg.causal)
    table = None
    if cfg.attention == "bigbird" and cfg.n_random > 0:
        table = _bigbird_table(cfg, causal, L)
    j = torch.arange(L, dtype=torch.int32)[None, :]

    def rows(a: int, b: int) -> torch.Tensor:
        i = torch.arange(a, b, dtype=torch.int32)[:, None]
        m = rule(i, j, cfg)
        if table is not None:
            bs = cfg.block_size
            m = m | table[(i // bs).squeeze(1).long()][:, (j // bs).squeeze(0).long()]
        if causal:
            m = m & (j <= i)
        if prefix:
            m = torch.cat([torch.ones(b - a, prefix, dtype=torch.bool), m], dim=1)
        return m

    return rows


@lru_cache(maxsize=32)
def _pattern_cached(attention: str, params: tuple, causal: bool, L: int) -> torch.Tensor:
    cfg = _ParamView({**dict(params), "attention": attention, "causal": causal})
    return pattern_rows(cfg, L)(0, L)


class _ParamView:
    def __init__(self, d):
        self.__dict__.update(d)


def pattern_key(cfg) -> tuple:
    return tuple((p, getattr(cfg, p)) for p in PARAMS[cfg.attention])


def pattern_mask(cfg, L: int) -> torch.Tensor:
    """Boolean pattern ``[L, L]`` of ``cfg.attention`` (section 1), ANDed with ``j <= i`` when causal."""
    if cfg.attention not in RULES:
        from ..config import ConfigError
        raise ConfigError("attention", cfg.attention, f"a structured pattern for pattern_mask: {list(RULES)}")
    return _pattern_cached(cfg.attention, pattern_key(cfg), bool(cfg.causal), int(L))
