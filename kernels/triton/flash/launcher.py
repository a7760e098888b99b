"""Block-sparse FlashAttention-2 (Dao 2023) in Triton: launcher and public function.

The kernels live in fwd.py / bwd.py (algorithm in common.py). This module
checks arguments, fetches the BlockMask's memoised plan (full / partial block lists in query- and
key-major order, int8 partial tiles: kernels/triton/flash/plan.py), and wraps the launches in a
``torch.autograd.Function``. The same code runs on CUDA tensors (compiled) and on
CPU tensors under ``TRITON_INTERPRET=1`` (interpreted; used by the tests).

Supported: fp16 / bf16 with head dim 32, 64, 128; fp32 with head dim 32, 64; any Lq <= Lk (masked tails); causal;
GQA / MQA; a BlockMask with block sizes in {16, 32, 64, 128}; ALiBi slopes; rel_bias (with
gradient); soft-capping; learned sinks ``[h]`` (gpt-oss; with gradient: the forward folds the sink
into the saved log-sum-exp, so the dQ / dK / dV kernels are unchanged, and
``d sink_n = -sum_{b, i} p_sink_i (dO_i . O_i)`` with ``p_sink_i = 2^(s_n log2(e) - lse_i)`` is a
reduction in PyTorch over the ``delta = rowsum(dO * O)`` the backward computes anyway).
Not supported here (the torch path handles them): rel_k / rel_v.
The kernels' grid y is ``B * h``; a batch with more than 65535 of them runs as several launches
over batch slices (kernels/triton/grid_limits.py).
"""

from __future__ import annotations

import math

import torch
import triton

from ..grid_limits import batch_slices
from .bwd import _attn_bwd_dkdv, _attn_bwd_dq, _attn_bwd_preprocess
from .common import DENSE_LAYOUT, dense_meta, drb_meta, sparse_meta
from .fwd import _attn_fwd
from .plan import triton_plan

HEAD_DIMS = (32, 64, 128)
BLOCK_SIZES = (16, 32, 64, 128)  # BlockMask tiles the kernels handle (the interpreter runs any)
# BlockMask tiles run on a GPU: exactly the ones kernels.tools.aot_check compiles (the models' 64 x 64).
# A layout tile is a compile-time constant of the sparse kernels, so every tile added here is one
# more set of specialisations for the AOT check; other tiles take the torch path on CUDA.
GPU_LAYOUTS = ((64, 64),)
DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def unsupported_reason(q, k, v, *, block_mask=None, rel_k=None, rel_v=None, **_) -> str | None:
    """Why the Triton kernel cannot run these arguments (None if it can). For the dispatcher."""
    if rel_k is not None or rel_v is not None:
        return "rel_k / rel_v are not fused in the Triton kernel"
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        return "q, k, v must be 4-D [B, h, L, d]"
    if not (q.dtype == k.dtype == v.dtype) or q.dtype not in DTYPES:
        return f"dtype {q.dtype} / {k.dtype} / {v.dtype} not supported"
    B, h, lq, d = q.shape
    if k.shape != v.shape or k.shape[0] != B or k.shape[3] != d or h % k.shape[1] != 0:
        return f"incompatible shapes q {tuple(q.shape)} k {tuple(k.shape)} v {tuple(v.shape)}"
    if d not in HEAD_DIMS:
        return f"head dim {d} not in {HEAD_DIMS}"
    if lq > k.shape[2]:
        return "Lq > Lk"
    if block_mask is not None:
        tile = (block_mask.block_q, block_mask.block_k)
        if tile[0] not in BLOCK_SIZES or tile[1] not in BLOCK_SIZES:
            return f"block mask tile {tile[0]}x{tile[1]} not in {BLOCK_SIZES}"
        if q.device.type != "cpu" and tile not in GPU_LAYOUTS:
            return f"block mask tile {tile[0]}x{tile[1]} is not compiled for the GPU (compiled: {GPU_LAYOUTS})"
        if (block_mask.q_len, block_mask.k_len) != (lq, k.shape[2]):
            return f"block mask is {block_mask.q_len}x{block_mask.k_len}, attention {lq}x{k.shape[2]}"
    return None


