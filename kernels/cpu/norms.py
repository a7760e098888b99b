"""LayerNorm and RMSNorm in plain PyTorch (the CPU path and the tests' references; formulas:
kernels/norms.py)."""

from __future__ import annotations

import torch


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
