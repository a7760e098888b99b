"""Structured sparse attention patterns (docs/catalogue.md section 1): one record per pattern.

A ``Pattern`` holds everything about one key: the element rule ``rule(i, j, cfg) -> bool``
(``i`` queries as a column, ``j`` keys as a row; True = may attend; attention-gym style, so rules
compose with ``&`` / ``|``), its tile bound ``bounds(cfg, i0, i1, j0, j1) -> (maybe, full)`` (see
``tiles.py``), the config fields it reads, optional block-level additions (BigBird's random
blocks), its paper and summary, and its own check. Adding a pattern is one ``Pattern`` in the
tuple ``PATTERNS`` is gathered from; the attention registry, the layout builder, the memo keys and
the app read it from there. The pattern sizes are declared here as ``Param`` records (``window``
is also poolingformer's local band, ``block_size`` sinkhorn's block). References: Child et al. 2019
(Sparse Transformer: strided, fixed), Parmar et al. 2018 (Image Transformer local blocks), Beltagy
et al. 2020 (Longformer: sliding, dilated, global), Zaheer et al. 2020 (BigBird: window + global +
random blocks), Meta 2025 (Llama 4: chunked, causal within fixed chunks).

Bounds of rules of ``d = i - j`` are exact, because a tile's differences form the whole range
``[i0 - j1, i1 - j0]``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from ..errors import ConfigError
from ..variant import Param, gather, split_params
from .tiles import tile_stats

# Sizes of a rule: nothing is allocated per unit, so the library's bounds are wide.
WINDOW = Param("window", int, 64, range=(1, 1 << 20), cap=8192, surgery=True)
DILATION = Param("dilation", int, 2, range=(1, 1 << 20), cap=64, surgery=True)
STRIDE = Param("stride", int, 16, range=(1, 1 << 20), cap=1024, surgery=True)
N_SUMMARY = Param("n_summary", int, 1, range=(1, 1 << 20), cap=1024, surgery=True)
BLOCK_SIZE = Param("block_size", int, 16, range=(1, 1 << 20), cap=1024, surgery=True)
N_GLOBAL = Param("n_global", int, 2, range=(0, 1 << 20), cap=256, surgery=True)
# StreamingLLM's attention sinks (Xiao et al. 2024): the first n_sinks keys stay visible under any
# pattern, since trained heads park attention there; 0 = the pattern as published.
N_SINKS = Param("n_sinks", int, 0, range=(0, 1 << 20), cap=64, label="Attention sinks (first keys kept)", surgery=True)
N_RANDOM = Param("n_random", int, 2, range=(0, 1 << 20), cap=256, surgery=True)
# Llama 4's chunked attention (Meta 2025; transformers' ``attention_chunk_size``): the chunk of positions
# a query sees. Not ``chunk_size``, which is LSH's chunk of sorted keys.
ATTENTION_CHUNK_SIZE = Param(
    "attention_chunk_size", int, 64, range=(1, 1 << 20), cap=8192, label="Chunk size (chunked)", surgery=True
)


# ---------------------------------------------------------------------------- element rules
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


def chunked(i, j, cfg):
    return i // cfg.attention_chunk_size == j // cfg.attention_chunk_size


def longformer(i, j, cfg):
    return sliding_window(i, j, cfg) | (i < cfg.n_global) | (j < cfg.n_global)


# ---------------------------------------------------------------------------- tile bounds
def _diff_range(i0, i1, j0, j1):
    return i0 - j1, i1 - j0


def full_bounds(cfg, i0, i1, j0, j1):
    ones = torch.ones_like(i0 - j0, dtype=torch.bool)
    return ones, ones


def sliding_bounds(cfg, i0, i1, j0, j1, w=None):
    w = cfg.window if w is None else w
    lo, hi = _diff_range(i0, i1, j0, j1)
    return (lo < w) & (hi > -w), (lo > -w) & (hi < w)


def dilated_bounds(cfg, i0, i1, j0, j1):
    maybe, full_ = sliding_bounds(cfg, i0, i1, j0, j1, cfg.window * cfg.dilation)
    return maybe, full_ & (cfg.dilation == 1)


def strided_bounds(cfg, i0, i1, j0, j1):
    s = cfg.stride
    lo, hi = _diff_range(i0, i1, j0, j1)
    has_multiple = torch.div(hi, s, rounding_mode="floor") * s >= lo
    return has_multiple | ((lo <= s) & (hi >= -s)), ((lo >= -s) & (hi <= s)) | (s == 1)


def fixed_bounds(cfg, i0, i1, j0, j1):
    s, n = cfg.stride, cfg.n_summary
    same = (i0 // s <= j1 // s) & (j0 // s <= i1 // s)
    summary = (j1 - j0 + 1 >= s) | (j0 // s != j1 // s) | (j1 % s >= s - n)
    full_ = (
        ((i0 // s == i1 // s) & (j0 // s == j1 // s) & (i0 // s == j0 // s))
        | (n == s)
        | ((j0 % s >= s - n) & (j0 // s == j1 // s))
    )
    return same | summary, full_


def block_local_bounds(cfg, i0, i1, j0, j1):
    b = cfg.block_size
    maybe = (i0 // b <= j1 // b) & (j0 // b <= i1 // b)
    return maybe, (i0 // b == i1 // b) & (j0 // b == j1 // b) & (i0 // b == j0 // b)


def chunked_bounds(cfg, i0, i1, j0, j1):
    c = cfg.attention_chunk_size
    maybe = (i0 // c <= j1 // c) & (j0 // c <= i1 // c)
    return maybe, (i0 // c == i1 // c) & (j0 // c == j1 // c) & (i0 // c == j0 // c)


def longformer_bounds(cfg, i0, i1, j0, j1):
    maybe, full_ = sliding_bounds(cfg, i0, i1, j0, j1)
    g = cfg.n_global
    return maybe | (i0 < g) | (j0 < g), full_ | (i1 < g) | (j1 < g)


# ---------------------------------------------------------------------------- block additions
def bigbird_table(cfg, causal: bool, L: int) -> torch.Tensor:
    """``[nb, nb]`` random key blocks per query block of ``block_size``: ``n_random`` blocks drawn
    without replacement (seeded) from those the query block does not already fully see in the
    window + global pattern; causal draws only from blocks at or before the query block (the
    masked future counts as seen, and so do positions past the end)."""
    bs = cfg.block_size
    nb = -(-L // bs)
    lf = lambda i, j: longformer(i, j, cfg) | ((j > i) if causal else False)  # noqa: E731

    def seen_bounds(i0, i1, j0, j1):
        # Only "fully seen" is used, so ``maybe`` here bounds fullness: a tile can be fully seen only
        # through the window, the global rows / columns, or (causal) the masked future.
        maybe, full_ = longformer_bounds(cfg, i0, i1, j0, j1)
        if causal:
            maybe, full_ = maybe | (j1 > i0), full_ | (j0 > i1)
        return maybe, full_

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


def bigbird_blocks(cfg, causal: bool, L: int):
    """BigBird's random blocks as ``(table [nb, nb], block size)``, or None without any."""
    if cfg.n_random <= 0:
        return None
    return bigbird_table(cfg, causal, L), cfg.block_size


