"""Macaron layers (Lu et al. 2019, "Understanding and Improving Transformer From a Multi-Particle
Dynamic System Point of View", Macaron Net).

The paper reads a transformer layer as one step of a splitting scheme for a convection-diffusion
ODE; Strang-Marchuk splitting gives a symmetric step: half a step of the FFN, a full step of
attention, half a step of a second FFN. Each of the three sublayers is wrapped by the configured
norm placement (``NORM_PLACEMENT``), the FFN outputs scaled by ``1/2``::

    x = Res_1(x, h -> 1/2 FFN_1(h))      e.g. pre-norm: x + 1/2 FFN_1(Norm(x))
    x = Res_2(x, h -> Attn(h))
    x = Res_3(x, h -> 1/2 FFN_2(h))

so a pre-norm macaron layer is ``x + 1/2 FFN_1(Norm(x))`` etc., and the paper's post-norm
``Norm(x + 1/2 FFN(x))`` is ``norm_placement="post"``. The two FFNs have separate weights. One
``LayerInfo`` per layer; when the FFNs report routing statistics (experts), the record holds the
sum of their losses and of their expert counts / drops, and the first FFN's top-1 assignment.
"""

from __future__ import annotations

from torch import nn

from ..blocks import Attention
from ..context import ExpertStats
from ..errors import ConfigError
from ..ffn import FFN
from ..norms import NORM, NORM_PLACEMENT
from ..variant import Variant
from .stack import BlockStack


def record_ffn_sum(info, aux: dict) -> None:
    """Store an FFN ``aux`` in ``info``, adding to what an earlier FFN of the same layer stored."""
    aux = dict(aux)
    loss = aux.pop("loss", None)
    if loss is not None:
        info.ffn_loss = loss if info.ffn_loss is None else info.ffn_loss + loss
    if "slot_counts" in aux:  # product-key memory reads: LayerInfo.record_ffn adds them up
        info.record_ffn({"slot_counts": aux.pop("slot_counts")})
    if aux:
        new = ExpertStats(**aux)
        old = info.experts
        if old is None:
            info.experts = new
        else:  # counts and drops add up over the layer's FFN calls; the first call's assignment stays
            info.experts = ExpertStats(
                expert_counts=old.expert_counts + new.expert_counts,
                dropped=old.dropped + new.dropped,
                assignment=old.assignment,
                capacity=old.capacity,
            )


class MacaronBlock(nn.Module):
    def __init__(self, cfg, layer: int):
        super().__init__()
        self.layer = layer
        placement = NORM_PLACEMENT[cfg.norm_placement].build
        make_norm = lambda: NORM[cfg.norm].build(cfg.d_model, cfg)  # noqa: E731
        self.ffn1 = FFN[cfg.ffn].build(cfg)
        self.res_ffn1 = placement(cfg, make_norm)
        self.attn = Attention(cfg, layer)
        self.res_attn = placement(cfg, make_norm)
        self.ffn2 = FFN[cfg.ffn].build(cfg)
        self.res_ffn2 = placement(cfg, make_norm)

    def _half_ffn(self, ffn, h, ctx, info):
        y, aux = ffn(h, ctx.tokens)
        record_ffn_sum(info, aux)
        return 0.5 * y  # half a step (Strang splitting)

    def forward(self, x, ctx, info):
        x = self.res_ffn1(x, lambda h: self._half_ffn(self.ffn1, h, ctx, info))
        x = self.res_attn(x, lambda h: self.attn(h, ctx, info))
        return self.res_ffn2(x, lambda h: self._half_ffn(self.ffn2, h, ctx, info))


class MacaronStack(BlockStack):
    def __init__(self, cfg):
        super().__init__(MacaronBlock(cfg, i) for i in range(cfg.n_layers))


def check_needs_ffn(layer: str):
    """A check refusing ``ffn='none'`` for a structure that is defined by where its FFNs sit."""

    def check(cfg):
        if FFN[cfg.ffn].build is None:
            raise ConfigError(
                "ffn",
                cfg.ffn,
                f"one of {[k for k, v in FFN.items() if v.build is not None]} "
                f"with layer={layer!r}: the structure is an arrangement of "
                "FFN sublayers around attention, so it needs an FFN",
            )

    return check


def macaron_params(cfg, parts: dict) -> int:
    """Per layer: attention + its wrapper, two FFNs + their wrappers."""
    ffn = parts["ffn"] or 0
    return cfg.n_layers * (parts["attn"] + 2 * ffn + 3 * parts["residual"])


VARIANTS = (
    Variant(
        "macaron",
        "Lu et al. 2019 (Macaron Net)",
        "Each layer is half a step of one FFN, attention, then half a step of a second FFN, each with "
        "the chosen norm placement.",
        build=MacaronStack,
        params=("ffn", "norm_placement"),
        check=check_needs_ffn("macaron"),
        n_params=macaron_params,
    ),
)