def rel_bias_grad(scratch: torch.Tensor, B: int, h: int, lq: int, lk: int, bm: int, bn: int):
    """d rel_bias ``[h, 2 Lk - 1]`` from the dQ kernel's per-tile diagonal sums.

    ``scratch [B h, n_qb, n_kb, DW]``: entry ``t`` of tile ``(qb, kb)`` is the sum of ``ds`` over
    the tile's diagonal ``j - i = kb bn - qb bm + t - (bm - 1)``. Two overlap-adds (``F.fold``,
    which computes every output as a sum over its contributors: no atomics, deterministic) place
    the tiles along the keys (hop ``bn``) and then the query blocks (hop ``bm``, reversed so the
    offset grows), then the batch is summed.
    """
    import torch.nn.functional as F

    bh, nqb, nkb, dw = scratch.shape
    row = (nkb - 1) * bn + dw  # per query block: offsets kb bn + t
    x = scratch.reshape(bh * nqb, nkb, dw).transpose(1, 2)  # (B h n_qb, DW, n_kb) fold columns
    rows = F.fold(x, (1, row), (1, dw), stride=(1, bn)).reshape(bh, nqb, row)
    # Query block qb shifts its row by -qb bm: reverse the blocks so the shift is (n_qb-1-qb) bm.
    y = rows.flip(1).transpose(1, 2)  # (B h, row, n_qb)
    width = (nqb - 1) * bm + row
    full = F.fold(y, (1, width), (1, row), stride=(1, bm)).reshape(B, h, width).sum(0)  # (h, width)
    # Position p of `full` is diagonal j - i_local = p - (n_qb - 1) bm - (bm - 1); the table index
    # is j - (i + off) + Lk - 1 with off = Lk - Lq, i.e. p - (n_qb - 1) bm - bm + Lq.
    start = (nqb - 1) * bm + bm - lq  # p of table index 0 (may be negative: padded on the left)
    pad_left = max(0, -start)
    full = F.pad(full, (pad_left, max(0, start + 2 * lk - 1 - width)))
    start += pad_left
    return full[:, start : start + 2 * lk - 1]