# ---------------------------------------------------------------------------- checks
def check_fixed(cfg) -> None:
    if not 1 <= cfg.n_summary <= cfg.stride:
        raise ConfigError("n_summary", cfg.n_summary, f"an integer with 1 <= n_summary <= stride={cfg.stride}")


def check_chunked(cfg) -> None:
    if not cfg.causal:
        raise ConfigError(
            "causal",
            cfg.causal,
            "True with attention='chunked': Llama 4's chunked attention is causal inside each chunk; "
            "bidirectional chunks are attention='block_local'",
        )
    if cfg.memory != "none":
        raise ConfigError(
            "memory",
            cfg.memory,
            "'none' with attention='chunked': a query sees only its own chunk, and memory keys from earlier "
            "segments would be visible to every query",
        )


# ---------------------------------------------------------------------------- the records
@dataclass(frozen=True)
class Pattern:
    key: str
    paper: str
    summary: str
    rule: Callable  # rule(i, j, cfg) -> bool tensor (before the causal AND)
    bounds: Callable  # bounds(cfg, i0, i1, j0, j1) -> (maybe, full) per tile
    # config fields the rule reads (memo key and UI controls): Param records or names of core
    # fields; stored as names, the records in param_records (as on a Variant)
    params: tuple = ()
    blocks: Callable | None = None  # blocks(cfg, causal, L) -> (table [nb, nb], block) or None, ORed in
    check: Callable | None = None  # check(cfg) raises ConfigError
    param_records: tuple = field(default=(), repr=False, compare=False)

    def __post_init__(self):
        names, records = split_params(self.params)
        object.__setattr__(self, "params", names)
        object.__setattr__(self, "param_records", tuple(dict.fromkeys(self.param_records + records)))


