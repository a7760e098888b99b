"""``kernels.ssd``: Mamba-2's state-space dual scan (Dao & Gu 2024, "Transformers are SSMs", ICML 2024), one entry
point on every device.

``ssd(x, dt, a, b, c, *, chunk=64, initial_state=None, return_state=False)`` with ``x (B, h, L, P)``, ``dt (B, h, L)``
positive, ``a (h,)`` negative, ``b, c (B, g, L, N)`` (head ``i`` reads group ``i // (h / g)``) returns

    y_t = sum_{s <= t} (c_t . b_s) exp(sum_{r=s+1..t} dt_r a) dt_s x_s  (+ c_t . exp(sum_{r<=t} dt_r a) h0)

``(B, h, L, P)``, and with ``return_state`` the final state ``(B, h, P, N)``; no ``D`` skip, no gate. ``chunk`` is
the chunk length of the chunked algorithm: speed only, never the function.

Dispatch: one backend so far, the chunked PyTorch form (``kernels/cpu/ssd.py``), on every device, differentiated
by autograd. A Triton kernel with this same signature (a module ssd of the kernels.triton package, not yet
written) plugs in here: ``ssd`` then asks ``backend.triton_reason(x.device, "ssd", ...)`` as the other dispatchers
do (``kernels/selected.py``), and ``ssd_backend`` names what ran.
"""

from __future__ import annotations

from .cpu.ssd import ssd_chunked, ssd_map, ssd_step

__all__ = ["ssd", "ssd_backend", "ssd_map", "ssd_step"]


def ssd_backend(x) -> str:
    """Name of the backend :func:`ssd` runs for ``x``."""
    return f"torch-{x.device.type} chunked"


def ssd(x, dt, a, b, c, *, chunk: int = 64, initial_state=None, return_state: bool = False):
    """Differentiable SSD scan (module docstring): ``y (B, h, L, P)``, or ``(y, final state (B, h, P, N))``."""
    return ssd_chunked(x, dt, a, b, c, chunk=chunk, initial_state=initial_state, return_state=return_state)