def dkdv_split(device, n_programs: int, group: int) -> int:
    """Programs per K/V head for the dK/dV kernel: split the GQA group when ``B * h_kv *
    cdiv(Lk, BLOCK_N)`` programs would leave SMs idle (GQA / MQA at batch 1). The largest divisor
    of ``group`` not above ``ceil(SMs / n_programs)``; 1 off CUDA (the interpreter) or without GQA."""
    if group == 1 or torch.device(device).type != "cuda":
        return 1
    sms = torch.cuda.get_device_properties(device).multi_processor_count
    want = -(-sms // max(1, n_programs))
    return max(s for s in range(1, group + 1) if group % s == 0 and s <= want)


class _FlashAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, rel_bias, causal, bm, alibi_slopes, softcap, scale, config, split, sinks=None):
        B, h, lq, d = q.shape
        h_kv, lk = k.shape[1], k.shape[2]
        q, k, v = (_kernel_layout(t) for t in (q, k, v))
        o = torch.empty_like(q, memory_format=torch.contiguous_format)
        lse = torch.empty(B, h, lq, dtype=torch.float32, device=q.device)  # (B, h, Lq)
        dummy = torch.zeros(1, dtype=torch.float32, device=q.device)
        has_mod = alibi_slopes is not None or rel_bias is not None or softcap is not None
        # Slopes of 0 switch ALiBi off inside a modifier-enabled kernel.
        slopes = (
            torch.zeros(h, dtype=torch.float32, device=q.device)
            if alibi_slopes is None
            else alibi_slopes.detach().float().contiguous()
        )
        relb = dummy if rel_bias is None else rel_bias.detach().float().contiguous()
        sink = dummy if sinks is None else sinks.detach().float().contiguous()  # (h,) natural-log units
        if bm is not None:
            plan = triton_plan(bm, causal, q.device)  # memoised on the BlockMask
            layout = (plan.q_major, plan.tiles, plan.q_major.shape[1], plan.q_mf, plan.q_mp)
            kernel, meta = _attn_fwd, sparse_meta(d, q.element_size(), bm.block_q, bm.block_k, "fwd", has_mod)
        else:
            i32 = torch.zeros(1, dtype=torch.int32, device=q.device)
            layout = (i32, i32.to(torch.int8), 0, 0, 0)
            kernel, meta = _attn_fwd, {**dense_meta(d, q.element_size(), False, has_mod), **DENSE_LAYOUT}
        if config is not None:
            kernel, meta = _attn_fwd, {**config, **DENSE_LAYOUT}
        kernel[(triton.cdiv(lq, meta["BLOCK_M"]), B * h)](
            q,
            k,
            v,
            o,
            lse,
            slopes,
            relb,
            sink,
            *layout[:2],
            q.stride(0),
            q.stride(1),
            q.stride(2),
            k.stride(0),
            k.stride(1),
            k.stride(2),
            v.stride(0),
            v.stride(1),
            v.stride(2),
            o.stride(0),
            o.stride(1),
            o.stride(2),
            h,
            h // h_kv,
            lq,
            lk,
            *layout[2:],
            int(causal),
            scale,
            0.0 if softcap is None else softcap,
            int(rel_bias is not None),
            int(sinks is not None),
            HEAD_DIM=d,
            SPARSE=bm is not None,
            HAS_MOD=has_mod,
            IEEE=q.dtype == torch.float32,
            **meta,
        )
        ctx.save_for_backward(q, k, v, o, lse, slopes, relb, sink)
        ctx.sink_dtype = None if sinks is None else sinks.dtype
        ctx.args = (
            causal,
            bm,
            has_mod,
            rel_bias is not None,
            rel_bias.dtype if rel_bias is not None else None,
            softcap,
            scale,
            config,
            split,
        )
        return o

    @staticmethod
    def backward(ctx, do):
        q, k, v, o, lse, slopes, relb, sink = ctx.saved_tensors
        causal, bm, has_mod, has_relb, relb_dtype, softcap, scale, config, split = ctx.args
        B, h, lq, d = q.shape
        h_kv, lk = k.shape[1], k.shape[2]
        do = do if do.stride(-1) == 1 else do.contiguous()
        delta = torch.empty_like(lse)  # (B, h, Lq): rowsum(do * o)
        _attn_bwd_preprocess[(triton.cdiv(lq, 64), B * h)](
            o,
            do,
            delta,
            o.stride(0),
            o.stride(1),
            o.stride(2),
            do.stride(0),
            do.stride(1),
            do.stride(2),
            h,
            lq,
            HEAD_DIM=d,
            BLOCK_M=64,
        )
        dq = torch.empty(q.shape, dtype=q.dtype, device=q.device)
        dk = torch.empty(k.shape, dtype=k.dtype, device=k.device)
        dv = torch.empty(v.shape, dtype=v.dtype, device=v.device)
        need_drb = has_relb and ctx.needs_input_grad[3]
        drb = torch.zeros(1, dtype=torch.float32, device=q.device)
        flags = dict(HEAD_DIM=d, SPARSE=bm is not None, HAS_MOD=has_mod, IEEE=q.dtype == torch.float32)
        runtime = (int(causal), scale, 0.0 if softcap is None else softcap, int(has_relb))
        if bm is not None:
            plan = triton_plan(bm, causal, q.device)
            fwd_layout = (plan.q_major, plan.q_major.shape[1], plan.q_mf, plan.q_mp)
            key_layout = (plan.k_major, plan.k_major.shape[1], plan.k_mf, plan.k_mp)
            tiles = plan.tiles
            k_dkdv, k_dq = _attn_bwd_dkdv, _attn_bwd_dq
            meta_dkdv, meta_dq = (
                sparse_meta(d, q.element_size(), bm.block_q, bm.block_k, kern, has_mod) for kern in ("dkdv", "dq")
            )
        else:
            i32 = torch.zeros(1, dtype=torch.int32, device=q.device)
            fwd_layout = key_layout = (i32, 0, 0, 0)
            tiles = i32.to(torch.int8)
            k_dkdv, k_dq = _attn_bwd_dkdv, _attn_bwd_dq
            meta_dkdv = meta_dq = {**dense_meta(d, q.element_size(), True, has_mod), **DENSE_LAYOUT}
        if config is not None:
            meta_dkdv = meta_dq = {**config, **DENSE_LAYOUT}
            k_dkdv, k_dq = _attn_bwd_dkdv, _attn_bwd_dq
        common = (q, k, v, do, lse, delta, slopes, relb)
        strides = (
            q.stride(0),
            q.stride(1),
            q.stride(2),
            k.stride(0),
            k.stride(1),
            k.stride(2),
            v.stride(0),
            v.stride(1),
            v.stride(2),
            do.stride(0),
            do.stride(1),
            do.stride(2),
        )
        n_kb = triton.cdiv(lk, meta_dkdv["BLOCK_N"])
        n_split = split if split is not None else dkdv_split(q.device, B * h_kv * n_kb, h // h_kv)
        # (n_split, B, h_kv, Lk, d): one slice of partial sums per split of the GQA group.
        dkp, dvp = (
            (dk[None], dv[None])
            if n_split == 1
            else (torch.empty((n_split, *k.shape), dtype=k.dtype, device=k.device) for _ in range(2))
        )
        k_dkdv[(n_kb, B * h_kv, n_split)](
            *common,
            dkp,
            dvp,
            key_layout[0],
            tiles,
            *strides,
            dkp.stride(0),
            dkp.stride(1),
            dkp.stride(2),
            dkp.stride(3),
            h,
            h // h_kv,
            h // h_kv // n_split,
            lq,
            lk,
            *key_layout[1:],
            *runtime,
            **flags,
            **meta_dkdv,
        )
        if n_split > 1:  # fixed-order fp32 sum of the partials: deterministic
            dk = dkp.float().sum(0).to(k.dtype)
            dv = dvp.float().sum(0).to(v.dtype)
        if need_drb:  # zeros: tiles a query block does not visit contribute nothing
            meta_dq = drb_meta(meta_dq) if config is None else meta_dq
            drb = torch.zeros(
                B * h,
                triton.cdiv(lq, meta_dq["BLOCK_M"]),
                triton.cdiv(lk, meta_dq["BLOCK_N"]),
                2 * max(meta_dq["BLOCK_M"], meta_dq["BLOCK_N"]),
                dtype=torch.float32,
                device=q.device,
            )  # (B h, n_qb, n_kb, DW)
        k_dq[(triton.cdiv(lq, meta_dq["BLOCK_M"]), B * h)](
            *common,
            dq,
            drb,
            fwd_layout[0],
            tiles,
            *strides,
            dq.stride(0),
            dq.stride(1),
            dq.stride(2),
            h,
            h // h_kv,
            lq,
            lk,
            *fwd_layout[1:],
            *runtime,
            **flags,
            **meta_dq,
            NEED_DRB=need_drb,
        )
        d_rel = (
            rel_bias_grad(drb, B, h, lq, lk, meta_dq["BLOCK_M"], meta_dq["BLOCK_N"]).to(relb_dtype)
            if need_drb
            else None
        )
        d_sink = None
        if ctx.sink_dtype is not None and ctx.needs_input_grad[11]:
            # p_sink (B, h, Lq) from the base-2 lse; d s_n = -sum_{b, i} p_sink_i delta_i
            p_sink = torch.exp2(sink.view(1, h, 1) * 1.4426950408889634 - lse)
            d_sink = -(p_sink * delta).sum((0, 2)).to(ctx.sink_dtype)
        return dq, dk, dv, d_rel, None, None, None, None, None, None, None, d_sink


def _kernel_layout(t: torch.Tensor) -> torch.Tensor:
    """``t`` as the kernels read it: unit stride along d, and offsets inside one head (``row *
    stride``, computed in int32; the batch / head offsets are int64) below 2^31; else a copy."""
    if t.stride(-1) == 1 and t.shape[2] * t.stride(2) < 2**31:
        return t
    return t.contiguous()


def check_modifiers(q, k, alibi_slopes=None, rel_bias=None, sinks=None) -> None:
    """Raise ValueError naming the argument when ``alibi_slopes`` or ``sinks`` is not ``[h]`` or ``rel_bias`` not
    ``[h, 2 Lk - 1]`` floats on q's device: the kernels read them through raw pointers, so a wrong
    shape would read out of bounds instead of failing."""
    h, lk = q.shape[1], k.shape[2]
    checks = (("alibi_slopes", alibi_slopes, (h,)), ("rel_bias", rel_bias, (h, 2 * lk - 1)), ("sinks", sinks, (h,)))
    for name, t, want in checks:
        if t is None:
            continue
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"flash_attention: {name} must be a tensor of shape {list(want)}, got {type(t).__name__}")
        if tuple(t.shape) != want:
            expected = "[h, 2 Lk - 1]" if name == "rel_bias" else "[h]"
            raise ValueError(
                f"flash_attention: {name} must have shape {expected} = {list(want)} "
                f"(h = {h} query heads, Lk = {lk}), got {list(t.shape)}"
            )
        if not t.dtype.is_floating_point:
            raise ValueError(f"flash_attention: {name} must be a floating-point tensor, got {t.dtype}")
        if t.device != q.device:
            raise ValueError(f"flash_attention: {name} is on {t.device}, q on {q.device}; put both on one device")


