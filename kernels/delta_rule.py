"""``kernels.gated_delta_rule``: the gated delta rule (Yang, Kautz & Hatamizadeh, ICLR 2025, "Gated Delta
Networks"; chunked as in Yang et al., NeurIPS 2024, "Parallelizing Linear Transformers with the Delta Rule over
Sequence Length") on every device, with its decoding step and its dense map.

Convention (recurrence, chunked WY / UT form, dense map): ``kernels/cpu/delta_rule.py``. Shapes: ``q, k (B, h,
L, K)`` already L2-normalised and scaled by the caller, ``v (B, h, L, V)``, ``beta, g (B, h, L)`` (``g <= 0``: the
log decay), state ``(B, h, K, V)``; output ``(B, h, L, V)``.

Dispatch, decided once per call by ``backend.triton_reason`` (as ``kernels/ssd.py``):
- CUDA tensors in fp32 / fp16 / bf16 with a chunk the kernels are compiled for (16, 32, 64; key widths up to 256,
  up to 128 at chunk 64, where a wider key runs at chunk 32: the chunk is speed only) -> the Triton kernels of
  ``kernels/triton/delta_rule/`` (forward and backward: per-chunk T by forward substitution, the sequential state
  walks, the per-chunk outputs and gradients; computed in fp32);
- everything else (a CPU, float64) -> the chunked PyTorch form (``kernels/cpu/delta_rule.py``), differentiated
  by autograd.
``gated_delta_backend`` names the path, and a Triton run is recorded for ``kernels.record_backends``.
"""

from __future__ import annotations

import torch

from .attention import _ran
from .backend import triton_backend_name, triton_reason
from .cpu.delta_rule import gated_delta_chunked, gated_delta_map, gated_delta_step

__all__ = ["gated_delta_rule", "gated_delta_backend", "gated_delta_step", "gated_delta_map"]


_TRITON_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _triton_chunk(q, chunk: int) -> int | None:
    """The chunk the Triton kernels run ``q`` at (``chunk``, or 32 for a key too wide at 64), or None: PyTorch."""
    if q.dtype not in _TRITON_DTYPES:
        return None
    for c in (int(chunk), 32) if int(chunk) == 64 else (int(chunk),):
        if triton_reason(q.device, "delta_rule", q, chunk=c) is None:
            return c
    return None


def gated_delta_backend(q, chunk: int = 64) -> str:
    """The backend ``gated_delta_rule`` runs for these inputs (module docstring)."""
    c = _triton_chunk(q, chunk)
    if c is not None:
        return f"{triton_backend_name(q.device)} gated-delta (chunk {c})"
    return f"torch-{q.device.type} chunked"


def gated_delta_rule(q, k, v, beta, g, *, chunk: int = 64, initial_state=None, return_state: bool = False):
    """``o (B, h, L, V)`` [, final state ``(B, h, K, V)``] of the gated delta rule (module docstring); ``chunk``
    changes the speed, never the function."""
    c = _triton_chunk(q, chunk)
    if c is not None:
        from .triton.delta_rule import gated_delta_triton

        _ran(lambda: gated_delta_backend(q, chunk))
        return gated_delta_triton(q, k, v, beta, g, chunk=c, initial_state=initial_state, return_state=return_state)
    return gated_delta_chunked(q, k, v, beta, g, chunk=chunk, initial_state=initial_state, return_state=return_state)
