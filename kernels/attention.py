"""``kernels.attention``: the one attention entry point every model calls, on every device.

Dispatch:
- CUDA tensors whose arguments the Triton kernel supports -> FlashAttention-2-style Triton kernel
  (``kernels/triton/flash/launcher.py``), block-sparse when a ``BlockMask`` is given;
- everything else (CPU tensors, or ``rel_k`` / ``rel_v`` tables) -> the block-sparse PyTorch path
  (``kernels/cpu/attention.py``); a dense pattern without tables goes to
  ``scaled_dot_product_attention``.
Learned sinks (``sinks [h]``, ``kernels/reference.py``) run in the Triton kernel and in the
block-sparse PyTorch path (a dense pattern as its all-visited layout: SDPA has no sink term).
``attention_backend`` names the backend these arguments take, for benchmarks and plots;
``record_backends`` collects the names of the backends that really ran inside a ``with`` block;
``record_kernel_flops`` the forward FLOPs of the calls that ran in a Triton kernel (``attention_flops``:
no aten op does that work, so ``torch.utils.flop_counter`` cannot see it).
Score convention and reference: ``kernels/reference.py``.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import math

import torch
import torch.nn.functional as F

from .backend import triton_backend_name, triton_reason
from .block_mask import BlockMask, _device_key, block_mask_from_rows
from .cpu.attention import block_sparse_attention
from .reference import attention_ref, relative_positions

__all__ = [
    "attention",
    "attention_backend",
    "attention_ref",
    "attention_flops",
    "record_backends",
    "record_kernel_flops",
]

# Per thread / asyncio task (a ContextVar, never shared between users): the list that
# ``record_backends`` hands out, or None when nobody is recording.
_RECORDER: contextvars.ContextVar = contextvars.ContextVar("kernels_attention_backends", default=None)


@contextlib.contextmanager
def _recording(var: contextvars.ContextVar):
    """A fresh list set as ``var`` for this thread / task while the block runs."""
    out: list = []
    token = var.set(out)
    try:
        yield out
    finally:
        var.reset(token)


def record_backends():
    """``with record_backends() as ran:`` -> ``ran`` lists the backend name of every
    ``attention`` call made inside the block by this thread, in call order (the names of
    ``attention_backend``: "triton (sm_90) block-sparse", "sdpa (cpu)", "torch-cpu block-sparse"), and of
    every ``kernels.selected_attention`` call that ran its Triton kernel ("triton (sm_90) nsa-selected"; its
    PyTorch path is an ``attention`` call)."""
    return _recording(_RECORDER)


_FLOPS: contextvars.ContextVar = contextvars.ContextVar("kernels_attention_flops", default=None)


def record_kernel_flops():
    """``with record_kernel_flops() as flops:`` -> ``flops`` lists ``attention_flops`` of every
    ``attention`` call made inside the block by this thread that ran in a Triton kernel (and
    ``kernels.selected.selected_flops`` of every ``selected_attention`` call that did)."""
    return _recording(_FLOPS)


def attention_flops(q_shape, k_shape, causal: bool = False, block_mask: BlockMask | None = None) -> int:
    """Forward FLOPs in the FlashAttention convention: ``4 B h Lq Lk d`` (two matrix products),
    halved for causal; with a ``BlockMask``, ``4 B h d`` per query-key pair of the tiles it computes
    (its layout already holds any causal cut). ``h``: query heads."""
    B, h, lq, d = (int(n) for n in q_shape)
    if block_mask is not None:
        pairs = int(block_mask.kv_counts.sum()) * block_mask.block_q * block_mask.block_k
        return 4 * B * h * d * pairs
    flops = 4 * B * h * lq * int(k_shape[2]) * d
    return flops // 2 if causal else flops


def _ran(name_fn) -> None:
    ran = _RECORDER.get()
    if ran is not None:
        ran.append(name_fn())


def _triton_reason(device, q, k, v, block_mask=None, rel_k=None, rel_v=None, sinks=None) -> str | None:
    """None when the Triton kernel runs these arguments on ``device``, else why the torch path is used."""
    return triton_reason(
        device, "flash.launcher", q, k, v, block_mask=block_mask, rel_k=rel_k, rel_v=rel_v, sinks=sinks
    )


def attention_backend(
    device,
    *,
    block_mask: BlockMask | None = None,
    rel_k=None,
    rel_v=None,
    softcap=None,
    sinks=None,
    head_dim: int = 64,
    dtype=torch.float32,
    **_,
) -> str:
    """Human-readable name of the backend ``attention`` runs for arguments of this kind."""
    device = torch.device(device)
    if device.type == "cuda":  # ask the kernel about shape-only (meta) stand-ins of the arguments
        lq, lk = (1, 1) if block_mask is None else (block_mask.q_len, block_mask.k_len)
        q = torch.empty(1, 1, lq, head_dim, dtype=dtype, device="meta")
        k = torch.empty(1, 1, lk, head_dim, dtype=dtype, device="meta")
        s = None if sinks is None else torch.empty(1, dtype=torch.float32, device="meta")
        if _triton_reason(device, q, k, k, block_mask, rel_k, rel_v, s) is None:
            return triton_backend_name(device) + (" block-sparse" if block_mask is not None else "")
    if block_mask is None and rel_k is None and rel_v is None and softcap is None and sinks is None:
        return f"sdpa ({device.type})"
    return f"torch-{device.type} block-sparse"


def _check(q, k, v, block_mask):
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError(f"attention expects 4-D q, k, v [B, h, L, d]; got {q.shape}, {k.shape}, {v.shape}")
    if k.shape != v.shape or q.shape[0] != k.shape[0] or q.shape[3] != k.shape[3]:
        raise ValueError(f"q {tuple(q.shape)} and k/v {tuple(k.shape)}/{tuple(v.shape)} do not match")
    if q.shape[1] % k.shape[1]:
        raise ValueError(f"query heads ({q.shape[1]}) must be a multiple of K/V heads ({k.shape[1]})")
    if q.shape[2] > k.shape[2]:
        raise ValueError(f"Lq={q.shape[2]} > Lk={k.shape[2]}: queries are the last Lq key positions")
    if block_mask is not None and (block_mask.q_len, block_mask.k_len) != (q.shape[2], k.shape[2]):
        raise ValueError(
            f"block mask is for {(block_mask.q_len, block_mask.k_len)}, inputs are {(q.shape[2], k.shape[2])}"
        )


def attention(
    q,
    k,
    v,
    *,
    causal=False,
    block_mask: BlockMask | None = None,
    alibi_slopes=None,
    rel_bias=None,
    softcap=None,
    scale=None,
    rel_k=None,
    rel_v=None,
    pair_bias=None,
    sinks=None,
):
    """Differentiable attention ``q [B, h, Lq, d]``, ``k, v [B, h_kv, Lk, d]`` -> ``[B, h, Lq, d]``;
    ``sinks [h]``: learned sink logits, differentiable (``kernels/reference.py``)."""
    _check(q, k, v, block_mask)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    if pair_bias is not None:  # a full per-pair term (DeBERTa, TUPE): the dense reference, every device
        _ran(lambda: f"torch-{q.device.type} dense (pair_bias)")
        return attention_ref(
            q,
            k,
            v,
            causal=causal,
            block_mask=block_mask,
            alibi_slopes=alibi_slopes,
            rel_bias=rel_bias,
            softcap=softcap,
            scale=scale,
            rel_k=rel_k,
            rel_v=rel_v,
            pair_bias=pair_bias,
            sinks=sinks,
        )[0]
    if _triton_reason(q.device, q, k, v, block_mask, rel_k, rel_v, sinks) is None:
        from .triton.flash.launcher import flash_attention

        _ran(lambda: triton_backend_name(q.device) + (" block-sparse" if block_mask is not None else ""))
        if (flops := _FLOPS.get()) is not None:
            flops.append(attention_flops(q.shape, k.shape, causal, block_mask))
        return flash_attention(
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
    if block_mask is None and rel_k is None and rel_v is None and softcap is None and sinks is None:
        _ran(lambda: f"sdpa ({q.device.type})")
        return _sdpa(q, k, v, causal=causal, alibi_slopes=alibi_slopes, rel_bias=rel_bias, scale=scale)
    if block_mask is None:  # dense pattern with tables, softcap or sinks: one all-visited layout
        block_mask = _dense_layout(q.shape[2], k.shape[2], q.device)
    _ran(lambda: f"torch-{q.device.type} block-sparse")
    return block_sparse_attention(
        q,
        k,
        v,
        block_mask,
        causal=causal,
        scale=scale,
        alibi_slopes=alibi_slopes,
        rel_bias=rel_bias,
        softcap=softcap,
        rel_k=rel_k,
        rel_v=rel_v,
        sinks=sinks,
    )


def _dense_layout(lq: int, lk: int, device) -> BlockMask:
    """The all-visited layout of ``lq x lk`` on ``device``, made once per shape and device (with
    its plan memo), as a model's pattern layouts are, not once per layer and call."""
    return _dense_layout_on(lq, lk, _device_key(device))


