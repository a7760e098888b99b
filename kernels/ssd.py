"""``kernels.ssd``: Mamba-2's state-space dual scan (Dao & Gu 2024, "Transformers are SSMs", ICML 2024), one entry
point on every device.

``ssd(x, dt, a, b, c, *, chunk=64, initial_state=None, return_state=False)`` with ``x (B, h, L, P)``, ``dt (B, h, L)``
positive, ``a (h,)`` negative, ``b, c (B, g, L, N)`` (head ``i`` reads group ``i // (h / g)``) returns

    y_t = sum_{s <= t} (c_t . b_s) exp(sum_{r=s+1..t} dt_r a) dt_s x_s  (+ c_t . exp(sum_{r<=t} dt_r a) h0)

``(B, h, L, P)``, and with ``return_state`` the final state ``(B, h, P, N)``; no ``D`` skip, no gate. ``chunk`` is
the chunk length of the chunked algorithm: speed only, never the function.

Dispatch, decided once per call by ``backend.triton_reason`` (as ``kernels/selected.py`` does):
- CUDA tensors in fp32 / fp16 / bf16 with a chunk the kernels are compiled for (16, 32, 64) -> the Triton kernels
  of ``kernels/triton/ssd/`` (forward and backward: chunk states, the state pass across chunks, the chunk scan and
  their mirrors; computed in fp32);
- everything else (a CPU, float64, other chunks) -> the chunked PyTorch form (``kernels/cpu/ssd.py``),
  differentiated by autograd.
``ssd_backend`` names the path, and a Triton run is recorded for ``kernels.record_backends`` (what a timing ran).
"""

from __future__ import annotations

import torch

from .attention import _ran
from .backend import triton_backend_name, triton_reason
from .cpu.ssd import ssd_chunked, ssd_map, ssd_step

__all__ = ["ssd", "ssd_backend", "ssd_map", "ssd_step"]


_TRITON_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _reason(x, chunk: int) -> str | None:
    """None when the Triton kernels run ``x`` with ``chunk``, else why the PyTorch path does."""
    if x.dtype not in _TRITON_DTYPES:
        return f"{x.dtype} (the kernels compute in fp32)"
    return triton_reason(x.device, "ssd", x, chunk=int(chunk))


def ssd_backend(x, chunk: int = 64) -> str:
    """Name of the backend :func:`ssd` runs for ``x`` and ``chunk``."""
    if _reason(x, chunk) is None:
        return f"{triton_backend_name(x.device)} ssd"
    return f"torch-{x.device.type} chunked"


def ssd(x, dt, a, b, c, *, chunk: int = 64, initial_state=None, return_state: bool = False):
    """Differentiable SSD scan (module docstring): ``y (B, h, L, P)``, or ``(y, final state (B, h, P, N))``."""
    if _reason(x, chunk) is None:
        from .triton.ssd import ssd_triton

        _ran(lambda: ssd_backend(x, chunk))
        return ssd_triton(x, dt, a, b, c, chunk=int(chunk), initial_state=initial_state, return_state=return_state)
    return ssd_chunked(x, dt, a, b, c, chunk=chunk, initial_state=initial_state, return_state=return_state)
