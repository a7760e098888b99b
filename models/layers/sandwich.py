"""Sandwich transformers (Press et al. 2020, "Improving Transformer Models by Reordering their
Sublayers").

The ``2n`` sublayers of an ``n``-layer model (``n`` attention ``a``, ``n`` feed-forward ``f``, each
with its own weights and the configured norm placement) are reordered as

    a^s (a f)^(n - s) f^s          s = sandwich_coeff, 0 <= s <= n

(the paper's ``s^k (sf)^(n-k) f^k``): ``s = 0`` is the interleaved standard model, larger ``s``
puts more attention at the bottom and more FFNs at the top. Parameters are those of the standard
model. Records: one ``LayerInfo`` per attention sublayer (its ``input`` is the stream entering that
sublayer); the ``j``-th FFN reports into the ``j``-th record, which is always open by then (the
``j``-th ``f`` comes after the ``j``-th ``a`` in every sandwich order), and ``sublayer_depth``
records the positions (0-based, in the ``2n``-sublayer order) at which that pair actually ran.
"""

from __future__ import annotations

from torch import nn

from ..blocks import Attention
from ..errors import ConfigError
from ..ffn import FFN
from ..norms import NORM, NORM_PLACEMENT
from ..variant import Param, Variant
from .macaron import check_needs_ffn
from .stack import stack_params

SANDWICH_COEFF = Param("sandwich_coeff", int, 1, range=(0, 512), cap=12)  # at most n_layers: in the check


def sandwich_order(n: int, s: int) -> str:
    """The sublayer order, ``"a"`` attention and ``"f"`` FFN, e.g. ``(3, 1) -> "aafaff"``."""
    return "a" * s + "af" * (n - s) + "f" * s


class SandwichStack(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        n = cfg.n_layers
        self.order = sandwich_order(n, cfg.sandwich_coeff)
        placement = NORM_PLACEMENT[cfg.norm_placement].build
        make_norm = lambda: NORM[cfg.norm].build(cfg.d_model, cfg)  # noqa: E731
        self.attn = nn.ModuleList(Attention(cfg, i) for i in range(n))
        self.res_attn = nn.ModuleList(placement(cfg, make_norm) for _ in range(n))
        self.ffn = nn.ModuleList(FFN[cfg.ffn].build(cfg) for _ in range(n))
        self.res_ffn = nn.ModuleList(placement(cfg, make_norm) for _ in range(n))

    def attention(self, index: int):
        return self.attn[index]

    def forward(self, x, ctx):
        infos, n_ffn = [], 0
        for depth, kind in enumerate(self.order):
            if kind == "a":
                i = len(infos)
                info = ctx.begin_layer(x)
                info.sublayer_depth = (depth, None)
                infos.append(info)
                x = self.res_attn[i](x, lambda h: self.attn[i](h, ctx, info))
            else:
                j, n_ffn = n_ffn, n_ffn + 1
                infos[j].sublayer_depth = (infos[j].sublayer_depth[0], depth)
                x = self.res_ffn[j](x, lambda h: self._ffn(j, h, ctx, infos[j]))
        return x

    def _ffn(self, j, h, ctx, info):
        y, aux = self.ffn[j](h, ctx.tokens)
        info.record_ffn(aux)
        return y


def check_sandwich(cfg):
    if not 0 <= cfg.sandwich_coeff <= cfg.n_layers:
        raise ConfigError(
            "sandwich_coeff",
            cfg.sandwich_coeff,
            f"an integer in [0, n_layers={cfg.n_layers}]: the number of attention sublayers "
            "moved to the bottom (and FFN sublayers to the top)",
        )
    check_needs_ffn("sandwich")(cfg)


VARIANTS = (
    Variant(
        "sandwich",
        "Press et al. 2020 (Sandwich Transformer)",
        "The 2n sublayers reordered as sandwich_coeff attention sublayers, alternating attention / FFN, "
        "then sandwich_coeff FFN sublayers.",
        build=SandwichStack,
        params=(SANDWICH_COEFF,),
        check=check_sandwich,
        n_params=stack_params,
    ),
)
