"""Shared pieces of the block-sparse FlashAttention-2 kernels (flash_fwd.py, flash_bwd.py).

Algorithm (Dao, "FlashAttention-2", 2023; block sparsity as in BigBird / FlexAttention):
- forward, one program per (query block, batch*head): keep the running row max ``m``, the running
  denominator ``l`` and the unnormalised output ``acc`` in fp32; for every visited key block
  compute ``s = mod(q k^T)``, ``m' = max(m, rowmax s)``, ``acc = acc * e^(m - m') + e^(s - m') v``,
  ``l = l * e^(m - m') + rowsum e^(s - m')``. Output ``acc / l`` and the log-sum-exp
  ``m + log l`` (``+inf`` for a row with no allowed key, so the backward's ``e^(s - lse)`` is 0).
- backward recomputes ``p = e^(s - lse)``: one kernel per key block accumulates ``dv = p^T do`` and
  ``dk = ds^T q`` over the query blocks that visit it (and over the query heads sharing the K/V
  head, so GQA needs neither copies nor atomics); one kernel per query block accumulates
  ``dq = ds k`` and scatters ``ds`` into d(rel_bias) by diagonal with atomics.
- which key blocks a query block visits: dense (every block; causal stops at the diagonal) or a
  :class:`kernels.block_mask.BlockMask` (its list). Only blocks that straddle the causal diagonal,
  the key tail, or are partial in the block mask evaluate an element mask; full blocks run unmasked.

The score modifier (``_score_mod``) follows kernels/reference.py: ``s = scale q.k``, optional soft
cap ``c tanh(s / c)``, then ``+ rel_bias[n, j - i_abs + Lk - 1] - slope_n |j - i_abs|``.
Indices are passed as broadcastable 2-D tensors so the same helpers serve ``s`` ([M, N]) and the
transposed ``s^T`` ([N, M]) of the key-major backward kernel.
"""
from __future__ import annotations

import triton
import triton.language as tl

LOG2E = tl.constexpr(1.4426950408889634)  # kernels may only read constexpr globals


@triton.jit
def _dot(a, b, IEEE: tl.constexpr):
    # fp32 inputs: three tf32 products (split hi/lo) give ~fp32 accuracy on tensor cores; plain
    # tf32 (10-bit mantissa) would break the fp32 contract of the reference, "ieee" compiles to a
    # huge FMA loop (a minute of ptxas per kernel) and runs slowly.
    if IEEE:
        return tl.dot(a, b, input_precision="tf32x3")
    else:
        return tl.dot(a, b)


@triton.jit
def _tanh(x):
    # tanh via the logistic function: exact at +-inf, no overflow for large |x|.
    return 2.0 * tl.sigmoid(2.0 * x) - 1.0


@triton.jit
def _score_mod(qk, qi, kj, head, off, Lk, scale, softcap, has_relb, SLOPES, RELB,
               has_mod):
    """Scores from raw ``q.k`` (fp32). ``qi``/``kj``: query row / key column indices (broadcastable).

    Returns ``(s, t)`` with ``t = tanh(scale q.k / softcap)`` (needed by the backward; 0 if unused).
    Modifiers are switched at run time (``has_mod``: any modifier; ``softcap > 0``; ``has_relb``;
    ALiBi slopes that are 0 when absent): uniform scalar branches cost next to nothing on the GPU
    and keep the number of compiled specialisations (and the AOT check) small.
    """
    s = qk * scale
    t = s * 0.0
    if has_mod != 0:
        if softcap > 0:
            t = _tanh(s / softcap)
            s = softcap * t
        rel = kj - (qi + off)
        if has_relb != 0:
            # Out-of-range rows/cols (tails) may index outside the table: load 0 there.
            idx = rel + Lk - 1
            ok = (idx >= 0) & (idx < 2 * Lk - 1)
            s += tl.load(RELB + head * (2 * Lk - 1) + idx, mask=ok, other=0.0).to(tl.float32)
        slope = tl.load(SLOPES + head).to(tl.float32)
        s -= slope * tl.abs(rel).to(tl.float32)
    return s, t


@triton.jit
def _allowed(qi, kj, off, Lk, causal, tile, TILES, q_start, k_start,
             SPARSE: tl.constexpr, BQ: tl.constexpr, BK: tl.constexpr):
    """Element mask of a tile: key in range, causal, and the block mask's partial tile ``tile``."""
    ok = (kj < Lk) & ((kj <= qi + off) | (causal == 0))
    if SPARSE:
        # tile < 0 means a full block of the block mask: nothing more to apply. (The launcher
        # guarantees at least one tile row so the clamped read stays in bounds.)
        tv = tl.load(TILES + tl.maximum(tile, 0).to(tl.int64) * (BQ * BK) + (qi - q_start) * BK
                     + (kj - k_start))
        ok = ok & ((tv != 0) | (tile < 0))
    return ok


# --------------------------------------------------------------------------- autotune configs
def _cfg(bm, bn, warps, stages):
    return triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_warps=warps, num_stages=stages)


# Dense tiles: FA2 candidates (kept few: every config is compiled by kernels.aot_check for two
# GPU generations). Block-sparse tiles are fixed by the BlockMask (64 x 64 in the app).
FWD_DENSE_CONFIGS = [_cfg(128, 64, 8, 3), _cfg(64, 64, 4, 2)]
BWD_DENSE_CONFIGS = [_cfg(64, 64, 4, 2)]
SPARSE_CONFIGS = [_cfg(64, 64, 4, 2)]

# What the interpreter (CPU tensors, TRITON_INTERPRET=1) runs: autotuning there would only re-run
# the same numpy program, so the first candidate is used.
SMEM_BUDGET = 160 * 1024  # below sm_80's 163 KiB per block, with headroom for the epilogue


def smem_estimate(cfg: triton.Config, head_dim: int, elem_bytes: int, backward: bool) -> int:
    """Rough shared memory of a config: the streamed tiles times pipeline stages plus the resident one.

    Used to prune configs that would not fit (fp32 with head dim 128); aot_check measures the
    real number from the compiled kernel.
    """
    bm, bn = cfg.kwargs["BLOCK_M"], cfg.kwargs["BLOCK_N"]
    stages = max(1, cfg.num_stages)
    if backward:  # k/v resident, q/do streamed (and the reverse in the dq kernel)
        big = max(bm, bn)
        return (2 * big * head_dim + 2 * stages * big * head_dim) * elem_bytes + 4 * bm * bn * 4
    return (bm * head_dim + 2 * stages * bn * head_dim) * elem_bytes + bm * bn * 4


def prune_configs(configs, head_dim: int, elem_bytes: int, backward: bool):
    kept = [c for c in configs if smem_estimate(c, head_dim, elem_bytes, backward) <= SMEM_BUDGET]
    if kept:
        return kept
    # Nothing fits the estimate: keep the smallest tile with a single stage.
    small = min(configs, key=lambda c: smem_estimate(c, head_dim, elem_bytes, backward))
    return [triton.Config(dict(small.kwargs), num_warps=small.num_warps, num_stages=1)]


def _prune_hook(backward: bool):
    def hook(configs, named_args, **kwargs):
        q = named_args["Q"]
        head_dim = kwargs.get("HEAD_DIM", named_args.get("HEAD_DIM"))
        return prune_configs(configs, int(head_dim), q.element_size(), backward)
    return hook


PRUNE_FWD = {"early_config_prune": _prune_hook(False)}
PRUNE_BWD = {"early_config_prune": _prune_hook(True)}
