"""Structured sparse attention patterns (CATALOGUE.md section 1), one small pure rule each.

Each rule maps index tensors ``i`` (queries, column vector) and ``j`` (keys, row vector) to a
boolean ``M[i, j]`` (True = may attend), attention-gym style, so patterns compose with ``&`` / ``|``.
References: Child et al. 2019 (Sparse Transformer: strided, fixed), Parmar et al. 2018 (Image
Transformer local blocks), Beltagy et al. 2020 (Longformer: sliding, dilated, global),
Zaheer et al. 2020 (BigBird: window + global + random blocks).

``pattern_mask(cfg, L)`` evaluates the chosen rule (ANDed with ``j <= i`` when causal) in row
chunks, so a long pattern never needs an ``L x L`` integer temporary; results are memoised
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
    """The window + global part; random blocks are added by :func:`_bigbird_random` (block-level)."""
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


def _evaluate(rule, cfg, L: int, causal: bool, chunk: int = 512) -> torch.Tensor:
    out = torch.empty(L, L, dtype=torch.bool)
    j = torch.arange(L)[None, :]
    for start in range(0, L, chunk):
        i = torch.arange(start, min(L, start + chunk))[:, None]
        m = rule(i, j, cfg)
        if causal:
            m = m & (j <= i)
        out[start:start + i.shape[0]] = m
    return out


def _bigbird_random(mask: torch.Tensor, cfg, causal: bool) -> torch.Tensor:
    """Add ``n_random`` whole key blocks per query block, drawn without replacement (seeded) from the
    blocks that query block does not already fully see; causal draws only from blocks at or before it."""
    L, bs = mask.shape[0], cfg.block_size
    nb = -(-L // bs)
    padded = torch.ones(nb * bs, nb * bs, dtype=torch.bool)
    padded[:L, :L] = mask
    if causal:  # the causal AND already removed the future; "fully seen" is judged on the allowed part
        ii = torch.arange(nb * bs)[:, None]
        padded |= torch.arange(nb * bs)[None, :] > ii
    fully = padded.view(nb, bs, nb, bs).all(dim=3).all(dim=1)  # (n_qb, n_kb)
    candidate = ~fully
    if causal:
        candidate &= torch.arange(nb)[None, :] <= torch.arange(nb)[:, None]
    gen = torch.Generator().manual_seed(cfg.seed)
    score = torch.rand(nb, nb, generator=gen).masked_fill(~candidate, -1.0)
    k = min(cfg.n_random, nb)
    top = score.topk(k, dim=1)
    chosen = torch.zeros(nb, nb, dtype=torch.bool)
    chosen.scatter_(1, top.indices, top.values >= 0)  # a row with fewer candidates takes them all
    extra = chosen.repeat_interleave(bs, 0).repeat_interleave(bs, 1)[:L, :L]
    out = mask | extra
    if causal:
        out &= torch.arange(L)[None, :] <= torch.arange(L)[:, None]
    return out


@lru_cache(maxsize=32)
def _pattern_cached(attention: str, params: tuple, causal: bool, L: int) -> torch.Tensor:
    cfg = _ParamView(dict(params))
    mask = _evaluate(RULES[attention], cfg, L, causal)
    if attention == "bigbird" and cfg.n_random > 0:
        mask = _bigbird_random(mask, cfg, causal)
    return mask


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
