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
    return torch.ones_like(i - j, dtype=torch.bool)


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
    """The window + global part; random blocks are added by ``layout.bigbird_table`` (block-level)."""
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


def pattern_rows(cfg, L: int):
    """``rows(a, b) -> bool [b - a, L]``: rows ``a .. b-1`` of the pattern of ``L`` positions."""
    from .layout import full_rule  # the random-block table lives with the layout code

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
