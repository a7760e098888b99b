"""Shared pieces of the block-sparse FlashAttention-2 kernels (fwd.py, bwd.py).

Algorithm (Dao, "FlashAttention-2", 2023; block sparsity as in BigBird / FlexAttention):
- forward, one program per (query block, batch*head): keep the running row max ``m``, the running
  denominator ``l`` and the unnormalised output ``acc`` in fp32; for every visited key block
  compute ``s = mod(q k^T)``, ``m' = max(m, rowmax s)``, ``acc = acc * 2^(m - m') + 2^(s - m') v``,
  ``l = l * 2^(m - m') + rowsum 2^(s - m')``. Scores are kept in log2 units (``log2(e)`` folded
  into the scale) so every exponential is one ``exp2``. Output ``acc / l`` and the base-2
  log-sum-exp ``m + log2 l`` (``+inf`` for a row with no allowed key, so the backward's p is 0).
- backward recomputes ``p = 2^(s - lse)``: one kernel per key block accumulates ``dv = p^T do`` and
  ``dk = ds^T q`` over the query blocks that visit it (and over the query heads sharing the K/V
  head, so GQA needs neither copies nor atomics; when that leaves SMs idle the group is split over
  programs and the partial sums added afterwards); one kernel per query block accumulates
  ``dq = ds k`` and, for d(rel_bias), per-tile sums of ``ds`` along its diagonals (no atomics).
- which key blocks a query block visits: dense (every block; causal stops at the diagonal) or the
  plan of a :class:`kernels.block_mask.BlockMask` (kernels/triton/flash/plan.py: full blocks and partial
  blocks in separate lists, as FlexAttention's ``full_kv_indices`` / ``kv_indices``). The dense
  walk is split FA2-style into an unmasked steady-state loop and a masked phase (causal diagonal
  band, key tail); the block-sparse walk likewise runs the full blocks through the unmasked body
  (no mask tile loaded, no compare) and only the partial ones through the masked body. Each is
  one flat loop over (visited block, sub-tile), with the next block index read one iteration
  ahead, so Triton's software pipeliner prefetches K / V (and the int8 mask tile) as deep as in
  the dense loops (``python -m kernels.tools.pipeline_check`` shows it in the TTGIR). A layout tile
  (``BQ x BK``, the BlockMask's) may be larger than the program tile (``BLOCK_M x BLOCK_N``):
  it then runs as sub-tiles (``sparse_meta``).

The score modifier (``_score``) follows kernels/reference.py: ``s = scale q.k``, optional soft
cap ``c tanh(s / c)``, then ``+ rel_bias[n, j - i_abs + Lk - 1] - slope_n |j - i_abs|``.

Specialisation trade-off (measured with ``python -m kernels.tools.aot_check``, see its docstring):
``HAS_MOD`` is a compile-time flag, so the plain kernel (no modifier: the FA2 comparison case)
carries no modifier code at all; inside the ``HAS_MOD`` kernel ALiBi (slopes of 0 when absent),
rel_bias and the soft cap are switched by uniform run-time scalars. One flag instead of one per
modifier keeps the specialisations (and the AOT check) at 2x instead of 8x. ``causal`` is a
run-time scalar: it only moves the loop bounds (computed once per program) and adds one compare
in the masked tiles, so a constexpr would double the compilations for no measurable register
saving. Integer sizes and flags are excluded from Triton's value specialisation
(``do_not_specialize``) so a launch compiles exactly the variants kernels.tools.aot_check compiles, and
the tiles come from a documented lookup (below), not an autotuner.
fp32 inputs use ``tf32x3`` dots (three tf32 products on split hi/lo operands, ~fp32 accuracy on
tensor cores); plain tf32 would break the fp32 contract of the reference and "ieee" compiles to a
scalar FMA loop that takes minutes of ptxas per kernel and runs far slower.
"""

from __future__ import annotations

import triton
import triton.language as tl

LOG2E = tl.constexpr(1.4426950408889634)  # kernels may only read constexpr globals
# Integer arguments that must not be value-specialised (sizes, counts, run-time flags).
NO_SPECIALIZE = ["H", "GROUP", "gps", "Lq", "Lk", "lay_w", "mf", "mp", "causal", "has_relb", "has_sink"]


@triton.jit
def _dot(a, b, IEEE: tl.constexpr):
    if IEEE:
        return tl.dot(a, b, input_precision="tf32x3")
    else:
        return tl.dot(a, b)


