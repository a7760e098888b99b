"""Normalisation (catalogue section 5): which norm, and where it sits around each sublayer.

``NORM`` (``build(d, cfg) -> nn.Module``), all with ``eps = 1e-5``:
- ``layernorm``: Ba et al. 2016, "Layer Normalization" (learnable gain and bias).
- ``rmsnorm``: Zhang & Sennrich 2019, "Root Mean Square Layer Normalization": ``x / rms(x) * g``.
- ``scalenorm``: Nguyen & Salazar 2019, "Transformers without Tears": ``g * x / |x|``, one scalar
  ``g`` initialised to ``sqrt(d)``.
- ``adanorm``: Xu et al. 2019, "Understanding and Improving Layer Normalization":
  ``C (1 - k y) * y`` with ``y`` standardised, ``C = 1``, ``k = 0.1``, no parameters, and the
  factor ``(1 - k y)`` detached from the graph (the paper's gradient trick).

``NORM_PLACEMENT`` (``build(cfg, make_norm) -> Residual``, ``make_norm()`` returns a fresh norm):
- ``post``: ``Norm(x + F(x))`` (Vaswani et al. 2017).
- ``pre``: ``x + F(Norm(x))`` plus a final norm before the head (Xiong et al. 2020).
- ``sandwich``: ``x + Norm2(F(Norm1(x)))`` plus a final norm (Ding et al. 2021, CogView).
- ``rezero``: ``x + alpha * F(x)``, scalar ``alpha`` initialised to 0, no norm (Bachlechner et al. 2020).
- ``none``: ``x + F(x)``.
Dropout (``cfg.dropout``) is applied to the sublayer output before it joins the residual stream.
``Residual.forward(x, fn)`` calls the sublayer ``fn(tensor) -> tensor``; the model wraps
sublayers with extra outputs in closures, so the wrappers stay this simple.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from kernels import norms as kernel_norms

from .variant import Variant, register

EPS = 1e-5

NORM: dict = {}
NORM_PLACEMENT: dict = {}


# ---------------------------------------------------------------------------- norms
class LayerNorm(nn.Module):
    def __init__(self, d: int, cfg=None):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.bias = nn.Parameter(torch.zeros(d))

    def forward(self, x):
        return _layer_norm(x, self.weight, self.bias, EPS)


class RMSNorm(nn.Module):
    def __init__(self, d: int, cfg=None):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        return _rms_norm(x, self.weight, EPS)


class ScaleNorm(nn.Module):
    def __init__(self, d: int, cfg=None):
        super().__init__()
        self.g = nn.Parameter(torch.tensor(math.sqrt(d)))

    def forward(self, x):
        # clamp rather than add eps: exact g * x / |x| except for (near-)zero vectors
        return self.g * x / x.norm(dim=-1, keepdim=True).clamp(min=EPS)


class AdaNorm(nn.Module):
    """``C (1 - k y) * y``; ``y = (x - mean) / sqrt(var + eps)`` (LayerNorm's standardisation)."""

    C = 1.0
    K = 0.1

    def __init__(self, d: int, cfg=None):
        super().__init__()

    def forward(self, x):
        y = F.layer_norm(x, x.shape[-1:], eps=EPS)
        # the paper detaches (1 - k y): gradients flow only through the standardisation
        return self.C * (1.0 - self.K * y).detach() * y


def _layer_norm(x, weight, bias, eps):
    return kernel_norms.layer_norm(x, weight, bias, eps)  # fused Triton on CUDA, PyTorch on CPU


def _rms_norm(x, weight, eps):
    return kernel_norms.rms_norm(x, weight, eps)


# ---------------------------------------------------------------------------- placements
class Residual(nn.Module):
    """Base wrapper: ``x + drop(F(x))`` (the ``none`` placement)."""

    final_norm = False

    def __init__(self, cfg, make_norm):
        super().__init__()
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x, fn):
        return x + self.drop(fn(x))


class PostNorm(Residual):
    def __init__(self, cfg, make_norm):
        super().__init__(cfg, make_norm)
        self.norm = make_norm()

    def forward(self, x, fn):
        return self.norm(x + self.drop(fn(x)))


class PreNorm(Residual):
    final_norm = True

    def __init__(self, cfg, make_norm):
        super().__init__(cfg, make_norm)
        self.norm = make_norm()

    def forward(self, x, fn):
        return x + self.drop(fn(self.norm(x)))


class SandwichNorm(Residual):
    final_norm = True

    def __init__(self, cfg, make_norm):
        super().__init__(cfg, make_norm)
        self.norm_in = make_norm()
        self.norm_out = make_norm()

    def forward(self, x, fn):
        return x + self.drop(self.norm_out(fn(self.norm_in(x))))


class ReZero(Residual):
    def __init__(self, cfg, make_norm):
        super().__init__(cfg, make_norm)
        self.alpha = nn.Parameter(torch.zeros(()))  # starts as the identity map

    def forward(self, x, fn):
        return x + self.alpha * self.drop(fn(x))


# ---------------------------------------------------------------------------- registries
register(NORM, Variant(
    "layernorm", "Ba et al. 2016", "Subtract the mean, divide by the standard deviation, then learned gain and bias.",
    build=LayerNorm, n_params=lambda c: 2 * c.d_model))
register(NORM, Variant(
    "rmsnorm", "Zhang & Sennrich 2019", "Divide by the root mean square with a learned gain; no centring, no bias.",
    build=RMSNorm, n_params=lambda c: c.d_model))
register(NORM, Variant(
    "scalenorm", "Nguyen & Salazar 2019", "Project onto a sphere: one learned scalar g times x / |x|.",
    build=ScaleNorm, n_params=lambda c: 1))
register(NORM, Variant(
    "adanorm", "Xu et al. 2019", "LayerNorm without parameters, rescaled by a detached (1 - k y) factor.",
    build=AdaNorm, n_params=lambda c: 0))

# n_params(cfg, norm): parameters of one residual wrapper, given those of one norm
register(NORM_PLACEMENT, Variant(
    "post", "Vaswani et al. 2017", "Normalise after adding the sublayer output (the original Transformer).",
    build=PostNorm, params=("norm", "dropout"), n_params=lambda c, norm: norm))
register(NORM_PLACEMENT, Variant(
    "pre", "Xiong et al. 2020", "Normalise the sublayer input and keep a clean residual path; final norm at the end.",
    build=PreNorm, params=("norm", "dropout"), n_params=lambda c, norm: norm))
register(NORM_PLACEMENT, Variant(
    "sandwich", "Ding et al. 2021 (CogView)", "Normalise both the sublayer input and its output; final norm at the end.",
    build=SandwichNorm, params=("norm", "dropout"), n_params=lambda c, norm: 2 * norm))
register(NORM_PLACEMENT, Variant(
    "rezero", "Bachlechner et al. 2020", "No norm: each sublayer output is scaled by a learned scalar that starts at 0.",
    build=ReZero, params=("dropout",), n_params=lambda c, norm: 1))
register(NORM_PLACEMENT, Variant(
    "none", "Baseline", "Plain residual connections with no normalisation at all.",
    build=Residual, params=("dropout",), n_params=lambda c, norm: 0))

# issue 11: PowerNorm (its own module: batch statistics with a running estimate)
from .norm_power import VARIANT as _POWERNORM  # noqa: E402

register(NORM, _POWERNORM)