def _flash(
    q,
    k,
    v,
    *,
    causal=False,
    block_mask=None,
    alibi_slopes=None,
    rel_bias=None,
    softcap=None,
    scale=None,
    config=None,
    split=None,
    sinks=None,
):
    """``flash_attention`` with an optional fixed tile ``config`` (dict with BLOCK_M, BLOCK_N,
    num_warps, num_stages) instead of the lookup, and an optional GQA-group ``split`` of the dK/dV
    kernel instead of :func:`dkdv_split`'s; tests use them to cover several shapes."""
    reason = unsupported_reason(q, k, v, block_mask=block_mask)
    if reason is not None:
        raise ValueError(f"flash_attention: {reason}")
    if block_mask is not None and config is not None:
        raise ValueError("a block mask fixes the tile size; pass no config")
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    bm = None if block_mask is None else block_mask.to(q.device)
    softcap = None if softcap is None else float(softcap)
    if split is not None and (k.shape[1] == 0 or (q.shape[1] // k.shape[1]) % split):
        raise ValueError(f"split {split} must divide the GQA group {q.shape[1] // k.shape[1]}")
    check_modifiers(q, k, alibi_slopes, rel_bias, sinks)
    # Grid y is B * h (at most 65535 on CUDA): a larger batch runs as several launches.
    parts = batch_slices(q.shape[0], q.shape[1], "query heads")
    outs = [
        _FlashAttention.apply(
            q[s], k[s], v[s], rel_bias, bool(causal), bm, alibi_slopes, softcap, scale, config, split, sinks
        )
        for s in parts
    ]
    return outs[0] if len(outs) == 1 else torch.cat(outs, 0)


def flash_attention(
    q, k, v, *, causal=False, block_mask=None, alibi_slopes=None, rel_bias=None, softcap=None, scale=None, sinks=None
):
    """Attention of kernels/reference.py computed by the Triton kernels on ``q``'s device.

    ``q [B, h, Lq, d]``, ``k, v [B, h_kv, Lk, d]`` -> ``[B, h, Lq, d]``. Differentiable in q, k, v,
    ``rel_bias [h, 2 Lk - 1]`` and the learned sink logits ``sinks [h]``.
    Raises ValueError for arguments the kernel does not support (see :func:`unsupported_reason`) and
    for modifier tensors of the wrong shape, dtype or device (:func:`check_modifiers`).
    """
    return _flash(
        q,
        k,
        v,
        causal=causal,
        block_mask=block_mask,
        alibi_slopes=alibi_slopes,
        rel_bias=rel_bias,
        softcap=softcap,
        scale=scale,
        sinks=sinks,
    )
