"""NSA's selected-block attention in Triton, forward and backward (Yuan et al. 2025, "Native Sparse Attention",
DeepSeek-AI, ACL 2025, section 3.4's kernel design); the dispatcher and the formula: ``kernels/selected.py``.

Every query position ``t`` of a (batch, K/V head) pair reads its own list of selection blocks (``idx``, blocks of
``l'`` keys, at most ``W`` per position, ``cnt`` of them used), the keys of each block cut at ``t``; the query
heads of a GQA group read the same blocks. As in the paper the grid is over (position ``t``, batch x K/V head):
a program holds the queries of ALL query heads of the group at ``t`` as its tile rows (``G = h / h_kv`` rows,
padded to ``GM = 16``, the smallest ``tl.dot`` operand; a group wider than 16 runs as ``cdiv(G, 16)`` row groups
on grid y), so each selected key block is loaded once for the whole group, and walks its selected blocks, each as
``cdiv(l', BLOCK_N)`` key tiles (``BLOCK_N`` a power of two >= 16: a block of ``l' = 8`` keys is half a 16-key tile,
the other half masked), with the online softmax in fp32 and base-2 scores (``log2(e)`` folded into the scale) as
the flash kernels (``kernels/triton/flash/common.py``). Output and the base-2 log-sum-exp of each row.

Backward, recomputing ``p = 2^(s - lse)`` with ``delta = rowsum(dO * O)`` (torch):
- ``_slc_bwd_dq``: the forward's grid and walk; ``dq = scale sum ds k`` with ``ds = p (dO v^T - delta)``;
- ``_slc_bwd_dkdv``: one program per key tile of a block (grid ``(n_s cdiv(l', BLOCK_N), B h_kv)``), its K / V
  and fp32 ``dK`` / ``dV`` resident, walking the positions that selected the block (the key-major transpose of
  ``idx``: ``key_major``, sorted and offset in torch on the device, no host synchronisation) and the group's query
  heads: ``dV += p^T dO``, ``dK += ds^T q``. Block 0 is selected by every position, so its list is ``L`` long
  where most are about ``n L / n_s``: the lists are walked in chunks (grid z, ``DKDV_CHUNK``), each writing its
  own slice of partial sums, added afterwards in a fixed order. Every gradient is a fixed-order sum: no atomics,
  bitwise reproducible (FA2's atomic dQ / the paper's atomics would not be).

Refused (the PyTorch path runs them, ``unsupported_reason``): dtypes other than fp32 (NSA's branches compute in
``promote(dtype, fp32)``, so a model in fp16 / bf16 hands fp32 here: one dtype, a third of the compilations; fp64
stays on the CPU-exact path), head widths outside ``HEAD_DIMS``. Any ``l' >= 1`` runs (as tiles of ``BLOCK_N``).
Specialisations: head width x ``BLOCK_N`` per kernel (``meta``), ``aot_specs`` lists them for
``kernels.tools.aot_check``.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from .grid_limits import MAX_GRID_Y, batch_slices

HEAD_DIMS = (16, 32, 64, 128)
GM = 16  # tile rows: the query heads of a GQA group at one position, padded to tl.dot's minimum
LOG2E = tl.constexpr(1.4426950408889634)
TF = tl.constexpr("tf32x3")  # ~fp32 accuracy on tensor cores (kernels/triton/flash/common.py)
NO_SPEC = ["H", "H_KV", "GROUP", "N_RG", "L", "W", "blk", "n_s", "CH", "sdkc"]
# The dK/dV kernel's position lists are walked in chunks of at most cdiv(L, chunks) positions, chunks =
# min(MAX_CHUNKS, cdiv(L, DKDV_CHUNK)): block 0 is selected by every position, so unsplit its program would walk
# all L while the others walk about n L / n_s. Read at call time (a test lowers DKDV_CHUNK).
DKDV_CHUNK = 1024
MAX_CHUNKS = 16
# Widest key tile per head width: the forward / dQ kernels', and the dK/dV kernel's (whose fp32 K, V, dK, dV tiles
# stay resident: at d 64 x 64 keys and d 128 x 32 keys it spilled 32-192 B on sm_80 / sm_90 in
# kernels.tools.aot_check; one step narrower, none). Warps per head width.
_MAX_BN = {16: 64, 32: 64, 64: 64, 128: 32}
_MAX_BN_DKDV = {16: 64, 32: 64, 64: 32, 128: 16}
_WARPS = {16: 4, 32: 4, 64: 4, 128: 8}
KERNELS = ("fwd", "dq", "dkdv")


def meta(head_dim: int, block: int, kernel: str = "fwd") -> dict:
    """Launch meta of ``kernel`` (``KERNELS``) for head width ``head_dim`` and selection block ``l' = block``:
    ``BLOCK_N`` the power of two covering the block (16 .. the kernel's widest tile), the head width's warps."""
    widest = (_MAX_BN_DKDV if kernel == "dkdv" else _MAX_BN)[head_dim]
    bn = min(widest, max(16, 1 << (max(1, block) - 1).bit_length()))
    return {"BLOCK_N": bn, "num_warps": _WARPS[head_dim], "num_stages": 2}


def unsupported_reason(q, k, v, sel, block, **_) -> str | None:
    """Why these kernels cannot run these arguments (None if they can). For the dispatcher."""
    if not (q.dtype == k.dtype == v.dtype == torch.float32):
        return f"dtype {q.dtype} / {k.dtype} / {v.dtype}: the selected-block kernel runs fp32 only"
    if q.shape[-1] not in HEAD_DIMS:
        return f"head dim {q.shape[-1]} not in {HEAD_DIMS}"
    B, h, L, d = q.shape
    h_kv = k.shape[1]
    if h_kv * -(-(h // h_kv) // GM) > MAX_GRID_Y:
        return f"{h_kv} K/V heads x {-(-(h // h_kv) // GM)} row groups exceed the grid limit {MAX_GRID_Y}"
    return None


@triton.jit
def _key_tile(K, V, skn, svn, j, c, t, blk, offs_d, BLOCK_N: tl.constexpr):
    """Key tile ``c`` of block ``j`` for position ``t``: ``(k^T [D, N], v [N, D], allowed keys [N])``, the keys
    past the block or after ``t`` masked (loaded as 0)."""
    offs_n = j * blk + c * BLOCK_N + tl.arange(0, BLOCK_N)
    ok = (offs_n < (j + 1) * blk) & (offs_n <= t)
    kt = tl.load(K + offs_n[None, :] * skn + offs_d[:, None], mask=ok[None, :], other=0.0)
    v = tl.load(V + offs_n[:, None] * svn + offs_d[None, :], mask=ok[:, None], other=0.0)
    return kt, v, ok


@triton.jit
def _group_rows(P, b, heads, t, spb, sph, spm, offs_d, rows_ok):
    """The ``[GM, D]`` rows of the group's query heads ``heads`` at position ``t`` of a ``[B, h, L, d]`` tensor."""
    ptrs = P + b.to(tl.int64) * spb + heads.to(tl.int64)[:, None] * sph + t * spm + offs_d[None, :]
    return tl.load(ptrs, mask=rows_ok[:, None], other=0.0)


@triton.jit(do_not_specialize=NO_SPEC)
def _slc_fwd(
    Q,
    K,
    V,
    O,
    LSE,
    IDX,
    CNT,
    sqb,
    sqh,
    sqm,
    skb,
    skh,
    skn,
    svb,
    svh,
    svn,
    sob,
    soh,
    som,
    H,
    H_KV,
    GROUP,
    N_RG,
    L,
    W,
    blk,
    scale,
    HEAD_DIM: tl.constexpr,
    BLOCK_N: tl.constexpr,
    GM: tl.constexpr,
):
    t = tl.program_id(0)
    pid = tl.program_id(1)  # (batch, K/V head, row group)
    bkv = pid // N_RG
    b = bkv // H_KV
    kvh = bkv % H_KV
    offs_g = (pid % N_RG) * GM + tl.arange(0, GM)
    rows_ok = offs_g < GROUP
    heads = kvh * GROUP + offs_g
    offs_d = tl.arange(0, HEAD_DIM)
    q = _group_rows(Q, b, heads, t, sqb, sqh, sqm, offs_d, rows_ok)
    K += b.to(tl.int64) * skb + kvh.to(tl.int64) * skh
    V += b.to(tl.int64) * svb + kvh.to(tl.int64) * svh
    row = bkv.to(tl.int64) * L + t
    n = tl.load(CNT + row)
    nsub = tl.cdiv(blk, BLOCK_N)
    qk_scale = scale * LOG2E
    m_i = tl.full([GM], float("-inf"), tl.float32)
    l_i = tl.zeros([GM], tl.float32)
    acc = tl.zeros([GM, HEAD_DIM], tl.float32)
    for it in range(0, n * nsub):
        j = tl.load(IDX + row * W + it // nsub)
        kt, v, ok = _key_tile(K, V, skn, svn, j, it % nsub, t, blk, offs_d, BLOCK_N)
        s = tl.where(ok[None, :], tl.dot(q, kt, input_precision=TF) * qk_scale, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_use = tl.where(m_new == float("-inf"), 0.0, m_new)  # no allowed key yet: exp2 gives 0, not NaN
        alpha = tl.exp2(m_i - m_use)
        p = tl.exp2(s - m_use[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p, v, input_precision=TF)
        m_i = m_new
    empty = l_i == 0.0  # no allowed key: output 0, lse +inf so the backward's p is 0
    out = acc / tl.where(empty, 1.0, l_i)[:, None]
    lse = tl.where(empty, float("inf"), m_i + tl.log2(tl.where(empty, 1.0, l_i)))
    o_ptrs = O + b.to(tl.int64) * sob + heads.to(tl.int64)[:, None] * soh + t * som + offs_d[None, :]
    tl.store(o_ptrs, out, mask=rows_ok[:, None])
    tl.store(LSE + (b.to(tl.int64) * H + heads) * L + t, lse, mask=rows_ok)


@triton.jit(do_not_specialize=NO_SPEC)
def _slc_bwd_dq(
    Q,
    K,
    V,
    DO,
    LSE,
    DELTA,
    DQ,
    IDX,
    CNT,
    sqb,
    sqh,
    sqm,
    skb,
    skh,
    skn,
    svb,
    svh,
    svn,
    sdob,
    sdoh,
    sdom,
    H,
    H_KV,
    GROUP,
    N_RG,
    L,
    W,
    blk,
    scale,
    HEAD_DIM: tl.constexpr,
    BLOCK_N: tl.constexpr,
    GM: tl.constexpr,
):
    t = tl.program_id(0)
    pid = tl.program_id(1)
    bkv = pid // N_RG
    b = bkv // H_KV
    kvh = bkv % H_KV
    offs_g = (pid % N_RG) * GM + tl.arange(0, GM)
    rows_ok = offs_g < GROUP
    heads = kvh * GROUP + offs_g
    offs_d = tl.arange(0, HEAD_DIM)
    q = _group_rows(Q, b, heads, t, sqb, sqh, sqm, offs_d, rows_ok)
    do = _group_rows(DO, b, heads, t, sdob, sdoh, sdom, offs_d, rows_ok)
    stat = (b.to(tl.int64) * H + heads) * L + t
    lse = tl.load(LSE + stat, mask=rows_ok, other=float("inf"))  # padding rows: p = 0
    delta = tl.load(DELTA + stat, mask=rows_ok, other=0.0)
    K += b.to(tl.int64) * skb + kvh.to(tl.int64) * skh
    V += b.to(tl.int64) * svb + kvh.to(tl.int64) * svh
    row = bkv.to(tl.int64) * L + t
    n = tl.load(CNT + row)
    nsub = tl.cdiv(blk, BLOCK_N)
    qk_scale = scale * LOG2E
    dq = tl.zeros([GM, HEAD_DIM], tl.float32)
    for it in range(0, n * nsub):
        j = tl.load(IDX + row * W + it // nsub)
        kt, v, ok = _key_tile(K, V, skn, svn, j, it % nsub, t, blk, offs_d, BLOCK_N)
        s = tl.dot(q, kt, input_precision=TF) * qk_scale
        p = tl.where(ok[None, :], tl.exp2(s - lse[:, None]), 0.0)
        dp = tl.dot(do, tl.trans(v), input_precision=TF)
        ds = p * (dp - delta[:, None])
        dq += tl.dot(ds, tl.trans(kt), input_precision=TF)
    dq_ptrs = DQ + b.to(tl.int64) * sqb + heads.to(tl.int64)[:, None] * sqh + t * sqm + offs_d[None, :]
    tl.store(dq_ptrs, dq * scale, mask=rows_ok[:, None])


@triton.jit(do_not_specialize=NO_SPEC)
def _slc_bwd_dkdv(
    Q,
    K,
    V,
    DO,
    LSE,
    DELTA,
    DK,
    DV,
    TPOS,
    TOFF,
    sqb,
    sqh,
    sqm,
    skb,
    skh,
    skn,
    svb,
    svh,
    svn,
    sdob,
    sdoh,
    sdom,
    sdkc,
    H,
    H_KV,
    GROUP,
    N_RG,
    L,
    n_s,
    CH,
    blk,
    scale,
    HEAD_DIM: tl.constexpr,
    BLOCK_N: tl.constexpr,
    GM: tl.constexpr,
):
    nsub = tl.cdiv(blk, BLOCK_N)
    j = tl.program_id(0) // nsub
    c = tl.program_id(0) % nsub
    bkv = tl.program_id(1)
    b = bkv // H_KV
    kvh = bkv % H_KV
    offs_d = tl.arange(0, HEAD_DIM)
    offs_n = j * blk + c * BLOCK_N + tl.arange(0, BLOCK_N)
    in_blk = (offs_n < (j + 1) * blk) & (offs_n < L)
    k_off = b.to(tl.int64) * skb + kvh.to(tl.int64) * skh + offs_n[:, None] * skn + offs_d[None, :]
    v_off = b.to(tl.int64) * svb + kvh.to(tl.int64) * svh + offs_n[:, None] * svn + offs_d[None, :]
    k = tl.load(K + k_off, mask=in_blk[:, None], other=0.0)
    v = tl.load(V + v_off, mask=in_blk[:, None], other=0.0)
    dk = tl.zeros([BLOCK_N, HEAD_DIM], tl.float32)
    dv = tl.zeros([BLOCK_N, HEAD_DIM], tl.float32)
    qk_scale = scale * LOG2E
    seg = bkv.to(tl.int64) * n_s + j
    e1 = tl.load(TOFF + seg + 1)
    e0 = tl.minimum(tl.load(TOFF + seg) + tl.program_id(2) * CH, e1)  # this program's chunk of the list
    e1 = tl.minimum(e0 + CH, e1)
    for it in range(0, (e1 - e0) * N_RG):
        t = tl.load(TPOS + e0 + it // N_RG)  # the positions that selected block j, ascending
        offs_g = (it % N_RG) * GM + tl.arange(0, GM)
        rows_ok = offs_g < GROUP
        heads = kvh * GROUP + offs_g
        q = _group_rows(Q, b, heads, t, sqb, sqh, sqm, offs_d, rows_ok)  # (GM, D)
        do = _group_rows(DO, b, heads, t, sdob, sdoh, sdom, offs_d, rows_ok)
        stat = (b.to(tl.int64) * H + heads) * L + t
        lse = tl.load(LSE + stat, mask=rows_ok, other=float("inf"))
        delta = tl.load(DELTA + stat, mask=rows_ok, other=0.0)
        st = tl.dot(k, tl.trans(q), input_precision=TF) * qk_scale  # (N, GM)
        ok = in_blk & (offs_n <= t)
        pt = tl.where(ok[:, None], tl.exp2(st - lse[None, :]), 0.0)
        dv += tl.dot(pt, do, input_precision=TF)
        dpt = tl.dot(v, tl.trans(do), input_precision=TF)
        dst = pt * (dpt - delta[None, :])
        dk += tl.dot(dst, q, input_precision=TF)
    part = tl.program_id(2).to(tl.int64) * sdkc  # the chunk's slice of the partial sums
    tl.store(DK + part + k_off, dk * scale, mask=in_blk[:, None])
    tl.store(DV + part + v_off, dv, mask=in_blk[:, None])


def query_major(sel: torch.Tensor, width: int | None = None):
    """``sel (B, h_kv, L, n_s)`` bool -> ``(idx (B h_kv, L, W) int32, cnt (B h_kv, L) int32)``: each position's
    selected blocks, ascending, in its first ``cnt`` columns; ``W = min(width, n_s)`` (``width``: at most that many
    blocks per position, e.g. NSA's ``n``; the caller guarantees it)."""
    B, hkv, L, n_s = sel.shape
    sel = sel.reshape(B * hkv, L, n_s)
    W = n_s if width is None else max(1, min(int(width), n_s))
    cnt = sel.sum(-1, dtype=torch.int32)
    idx = torch.sort((~sel).to(torch.int8), dim=-1, stable=True).indices[..., :W]
    return idx.to(torch.int32).contiguous(), cnt.clamp(max=W)


def key_major(idx: torch.Tensor, cnt: torch.Tensor, n_s: int):
    """The transpose of ``query_major``: ``(tpos int32, toff (S n_s + 1) int64)``, the positions that selected
    block ``j`` of segment ``s`` ascending in ``tpos[toff[s n_s + j] : toff[s n_s + j + 1]]``. A stable sort of
    the ``S L W`` slots by segment and block (padding slots last), then offsets by ``searchsorted``: all on the
    device, no host synchronisation."""
    S, L, W = idx.shape
    slot = torch.arange(W, device=idx.device)
    seg = torch.arange(S, device=idx.device).view(S, 1, 1) * n_s + idx.long()
    key = torch.where(slot < cnt[..., None], seg, S * n_s).flatten()
    key, order = torch.sort(key, stable=True)  # slots in (s, t, i) order: positions ascending within a block
    tpos = ((order // W) % L).to(torch.int32)
    toff = torch.searchsorted(key, torch.arange(S * n_s + 1, device=idx.device))
    return tpos.contiguous(), toff.contiguous()


def _strides(*ts):
    return [s for t in ts for s in (t.stride(0), t.stride(1), t.stride(2))]


class _SelectedAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, idx, cnt, block, scale, n_s):
        B, h, L, d = q.shape
        h_kv = k.shape[1]
        G = h // h_kv
        n_rg = -(-G // GM)
        q, k, v = (t.contiguous() for t in (q, k, v))
        o = torch.empty_like(q)
        lse = torch.empty(B, h, L, dtype=torch.float32, device=q.device)
        m = meta(d, block)
        _slc_fwd[(L, B * h_kv * n_rg)](
            q,
            k,
            v,
            o,
            lse,
            idx,
            cnt,
            *_strides(q, k, v, o),
            h,
            h_kv,
            G,
            n_rg,
            L,
            idx.shape[-1],
            block,
            scale,
            HEAD_DIM=d,
            BLOCK_N=m["BLOCK_N"],
            GM=GM,
            num_warps=m["num_warps"],
            num_stages=m["num_stages"],
        )
        ctx.save_for_backward(q, k, v, o, lse, idx, cnt)
        ctx.args = (block, scale, n_s)
        return o

    @staticmethod
    def backward(ctx, do):
        q, k, v, o, lse, idx, cnt = ctx.saved_tensors
        block, scale, n_s = ctx.args
        B, h, L, d = q.shape
        h_kv = k.shape[1]
        G = h // h_kv
        n_rg = -(-G // GM)
        do = do.contiguous()
        delta = (do * o).sum(-1).contiguous()  # (B, h, L) fp32
        dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        strides = _strides(q, k, v, do)
        m = meta(d, block, "dq")
        _slc_bwd_dq[(L, B * h_kv * n_rg)](
            q,
            k,
            v,
            do,
            lse,
            delta,
            dq,
            idx,
            cnt,
            *strides,
            h,
            h_kv,
            G,
            n_rg,
            L,
            idx.shape[-1],
            block,
            scale,
            HEAD_DIM=d,
            BLOCK_N=m["BLOCK_N"],
            GM=GM,
            num_warps=m["num_warps"],
            num_stages=m["num_stages"],
        )
        tpos, toff = key_major(idx, cnt, n_s)
        m = meta(d, block, "dkdv")
        chunks = max(1, min(MAX_CHUNKS, -(-L // DKDV_CHUNK)))
        # (chunks, B, h_kv, L, d): one slice of partial sums per chunk of the position lists (dk itself if one)
        dkp, dvp = (
            (dk[None], dv[None]) if chunks == 1 else (torch.empty((chunks, *k.shape), device=k.device) for _ in "kv")
        )
        _slc_bwd_dkdv[(n_s * -(-block // m["BLOCK_N"]), B * h_kv, chunks)](
            q,
            k,
            v,
            do,
            lse,
            delta,
            dkp,
            dvp,
            tpos,
            toff,
            *strides,
            dkp.stride(0),
            h,
            h_kv,
            G,
            n_rg,
            L,
            n_s,
            -(-L // chunks),
            block,
            scale,
            HEAD_DIM=d,
            BLOCK_N=m["BLOCK_N"],
            GM=GM,
            num_warps=m["num_warps"],
            num_stages=m["num_stages"],
        )
        if chunks > 1:  # a fixed-order sum: deterministic
            dk, dv = dkp.sum(0), dvp.sum(0)
        return dq, dk, dv, None, None, None, None, None


def selected_triton(q, k, v, sel, block: int, *, max_blocks: int | None = None, scale: float | None = None):
    """``q (B, h, L, d)``, ``k, v (B, h_kv, L, d)`` fp32, ``sel (B, h_kv, L, n_s)`` bool (blocks of ``block``
    keys; at most ``max_blocks`` per position when given) -> ``(B, h, L, d)``; differentiable in q, k, v.
    A batch whose ``B h_kv cdiv(G, 16)`` exceeds grid y's limit runs as several launches."""
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    n_s = sel.shape[-1]
    G = q.shape[1] // k.shape[1]
    outs = []
    for part in batch_slices(q.shape[0], k.shape[1] * -(-G // GM), "K/V heads x row groups"):
        idx, cnt = query_major(sel[part], max_blocks)
        outs.append(_SelectedAttention.apply(q[part], k[part], v[part], idx, cnt, int(block), scale, n_s))
    return outs[0] if len(outs) == 1 else torch.cat(outs, 0)


def aot_specs(quick: bool):
    """Specialisations ``kernels.tools.aot_check`` compiles: per head width every ``BLOCK_N`` ``meta`` picks
    (fp32 only)."""
    ptrs = {n: "*fp32" for n in ("Q", "K", "V", "O", "DO", "DQ", "DK", "DV", "LSE", "DELTA")}
    ptrs.update({"IDX": "*i32", "CNT": "*i32", "TPOS": "*i32", "TOFF": "*i64"})
    ptrs.update({"s" + t + a: "i32" for t in ("q", "k", "v", "o", "do") for a in ("b", "h", "m", "n")})
    out = []
    for d in (64,) if quick else HEAD_DIMS:
        for fn, kernel in zip((_slc_fwd, _slc_bwd_dq, _slc_bwd_dkdv), KERNELS):
            for bn in sorted({meta(d, blk, kernel)["BLOCK_N"] for blk in (1, 16, 32, 64, 128)}):
                if quick and bn != 32:
                    continue
                m = meta(d, bn, kernel)
                consts = {"HEAD_DIM": d, "BLOCK_N": bn, "GM": GM}
                name = f"{fn.__name__} fp32 d{d} {GM}x{bn} w{m['num_warps']} s{m['num_stages']}"
                out.append((name, fn, ptrs, consts, m["num_warps"], m["num_stages"]))
    return out
