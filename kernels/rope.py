"""Fused rotary position embedding (Su et al., "RoFormer", 2021), rotate-half convention.

Dimension ``k < d/2`` pairs with ``k + d/2`` (GPT-NeoX / LLaMA layout) and rotates by
``pos * theta_k`` with ``theta_k = base^(-2k/d)``:
``y_k = x_k cos - x_{k+d/2} sin``, ``y_{k+d/2} = x_{k+d/2} cos + x_k sin``.
The backward is the inverse rotation (same kernel with ``sin`` negated). The angles are computed
in the kernel from the positions and a ``d/2`` table of frequencies, so no cos/sin table is
materialised.
The Triton kernel lives in kernels/triton/rope.py, imported only on the Triton path; the PyTorch
path in kernels/cpu/rope.py.
"""

from __future__ import annotations

import torch

from .backend import triton_reason
from .cpu.rope import apply_rope_ref


def apply_rope(
    x: torch.Tensor, positions: torch.Tensor, base: float = 10000.0, *, force_triton: bool = False
) -> torch.Tensor:
    """Rotate ``x [..., L, d]`` by ``positions [L]`` (Triton on CUDA or when ``force_triton``)."""
    if x.shape[-1] % 2 or positions.shape != (x.shape[-2],):
        raise ValueError(
            f"apply_rope: need even d and positions [L], got x {tuple(x.shape)}, positions {tuple(positions.shape)}"
        )
    if triton_reason(x.device, "rope", force=force_triton) is None:
        from .triton.rope import _Rope

        return _Rope.apply(x, positions, float(base))
    return apply_rope_ref(x, positions, base)
