"""The norms that normalise each token's feature vector on its own (``build(d, cfg) -> nn.Module``).

All with ``eps = EPS = 1e-5``, except that LayerNorm and RMSNorm read ``cfg.norm_eps`` (default ``EPS``;
pretrained checkpoints bring their own: BERT 1e-12, Llama 1e-6):
- ``layernorm``: Ba et al. 2016, "Layer Normalization" (learnable gain and bias).
- ``rmsnorm``: Zhang & Sennrich 2019, "Root Mean Square Layer Normalization": ``x / rms(x) * g``.
- ``scalenorm``: Nguyen & Salazar 2019, "Transformers without Tears": ``g * x / |x|``, one scalar
  ``g`` initialised to ``sqrt(d)``.
- ``adanorm``: Xu et al. 2019, "Understanding and Improving Layer Normalization":
  ``C (1 - k y) * y`` with ``y`` standardised, ``C = 1``, ``k = 0.1``, no parameters, and the
  factor ``(1 - k y)`` detached from the graph (the paper's gradient trick).
LayerNorm and RMSNorm run ``kernels.norms`` (fused Triton on CUDA, PyTorch on the CPU).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from kernels import norms as kernel_norms

from ..variant import Variant

EPS = 1e-5


def _eps(cfg) -> float:
    return EPS if cfg is None else cfg.norm_eps


class LayerNorm(nn.Module):
    def __init__(self, d: int, cfg=None):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.bias = nn.Parameter(torch.zeros(d))
        self.eps = _eps(cfg)

    def forward(self, x):
        return kernel_norms.layer_norm(x, self.weight, self.bias, self.eps)


class RMSNorm(nn.Module):
    def __init__(self, d: int, cfg=None):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = _eps(cfg)

    def forward(self, x):
        return kernel_norms.rms_norm(x, self.weight, self.eps)


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


VARIANTS = (
    Variant(
        "layernorm",
        "Ba et al. 2016",
        "Subtract the mean, divide by the standard deviation, then learned gain and bias.",
        build=LayerNorm,
        n_params=lambda c: 2 * c.d_model,
    ),
    Variant(
        "rmsnorm",
        "Zhang & Sennrich 2019",
        "Divide by the root mean square with a learned gain; no centring, no bias.",
        build=RMSNorm,
        n_params=lambda c: c.d_model,
    ),
    Variant(
        "scalenorm",
        "Nguyen & Salazar 2019",
        "Project onto a sphere: one learned scalar g times x / |x|.",
        build=ScaleNorm,
        n_params=lambda c: 1,
    ),
    Variant(
        "adanorm",
        "Xu et al. 2019",
        "LayerNorm without parameters, rescaled by a detached (1 - k y) factor.",
        build=AdaNorm,
        n_params=lambda c: 0,
    ),
)
