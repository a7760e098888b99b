"""Softmax attention whose query/key and value widths differ, through the shared kernels (``kernels.attention``).

``kernels.attention`` takes one head width for ``q``, ``k`` and ``v``, and its Triton kernel (CUDA) only the
widths ``KERNEL_HEAD_DIMS`` (the launcher's ``HEAD_DIMS``, every one compiled ahead of time by
``kernels.tools.aot_check``). Cores whose widths differ or are not among those (``mla``: queries and keys of
``qk_nope_head_dim + qk_rope_head_dim``, values of ``v_head_dim``; ``differential``: half-width queries and keys
against full-width values) call :func:`padded_attention`, which zero-pads the last dimension of all three to one
common width ``w`` and slices the output back:

    softmax(scale [q, 0] . [k, 0]) [v, 0] = [softmax(scale q . k) v, 0]

(zero columns add nothing to a dot product; ``scale`` is passed explicitly, so the padding does not change it).
``w`` is the smallest of ``KERNEL_HEAD_DIMS`` holding both widths, or the larger width when neither fits, on
every device: the CPU path (SDPA / the block-sparse PyTorch path) then computes on exactly the tensors the Triton
kernel gets on a GPU. Gradients flow through the padding (the padded columns' gradients are dropped).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

import kernels

# The Triton flash kernel's head widths (kernels/triton/flash/launcher.py HEAD_DIMS; a test keeps the two equal).
# Kept here so that the CPU path does not import triton.
KERNEL_HEAD_DIMS = (32, 64, 128)


def padded_width(d_qk: int, d_v: int) -> int:
    """The common width the three tensors are padded to: the smallest kernel width holding both, else the larger."""
    need = max(d_qk, d_v)
    return next((w for w in KERNEL_HEAD_DIMS if w >= need), need)


def _pad(t: torch.Tensor, width: int) -> torch.Tensor:
    return t if t.shape[-1] == width else F.pad(t, (0, width - t.shape[-1]))


def padded_attention(q, k, v, *, scale: float, causal: bool = False, softcap=None) -> torch.Tensor:
    """``softmax(scale q k^T [causal mask], softcap) v`` via ``kernels.attention``: ``q [B, h, Lq, d_qk]``,
    ``k [B, h_kv, Lk, d_qk]``, ``v [B, h_kv, Lk, d_v]`` -> ``[B, h, Lq, d_v]`` (GQA / MQA when ``h_kv < h``;
    queries are the last ``Lq`` key positions). The three are cast to their common dtype."""
    d_v = v.shape[-1]
    dtype = torch.promote_types(torch.promote_types(q.dtype, k.dtype), v.dtype)
    w = padded_width(q.shape[-1], d_v)
    q, k, v = (_pad(t.to(dtype), w) for t in (q, k, v))
    out = kernels.attention(q, k, v, causal=causal, softcap=softcap, scale=scale)
    return out[..., :d_v]