@functools.lru_cache(maxsize=4)  # a dense layout's plan holds its partial tiles' masks: keep few
def _dense_layout_on(lq: int, lk: int, device: str) -> BlockMask:
    def every_key(a, b):
        return torch.ones(b - a, lk, dtype=torch.bool, device=device)

    return block_mask_from_rows(every_key, lq, lk, 64, device)


def _sdpa(q, k, v, *, causal, alibi_slopes, rel_bias, scale):
    lq, lk = q.shape[2], k.shape[2]
    gqa = q.shape[1] != k.shape[1]
    if alibi_slopes is None and rel_bias is None:
        if not causal or lq == lk:  # SDPA's is_causal is top-left aligned: only valid for Lq == Lk
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale, enable_gqa=gqa)
    rel = relative_positions(lq, lk, q.device)
    bias = torch.zeros(
        q.shape[1] if (alibi_slopes is not None or rel_bias is not None) else 1, lq, lk, dtype=q.dtype, device=q.device
    )
    if rel_bias is not None:
        bias = bias + rel_bias[:, rel + lk - 1].to(q.dtype)
    if alibi_slopes is not None:
        bias = bias - alibi_slopes.to(q.dtype)[:, None, None] * rel.abs().to(q.dtype)
    if causal:
        bias = bias.masked_fill(rel > 0, float("-inf"))
    return F.scaled_dot_product_attention(q, k, v, attn_mask=bias[None], scale=scale, enable_gqa=gqa)