@triton.jit
def _tanh(x):
    # tanh via the logistic function: exact at +-inf, no overflow for large |x|.
    return 2.0 * tl.sigmoid(2.0 * x) - 1.0


@triton.jit
def _score(qk, qi, kj, head, off, Lk, scale, softcap, has_relb, SLOPES, RELB, HAS_MOD: tl.constexpr):
    """Scores in log2 units from raw ``q.k`` (fp32); ``qi``/``kj`` broadcastable row/col indices.

    Returns ``(s, t)`` with ``t = tanh(scale q.k / softcap)`` (the backward's soft-cap chain rule;
    0 without a cap, not computed at all without ``HAS_MOD``). The same helper serves ``s`` ([M, N])
    and the key-major backward's ``s^T`` ([N, M]).
    """
    if HAS_MOD:
        s = qk * scale
        t = s * 0.0
        if softcap > 0:
            t = _tanh(s / softcap)
            s = softcap * t
        rel = kj - (qi + off)
        if has_relb != 0:
            # Out-of-range rows/cols (tails) may index outside the table: load 0 there.
            idx = rel + Lk - 1
            ok = (idx >= 0) & (idx < 2 * Lk - 1)
            s += tl.load(RELB + head * (2 * Lk - 1) + idx, mask=ok, other=0.0)
        slope = tl.load(SLOPES + head)
        s = (s - slope * tl.abs(rel).to(tl.float32)) * LOG2E
    else:
        s = qk * (scale * LOG2E)
        t = s
    return s, t


@triton.jit
def _allowed(
    qi, kj, off, Lk, causal, tile, TILES, q_start, k_start, SPARSE: tl.constexpr, BQ: tl.constexpr, BK: tl.constexpr
):
    """Element mask of a tile: key in range, causal, and the block mask's partial tile ``tile``."""
    ok = (kj < Lk) & ((kj <= qi + off) | (causal == 0))
    if SPARSE:
        # tile < 0 means a full block of the block mask: nothing more to apply. (The launcher
        # guarantees at least one tile row so the clamped read stays in bounds; a predicated
        # load would skip it but the Triton 3.9 interpreter rejects that mask.)
        tv = tl.load(TILES + tl.maximum(tile, 0).to(tl.int64) * (BQ * BK) + (qi - q_start) * BK + (kj - k_start))
        ok = ok & ((tv != 0) | (tile < 0))
    return ok


@triton.jit
def _masked_score(
    q,
    kt,
    offs_m,
    offs_n,
    head,
    off,
    Lk,
    causal,
    scale,
    softcap,
    has_relb,
    SLOPES,
    RELB,
    tile,
    TILES,
    tq,
    tk,
    MASKED: tl.constexpr,
    SPARSE: tl.constexpr,
    HAS_MOD: tl.constexpr,
    IEEE: tl.constexpr,
    BQ: tl.constexpr,
    BK: tl.constexpr,
):
    """Scores ``s`` of a forward-direction tile (query rows ``offs_m``, keys ``offs_n``, ``kt`` = k^T),
    ``-inf`` where a ``MASKED`` tile's element mask forbids the pair."""
    s, _t = _score(
        _dot(q, kt, IEEE),
        offs_m[:, None],
        offs_n[None, :],
        head,
        off,
        Lk,
        scale,
        softcap,
        has_relb,
        SLOPES,
        RELB,
        HAS_MOD,
    )
    if MASKED:
        ok = _allowed(offs_m[:, None], offs_n[None, :], off, Lk, causal, tile, TILES, tq, tk, SPARSE, BQ, BK)
        s = tl.where(ok, s, float("-inf"))
    return s


@triton.jit
def _partial_block(lrow, i, mf, mp, BK: tl.constexpr):
    """Partial block ``i`` of a plan row (kernels/triton/flash/plan.py): its first key (query, in
    the key-major plan) position and its mask tile."""
    return tl.load(lrow + 2 + mf + i) * BK, tl.load(lrow + 2 + mf + mp + i)


