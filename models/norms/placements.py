"""Where the norm sits around each sublayer (``build(cfg, make_norm) -> Residual``).

``make_norm()`` returns a fresh norm of the chosen ``NORM``:
- ``post``: ``Norm(x + F(x))`` (Vaswani et al. 2017).
- ``pre``: ``x + F(Norm(x))`` plus a final norm before the head (Xiong et al. 2020).
- ``sandwich``: ``x + Norm2(F(Norm1(x)))`` plus a final norm (Ding et al. 2021, CogView).
- ``res_post``: ``x + Norm(F(x))`` plus a final norm: the norm inside the residual branch, after the
  sublayer ("res-post-norm": Liu et al. 2022, Swin Transformer V2; OLMo 2, OLMo et al. 2024).
- ``rezero``: ``x + alpha * F(x)``, scalar ``alpha`` initialised to 0, no norm (Bachlechner et al. 2020).
- ``none``: ``x + F(x)``.
Dropout (``cfg.dropout``) is applied to the sublayer output before it joins the residual stream.
``Residual.forward(x, fn)`` calls the sublayer ``fn(tensor) -> tensor``; the model wraps
sublayers with extra outputs in closures, so the wrappers stay this simple. A placement whose stack
ends with a norm says so with the class attribute ``final_norm``.
"""

from __future__ import annotations

import torch
from torch import nn

from ..dropout import Dropout
from ..variant import Variant


class Residual(nn.Module):
    """Base wrapper: ``x + drop(F(x))`` (the ``none`` placement)."""

    final_norm = False

    def __init__(self, cfg, make_norm):
        super().__init__()
        self.drop = Dropout(cfg.dropout)

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


class ResPostNorm(Residual):
    """``x + drop(Norm(F(x)))``: the sublayer reads the raw stream, its output is normalised before it is added."""

    final_norm = True

    def __init__(self, cfg, make_norm):
        super().__init__(cfg, make_norm)
        self.norm = make_norm()

    def forward(self, x, fn):
        return x + self.drop(self.norm(fn(x)))


class ReZero(Residual):
    def __init__(self, cfg, make_norm):
        super().__init__(cfg, make_norm)
        self.alpha = nn.Parameter(torch.zeros(()))  # starts as the identity map

    def forward(self, x, fn):
        return x + self.alpha * self.drop(fn(x))


# n_params(cfg, norm): parameters of one residual wrapper, given those of one norm
VARIANTS = (
    Variant(
        "post",
        "Vaswani et al. 2017",
        "Normalise after adding the sublayer output (the original Transformer).",
        build=PostNorm,
        params=("norm", "dropout"),
        n_params=lambda c, norm: norm,
    ),
    Variant(
        "pre",
        "Xiong et al. 2020",
        "Normalise the sublayer input and keep a clean residual path; final norm at the end.",
        build=PreNorm,
        params=("norm", "dropout"),
        n_params=lambda c, norm: norm,
    ),
    Variant(
        "sandwich",
        "Ding et al. 2021 (CogView)",
        "Normalise both the sublayer input and its output; final norm at the end.",
        build=SandwichNorm,
        params=("norm", "dropout"),
        n_params=lambda c, norm: 2 * norm,
    ),
    Variant(
        "res_post",
        "Liu et al. 2022 (Swin Transformer V2); OLMo et al. 2024 (OLMo 2)",
        "Normalise the sublayer output inside the residual branch (res-post-norm); final norm at the end.",
        build=ResPostNorm,
        params=("norm", "dropout"),
        n_params=lambda c, norm: norm,
    ),
    Variant(
        "rezero",
        "Bachlechner et al. 2020",
        "No norm: each sublayer output is scaled by a learned scalar that starts at 0.",
        build=ReZero,
        params=("dropout",),
        n_params=lambda c, norm: 1,
    ),
    Variant(
        "none",
        "Baseline",
        "Plain residual connections with no normalisation at all.",
        build=Residual,
        params=("dropout",),
        n_params=lambda c, norm: 0,
    ),
)
