"""Dense feed-forward sublayers (docs/catalogue.md section 6): the classes and their records.

- ``relu`` / ``gelu`` / ``swish``: ``W2 act(W1 x + b1) + b2`` (Vaswani et al. 2017; GELU:
  Hendrycks & Gimpel 2016; Swish = SiLU: Ramachandran et al. 2017), ``d_ff = 4 d``.
- ``glu`` / ``geglu`` / ``swiglu``: ``(act(x W) * (x V)) W2`` with sigmoid / GELU / Swish and no
  biases (Shazeer 2020, "GLU Variants Improve Transformer"; GLU: Dauphin et al. 2017).
  ``d_ff = round(8 d / 3)`` so the three matrices match the two of a ``4 d`` dense FFN.
- ``none``: no FFN sublayer (``build=None``; the model skips it).

The GELU of ``gelu`` and ``geglu`` is exact (erf) unless ``cfg.gelu_approx == "tanh"`` (GPT-2's
``gelu_new``, T5 v1.1's gated GELU).

The registry ``FFN`` (these, the experts of ``moe.py`` and the product keys of ``pkm.py``) is
gathered in ``models/ffn/__init__.py``.

``build(cfg)`` returns a module with ``forward(x, tokens=None) -> (y, aux)``: ``aux`` is a dict
(empty here; mixture-of-experts layers report ``"loss"`` and routing statistics in it) and
``output_parameters()`` lists the output-projection weights used for gradient-norm plots.
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from torch import nn

from ..variant import Param, Variant

_GATED = ("glu", "geglu", "swiglu", "moe_swiglu_clamped", "moe_qwen")  # gpt-oss's experts, Qwen's SwiGLU experts
# the hidden width of every FFN that has one (dense, gated, each expert); None: the rule below
D_FF = Param("d_ff", int, None, optional=True, range=(1, 1 << 18), cap=4096, label="d_ff (0 = FFN rule)")


def ffn_hidden_size(cfg) -> int:
    """``cfg.d_ff`` if set, else ``round(8 d / 3)`` for GLU variants and ``4 d`` otherwise."""
    if cfg.d_ff is not None:
        return cfg.d_ff
    return round(8 * cfg.d_model / 3) if cfg.ffn in _GATED else 4 * cfg.d_model


class DenseFFN(nn.Module):
    """``W2 act(W1 x + b1) + b2``."""

    def __init__(self, cfg, act):
        super().__init__()
        hidden = ffn_hidden_size(cfg)
        self.act = act
        self.w1 = nn.Linear(cfg.d_model, hidden)
        self.w2 = nn.Linear(hidden, cfg.d_model)

    def forward(self, x, tokens=None):
        return self.w2(self.act(self.w1(x))), {}

    def output_parameters(self) -> list:
        return [self.w2.weight]


class GatedFFN(nn.Module):
    """``(act(x W) * (x V)) W2``, no biases."""

    def __init__(self, cfg, act):
        super().__init__()
        hidden = ffn_hidden_size(cfg)
        self.act = act
        self.w = nn.Linear(cfg.d_model, hidden, bias=False)
        self.v = nn.Linear(cfg.d_model, hidden, bias=False)
        self.w2 = nn.Linear(hidden, cfg.d_model, bias=False)

    def forward(self, x, tokens=None):
        return self.w2(self.act(self.w(x)) * self.v(x)), {}

    def output_parameters(self) -> list:
        return [self.w2.weight]


class ReLUFFN(DenseFFN):
    def __init__(self, cfg):
        super().__init__(cfg, F.relu)


def gelu(cfg):
    """The GELU of ``cfg``: exact (erf), or the tanh approximation when ``cfg.gelu_approx == "tanh"``."""
    return functools.partial(F.gelu, approximate=cfg.gelu_approx)


class GELUFFN(DenseFFN):
    def __init__(self, cfg):
        super().__init__(cfg, gelu(cfg))


class SwishFFN(DenseFFN):
    def __init__(self, cfg):
        super().__init__(cfg, F.silu)


class GLU(GatedFFN):
    def __init__(self, cfg):
        super().__init__(cfg, torch.sigmoid)


class GEGLU(GatedFFN):
    def __init__(self, cfg):
        super().__init__(cfg, gelu(cfg))


class SwiGLU(GatedFFN):
    def __init__(self, cfg):
        super().__init__(cfg, F.silu)


def dense_params(cfg) -> int:
    hidden = ffn_hidden_size(cfg)
    return 2 * cfg.d_model * hidden + hidden + cfg.d_model


def gated_params(cfg) -> int:
    return 3 * cfg.d_model * ffn_hidden_size(cfg)


VARIANTS = (
    Variant(
        "relu",
        "Vaswani et al. 2017",
        "Two linear layers with a ReLU in between (the original Transformer FFN).",
        build=ReLUFFN,
        params=(D_FF,),
        n_params=dense_params,
    ),
    Variant(
        "gelu",
        "Hendrycks & Gimpel 2016",
        "Two linear layers with a GELU in between (BERT, GPT-2).",
        build=GELUFFN,
        params=(D_FF,),
        n_params=dense_params,
    ),
    Variant(
        "swish",
        "Ramachandran et al. 2017",
        "Two linear layers with a Swish (SiLU) in between.",
        build=SwishFFN,
        params=(D_FF,),
        n_params=dense_params,
    ),
    Variant(
        "glu",
        "Dauphin et al. 2017; Shazeer 2020",
        "A sigmoid gate multiplies a second linear projection.",
        build=GLU,
        params=(D_FF,),
        n_params=gated_params,
    ),
    Variant(
        "geglu",
        "Shazeer 2020",
        "A GELU gate multiplies a second linear projection.",
        build=GEGLU,
        params=(D_FF,),
        n_params=gated_params,
    ),
    Variant(
        "swiglu",
        "Shazeer 2020",
        "A Swish gate multiplies a second linear projection (LLaMA, PaLM).",
        build=SwiGLU,
        params=(D_FF,),
        n_params=gated_params,
    ),
    Variant("none", "Attention-only", "No feed-forward sublayer: the block is attention alone.", build=None),
)
# the dense FFNs (not ``none``): what a schedule's ``:dense`` layer may take (``ModelConfig.dense_ffn``)
DENSE_KEYS = tuple(v.key for v in VARIANTS if v.build is not None)
