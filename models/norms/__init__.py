"""Normalisation (docs/catalogue.md section 5): which norm, and where it sits around each sublayer.

``NORM`` gathers the per-token norms of ``token_norms.py`` (layernorm, rmsnorm, scalenorm, adanorm)
and the batch-statistics norm of ``power.py`` (powernorm); ``build(d, cfg) -> nn.Module``.
``NORM_PLACEMENT`` gathers ``placements.py`` (post, pre, sandwich, res_post, rezero, none);
``build(cfg, make_norm) -> Residual``. Each module ends with ``VARIANTS``; none imports this
package back.
"""

from __future__ import annotations

from ..variant import gather
from . import placements, power, token_norms
from .placements import PostNorm, PreNorm, Residual, ResPostNorm, ReZero, SandwichNorm
from .power import PowerNorm
from .token_norms import EPS, AdaNorm, LayerNorm, RMSNorm, ScaleNorm

NORM = gather(token_norms.VARIANTS, power.VARIANTS)
NORM_PLACEMENT = gather(placements.VARIANTS)

__all__ = [
    "NORM",
    "NORM_PLACEMENT",
    "EPS",
    "LayerNorm",
    "RMSNorm",
    "ScaleNorm",
    "AdaNorm",
    "PowerNorm",
    "Residual",
    "PostNorm",
    "PreNorm",
    "SandwichNorm",
    "ReZero",
    "ResPostNorm",
]
