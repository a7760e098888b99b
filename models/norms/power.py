"""PowerNorm (Shen et al. 2020, "PowerNorm: Rethinking Batch Normalization in Transformers").

Batch normalisation rebuilt for transformers: no mean subtraction, and the variance replaced by the
quadratic mean of each feature over the batch and the positions,

    psi^2 = mean_{b, l} x[b, l, :]^2          (one value per feature, shape (d,))
    y = gamma * x / sqrt(psi^2 + eps) + beta

In training the batch statistic ``psi^2`` normalises and a running estimate is updated,
``running <- running + (1 - alpha) (psi^2 - running)`` (the paper's momentum ``alpha``,
``powernorm_alpha``); in evaluation the running estimate normalises, so a token's output no longer
depends on the rest of the batch. The backward is the exact gradient of the batch formula (autograd),
not the paper's approximate backward with its extra running gradient statistic, and the forward uses
the current batch's ``psi`` rather than the previous step's running value (the paper's Algorithm 1):
the two differ only in the order of the moving-average update, and the exact form keeps the
``model(...)`` call free of hidden cross-step state apart from the running buffer itself.

Because training statistics pool all positions, a causal model in training mode lets a token's
normalisation see later tokens of the batch (as any batch norm); evaluation mode has no such leak.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ..errors import ConfigError
from ..variant import Param, Variant
from .token_norms import EPS

POWERNORM_ALPHA = Param("powernorm_alpha", float, 0.9)


class PowerNorm(nn.Module):
    """Per-feature quadratic-mean normalisation over batch and positions, with running statistics."""

    def __init__(self, d: int, cfg=None):
        super().__init__()
        self.alpha = POWERNORM_ALPHA.default if cfg is None else float(cfg.powernorm_alpha)
        self.weight = nn.Parameter(torch.ones(d))
        self.bias = nn.Parameter(torch.zeros(d))
        # a buffer, like BatchNorm's running_var: part of the model's state_dict, not of the graph
        self.register_buffer("running_psi2", torch.ones(d))

    def forward(self, x):
        if self.training:
            psi2 = x.pow(2).reshape(-1, x.shape[-1]).mean(0)  # (d,) over every batch row and position
            with torch.no_grad():
                self.running_psi2.add_(
                    (1.0 - self.alpha) * (psi2.detach().to(self.running_psi2.dtype) - self.running_psi2)
                )
        else:
            psi2 = self.running_psi2.to(x.dtype)
        return x * torch.rsqrt(psi2 + EPS) * self.weight + self.bias


def _check(cfg) -> None:
    a = cfg.powernorm_alpha
    if not (math.isfinite(a) and 0.0 <= a < 1.0):
        raise ConfigError(
            "powernorm_alpha", a, "a number in [0, 1): the running quadratic mean keeps alpha of its old value per step"
        )


VARIANTS = (
    Variant(
        "powernorm",
        "Shen et al. 2020 (PowerNorm)",
        "Batch-wise quadratic mean of each feature with running statistics for eval; gain and bias, no centring.",
        build=PowerNorm,
        params=(POWERNORM_ALPHA,),
        check=_check,
        n_params=lambda c: 2 * c.d_model,
    ),
)