@triton.jit
def _query_tile(Q, K, sqb, sqh, sqm, skb, skh, H, GROUP, Lq, Lk, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr):
    """Prologue of a program over (query tile, batch * head), the forward's and the pooled pass's:
    its indices, ``K`` moved to the K/V head it reads (GQA / MQA: the shared head, no copies) and
    its ``BLOCK_M`` query rows ``q`` (zero past ``Lq``). Queries are the last ``Lq`` key positions:
    query row ``i`` sits at key position ``i + off``."""
    qb = tl.program_id(0)
    bh = tl.program_id(1)
    b = bh // H
    head = bh % H
    kvh = head // GROUP
    off = Lk - Lq
    Q += b.to(tl.int64) * sqb + head.to(tl.int64) * sqh
    K += b.to(tl.int64) * skb + kvh.to(tl.int64) * skh
    q_start = qb * BLOCK_M
    offs_m = q_start + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    q = tl.load(Q + offs_m[:, None] * sqm + offs_d[None, :], mask=offs_m[:, None] < Lq, other=0.0)
    return bh, b, head, kvh, off, K, q_start, offs_m, offs_d, q


@triton.jit
def _dense_bounds(q_start, off, Lk, causal, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """The dense walk of the query tile at ``q_start``: key blocks ``[0, n_full)`` need no element
    mask, ``[n_full, hi)`` straddle the causal diagonal or the key tail. Causal skips every block
    right of the last row's diagonal. -> ``(n_full, hi)`` in key positions' block units / keys."""
    hi = Lk
    n_full = Lk // BLOCK_N
    if causal != 0:
        hi = tl.minimum(Lk, tl.maximum(q_start + BLOCK_M + off, 0))
        n_full = tl.minimum(n_full, tl.maximum(q_start + off + 1, 0) // BLOCK_N)
    return n_full, hi


# --------------------------------------------------------------------------- tile lookup
def _cfg(bm, bn, warps, stages):
    return {"BLOCK_M": bm, "BLOCK_N": bn, "num_warps": warps, "num_stages": stages}


# A documented lookup, not an autotuner: per (element bytes, head dim) one program tile for the
# plain kernel and one for the HAS_MOD kernel (whose run-time modifier code needs more registers,
# so smaller tiles), per direction. Nothing here is benchmarked on this project's machines (it
# has no GPU); an autotuner with a single candidate per key, or keyed on the sequence length
# (which does not change the best tile, only the grid), would only pretend to choose. The values
# are the FlashAttention-2 / Triton-tutorial shapes, cut down until kernels.tools.aot_check reports
# them within shared memory and at (or near) zero spills on sm_80 and sm_90:
# - fp16 / bf16: 128 x 64 forward (64 x 64 with modifiers), 64 x 64 backward (32 x 64 with
#   modifiers: 64 x 64 spilled 96-400 B in the dK/dV kernel); d = 128 uses 8 warps, otherwise its
#   accumulators (and in the backward the resident k, v / q, do tiles) need more than 255
#   registers per thread.
# - fp32 (tf32x3 dots split every operand into hi / lo halves): 32- and 64-wide tiles; the d = 64
#   and d = 128 backward run 32 x 32 with 8 warps (d = 128: ~100-116 KB of shared memory on sm_80).
# - stages: 3 in the forward (K and V prefetched two tiles ahead), 2 in the backward (its five
#   resident tiles leave no shared memory for a deeper ring); fp32 2 throughout.
# Every entry is compiled for both GPU generations by kernels.tools.aot_check; the launcher runs no
# other tile (tests pass explicit tiles through ``_flash(config=...)`` in the interpreter only).
_FWD = {
    2: {32: _cfg(128, 64, 4, 3), 64: _cfg(128, 64, 4, 3), 128: _cfg(128, 64, 8, 3)},
    4: {32: _cfg(64, 64, 4, 2), 64: _cfg(64, 32, 4, 2), 128: _cfg(32, 32, 4, 2)},
}
_FWD_MOD = {
    2: {32: _cfg(64, 64, 4, 3), 64: _cfg(64, 64, 4, 3), 128: _cfg(64, 64, 8, 3)},
    4: {32: _cfg(64, 32, 4, 2), 64: _cfg(64, 32, 4, 2), 128: _cfg(32, 32, 4, 2)},
}
_BWD = {
    2: {32: _cfg(64, 64, 4, 2), 64: _cfg(64, 64, 4, 2), 128: _cfg(64, 64, 8, 2)},
    4: {32: _cfg(32, 64, 4, 2), 64: _cfg(32, 32, 8, 2), 128: _cfg(32, 32, 8, 2)},
}
_BWD_MOD = {
    2: {32: _cfg(32, 64, 4, 2), 64: _cfg(32, 64, 4, 2), 128: _cfg(32, 64, 8, 2)},
    4: {32: _cfg(32, 32, 4, 2), 64: _cfg(32, 32, 8, 2), 128: _cfg(32, 32, 8, 2)},
}


def dense_meta(head_dim: int, elem_bytes: int, backward: bool, has_mod: bool) -> dict:
    """Launch meta (BLOCK_M, BLOCK_N, num_warps, num_stages) of the dense kernels: the lookup above."""
    table = (_BWD_MOD if has_mod else _BWD) if backward else (_FWD_MOD if has_mod else _FWD)
    return dict(table[min(elem_bytes, 4)][head_dim])


# Block-sparse kernels whose program tile is halved along the loop dimension (query rows of the
# dK/dV kernel, keys of the forward / dQ kernels) relative to the dense lookup: (kernel, element
# bytes, head dim, has_mod); every dK/dV kernel (it also carries the GQA-group loop). Their main
# loops are pipelined as deeply as the dense ones (the next block index is read one iteration
# ahead), which keeps the prefetched tiles' address tensors live; on the dense tile these kernels
# then spilled more than before the full / partial split (kernels.tools.aot_check on sm_80 / sm_90),
# on the halved tile they do not. Listed, not computed.
_SPARSE_HALVE = {
    ("dkdv", nb, d, mod)
    for nb in (2, 4)
    for d in (32, 64, 128)
    for mod in (False, True)
    if (nb, d, mod) not in ((2, 32, True), (2, 64, True))
} | {("dq", 4, 32, False), ("dq", 4, 32, True), ("fwd", 4, 64, True)}
# ... and those that keep the dense tile but run 8 warps (halving it still spilled: 32 x 16 fp32
# d = 128 forward, 24-96 B on sm_90; 32 x 32 with 8 warps: none).
_SPARSE_WARPS = {("fwd", 4, 128, False): 8, ("fwd", 4, 128, True): 8}


def sparse_meta(head_dim: int, elem_bytes: int, block_q: int, block_k: int, kernel: str, has_mod: bool) -> dict:
    """Launch meta of the block-sparse ``kernel`` ("fwd", "dkdv" or "dq") for a ``block_q x
    block_k`` BlockMask.

    The layout tile (``BQ x BK``) and the program tile (``BLOCK_M x BLOCK_N``) are separate: a
    program runs the layout tile as ``(BQ / BLOCK_M) x (BK / BLOCK_N)`` sub-tiles of the size the
    dense kernel uses for this dtype, head dim and direction (all powers of two, so they divide),
    halved along the loop for the kernels of ``_SPARSE_HALVE``. Measured with kernels.tools.aot_check:
    fp32 (tf32x3) on the app's 64 x 64 tiles made ptxas fall back to 32 registers with a ~10 KB
    stack on sm_80; on the dense kernel's 32-wide tiles it does not.
    """
    cfg = dense_meta(head_dim, elem_bytes, kernel != "fwd", has_mod)
    bm, bn = cfg["BLOCK_M"], cfg["BLOCK_N"]
    key = (kernel, min(elem_bytes, 4), head_dim, has_mod)
    if key in _SPARSE_HALVE:
        bm, bn = (max(16, bm // 2), bn) if kernel == "dkdv" else (bm, max(16, bn // 2))
    return {
        **cfg,
        "BLOCK_M": min(block_q, bm),
        "BLOCK_N": min(block_k, bn),
        "BQ": block_q,
        "BK": block_k,
        "num_warps": _SPARSE_WARPS.get(key, cfg["num_warps"]),
    }


def drb_meta(meta: dict) -> dict:
    """The dQ kernel's meta when it also produces d(rel_bias) (``NEED_DRB``): program tiles of at
    most 32 x 32. Its per-tile diagonal sums gather a ``[BLOCK_M, 2 max(BLOCK_M, BLOCK_N)]`` tile;
    on the 64 x 64 tiles that made ptxas spill up to 2.8 KB (sm_80, falling back to 32 registers),
    so this variant (compiled separately: the other modifiers keep the plain dQ kernel's tiles)
    runs smaller ones. Also applied to a layout's sub-tiles (32 divides every layout tile)."""
    return {**meta, "BLOCK_M": min(meta["BLOCK_M"], 32), "BLOCK_N": min(meta["BLOCK_N"], 32)}


# The layout tile of a dense launch: unused without SPARSE, one fixed value so it adds no variant.
DENSE_LAYOUT = {"BQ": 16, "BK": 16}
