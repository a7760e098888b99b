"""Fused LayerNorm (Ba et al., 2016) and RMSNorm (Zhang & Sennrich, 2019) over the last dim.

Forward, one row per step: ``xhat = (x - mean) * rstd`` (LayerNorm; RMSNorm skips the mean and
uses ``rstd = 1 / sqrt(mean(x^2) + eps)``), ``y = xhat * w (+ b)``; ``rstd`` (and the mean) are
saved. Backward with ``g = dy * w``:
``dx = rstd * (g - xhat * mean(g * xhat) - mean(g))`` (the last term only for LayerNorm);
``dw = sum_rows dy * xhat``, ``db = sum_rows dy``: each program walks a strided set of rows,
keeps its partial dw / db in registers, and a final torch sum reduces the per-program partials.
The Triton kernels live in kernels/triton/norms.py, imported only on the Triton path; the PyTorch
path in kernels/cpu/norms.py.
"""

from __future__ import annotations

from .backend import triton_reason
from .cpu.norms import layer_norm_ref, rms_norm_ref


def layer_norm(x, weight, bias, eps: float = 1e-5, *, force_triton: bool = False):
    """LayerNorm over the last dim (Triton on CUDA or when ``force_triton``)."""
    if triton_reason(x.device, "norms", force=force_triton) is None:
        from .triton.norms import _Norm

        return _Norm.apply(x, weight, bias, float(eps), False)
    return layer_norm_ref(x, weight, bias, eps)


def rms_norm(x, weight, eps: float = 1e-5, *, force_triton: bool = False):
    """``x / sqrt(mean(x^2) + eps) * weight`` over the last dim."""
    if triton_reason(x.device, "norms", force=force_triton) is None:
        from .triton.norms import _Norm

        return _Norm.apply(x, weight, None, float(eps), True)
    return rms_norm_ref(x, weight, eps)
