"""Rotate-half RoPE in plain PyTorch (the CPU path and the tests' reference; formulas:
kernels/rope.py)."""

from __future__ import annotations

import torch


def apply_rope_ref(x: torch.Tensor, positions: torch.Tensor, base: float = 10000.0) -> torch.Tensor:
    """Plain PyTorch rotate-half RoPE (the CPU path and the test reference).

    Computed in float32, or in the input's dtype when it is wider (float64 stays float64)."""
    d = x.shape[-1]
    work = torch.promote_types(x.dtype, torch.float32) if x.dtype.is_floating_point else torch.float32
    inv = base ** (-torch.arange(0, d // 2, device=x.device, dtype=work) * 2 / d)
    ang = positions.to(x.device).to(work)[..., None] * inv  # (..., L, d/2): any broadcastable positions
    c, s = torch.cos(ang), torch.sin(ang)
    x1, x2 = x[..., : d // 2].to(work), x[..., d // 2 :].to(work)
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1).to(x.dtype)
