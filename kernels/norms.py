"""Fused LayerNorm (Ba et al., 2016) and RMSNorm (Zhang & Sennrich, 2019) over the last dim.

Forward, one row per step: ``xhat = (x - mean) * rstd`` (LayerNorm; RMSNorm skips the mean and
uses ``rstd = 1 / sqrt(mean(x^2) + eps)``), ``y = xhat * w (+ b)``; ``rstd`` (and the mean) are
saved. Backward with ``g = dy * w``:
``dx = rstd * (g - xhat * mean(g * xhat) - mean(g))`` (the last term only for LayerNorm);
``dw = sum_rows dy * xhat``, ``db = sum_rows dy``: each program walks a strided set of rows,
keeps its partial dw / db in registers, and a final torch sum reduces the per-program partials.
The Triton kernels live in kernels/norms_triton.py, imported only on the Triton path.
"""
from __future__ import annotations

import torch


def _use_triton(x, force_triton):
    return x.is_cuda or force_triton


def layer_norm(x, weight, bias, eps: float = 1e-5, *, force_triton: bool = False):
    """LayerNorm over the last dim (Triton on CUDA or when ``force_triton``)."""
    if _use_triton(x, force_triton):
        from .norms_triton import _Norm  # triton is imported only on this path
        return _Norm.apply(x, weight, bias, float(eps), False)
    return layer_norm_ref(x, weight, bias, eps)


def rms_norm(x, weight, eps: float = 1e-5, *, force_triton: bool = False):
    """``x / sqrt(mean(x^2) + eps) * weight`` over the last dim."""
    if _use_triton(x, force_triton):
        from .norms_triton import _Norm  # triton is imported only on this path
        return _Norm.apply(x, weight, None, float(eps), True)
    return rms_norm_ref(x, weight, eps)


def _work_dtype(x):
    """float32, or the input's dtype when it is wider: a float64 input is never rounded to float32."""
    return torch.promote_types(x.dtype, torch.float32)


def layer_norm_ref(x, weight, bias, eps: float = 1e-5):
    work = _work_dtype(x)
    xf = x.to(work)
    mu = xf.mean(-1, keepdim=True)
    var = (xf - mu).pow(2).mean(-1, keepdim=True)
    y = (xf - mu) * torch.rsqrt(var + eps) * weight.to(work)
    return (y if bias is None else y + bias.to(work)).to(x.dtype)


def rms_norm_ref(x, weight, eps: float = 1e-5):
    xf = x.to(_work_dtype(x))
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * weight.to(xf.dtype)).to(x.dtype)

