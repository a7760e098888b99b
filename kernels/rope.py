"""Fused rotary position embedding (Su et al., "RoFormer", 2021), rotate-half convention.

Dimension ``k < d/2`` pairs with ``k + d/2`` (GPT-NeoX / LLaMA layout) and rotates by
``pos * theta_k`` with ``theta_k = base^(-2k/d)``:
``y_k = x_k cos - x_{k+d/2} sin``, ``y_{k+d/2} = x_{k+d/2} cos + x_k sin``.
The backward is the inverse rotation (same kernel with ``sin`` negated). The angles are computed
in the kernel from the positions and a ``d/2`` table of frequencies, so no cos/sin table is
materialised.
The Triton kernel lives in kernels/rope_triton.py, imported only on the Triton path.
"""
from __future__ import annotations

import torch


def apply_rope(x: torch.Tensor, positions: torch.Tensor, base: float = 10000.0, *,
               force_triton: bool = False) -> torch.Tensor:
    """Rotate ``x [..., L, d]`` by ``positions [L]`` (Triton on CUDA or when ``force_triton``)."""
    if x.shape[-1] % 2 or positions.shape != (x.shape[-2],):
        raise ValueError(f"apply_rope: need even d and positions [L], got x {tuple(x.shape)}, "
                         f"positions {tuple(positions.shape)}")
    if x.is_cuda or force_triton:
        from .rope_triton import _Rope  # triton is imported only on this path
        return _Rope.apply(x, positions, float(base))
    return apply_rope_ref(x, positions, base)


def apply_rope_ref(x: torch.Tensor, positions: torch.Tensor, base: float = 10000.0) -> torch.Tensor:
    """Plain PyTorch rotate-half RoPE (the CPU path and the test reference).

    Computed in float32, or in the input's dtype when it is wider (float64 stays float64)."""
    d = x.shape[-1]
    work = torch.promote_types(x.dtype, torch.float32) if x.dtype.is_floating_point else torch.float32
    inv = base ** (-torch.arange(0, d // 2, device=x.device, dtype=work) * 2 / d)
    ang = positions.to(x.device).to(work)[..., None] * inv  # (..., L, d/2): any broadcastable positions
    c, s = torch.cos(ang), torch.sin(ang)
    x1, x2 = x[..., : d // 2].to(work), x[..., d // 2:].to(work)
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1).to(x.dtype)
