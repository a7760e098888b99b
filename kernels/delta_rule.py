"""``kernels.gated_delta_rule``: the gated delta rule (Yang, Kautz & Hatamizadeh, ICLR 2025, "Gated Delta
Networks"; chunked as in Yang et al., NeurIPS 2024, "Parallelizing Linear Transformers with the Delta Rule over
Sequence Length") on every device, with its decoding step and its dense map.

Convention (recurrence, chunked WY / UT form, dense map): ``kernels/cpu/delta_rule.py``. Shapes: ``q, k (B, h,
L, K)`` already L2-normalised and scaled by the caller, ``v (B, h, L, V)``, ``beta, g (B, h, L)`` (``g <= 0``: the
log decay), state ``(B, h, K, V)``; output ``(B, h, L, V)``.

Dispatch: one backend today, the chunked PyTorch form (``cpu``), on every device (on CUDA its matrix products and
triangular solves run as cuBLAS / cuSOLVER calls). A Triton backend would be one more branch in
``gated_delta_backend`` and its module under ``kernels/triton/``, taking the same arguments.
"""

from __future__ import annotations

from .cpu.delta_rule import gated_delta_chunked, gated_delta_map, gated_delta_step

__all__ = ["gated_delta_rule", "gated_delta_backend", "gated_delta_step", "gated_delta_map"]


def gated_delta_backend(q) -> str:
    """The backend ``gated_delta_rule`` runs for these inputs: ``"torch (chunked)"`` for now (module docstring)."""
    return "torch (chunked)"


def gated_delta_rule(q, k, v, beta, g, *, chunk: int = 64, initial_state=None, return_state: bool = False):
    """``o (B, h, L, V)`` [, final state ``(B, h, K, V)``] of the gated delta rule (module docstring); ``chunk``
    changes the speed, never the function."""
    return gated_delta_chunked(q, k, v, beta, g, chunk=chunk, initial_state=initial_state, return_state=return_state)