PATTERNS = gather(
    (
        Pattern(
            "full", "Vaswani et al. 2017", "Every query attends every key: the quadratic baseline.", full, full_bounds
        ),
        Pattern(
            "sliding_window",
            "Beltagy et al. 2020 (Longformer); Mistral 2023",
            "Each query sees a band of `window` keys around it (causal: itself and the previous window-1).",
            sliding_window,
            sliding_bounds,
            (WINDOW, N_SINKS),
        ),
        Pattern(
            "dilated_window",
            "Beltagy et al. 2020 (Longformer, dilated)",
            "A band with gaps: every dilation-th key up to window*dilation away, widening the receptive "
            "field at the same cost.",
            dilated_window,
            dilated_bounds,
            (WINDOW, DILATION, N_SINKS),
        ),
        Pattern(
            "strided",
            "Child et al. 2019 (Sparse Transformer, strided)",
            "The previous `stride` keys plus every stride-th key: two hops connect any pair.",
            strided,
            strided_bounds,
            (STRIDE, N_SINKS),
        ),
        Pattern(
            "fixed",
            "Child et al. 2019 (Sparse Transformer, fixed)",
            "Attend within your block of `stride` plus the last n_summary 'summary' positions of every block.",
            fixed,
            fixed_bounds,
            (STRIDE, N_SUMMARY, N_SINKS),
            check=check_fixed,
        ),
        Pattern(
            "block_local",
            "Parmar et al. 2018 (Image Transformer); Qiu et al. 2019 (Blockwise)",
            "The sequence is cut into blocks of `block_size`; each query attends only its own block.",
            block_local,
            block_local_bounds,
            (BLOCK_SIZE, N_SINKS),
        ),
        Pattern(
            "chunked",
            "Meta 2025 (Llama 4, chunked local attention)",
            "Positions are cut into fixed chunks of `attention_chunk_size` from the start; a query attends "
            "causally within its own chunk only.",
            chunked,
            chunked_bounds,
            (ATTENTION_CHUNK_SIZE, N_SINKS),
            check=check_chunked,
        ),
        Pattern(
            "longformer",
            "Beltagy et al. 2020 (Longformer); Ainslie et al. 2020 (ETC)",
            "A sliding window plus n_global global tokens that see and are seen by every position.",
            longformer,
            longformer_bounds,
            (WINDOW, N_GLOBAL, N_SINKS),
        ),
        Pattern(
            "bigbird",
            "Zaheer et al. 2020 (BigBird)",
            "Window + global tokens + n_random random key blocks per query block: sparse yet a universal approximator.",
            longformer,
            longformer_bounds,
            (WINDOW, N_GLOBAL, N_RANDOM, BLOCK_SIZE, N_SINKS, "seed"),
            blocks=bigbird_blocks,
        ),
    )
)

# Derived views kept for callers that want one aspect (the records above are the source).
RULES = {k: p.rule for k, p in PATTERNS.items()}
PARAMS = {k: p.params for k, p in PATTERNS.items()}
