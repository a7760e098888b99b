"""Attention temperature tuning of layers without positions (Meta 2025, Llama 4; ``ModelConfig.attn_temp_floor``,
``attn_temp_scale``), after Nakanishi 2025 ("Scalable-Softmax Is Superior for Attention", arXiv 2501.19399).

A layer without a position encoding (``position="none"``: a ``layer_schedule``'s ``:nope`` layers, or every layer
of a model without positions) multiplies each query by a factor that grows with the query's absolute position
``p`` (0-based), so a long context's flatter softmax is sharpened again:

    q_p <- q_p * (1 + attn_temp_scale * log(1 + floor((p + 1) / attn_temp_floor)))

The factor is exactly 1 for ``p + 1 < attn_temp_floor``, so a model is changed only past its first
``attn_temp_floor`` positions (Llama 4: floor 8192, scale 0.1; transformers' ``Llama4TextAttention`` with
``attn_temperature_tuning``, ``floor_scale``, ``attn_scale``, computed in float32 after RoPE and the query/key norm,
which is where ``models.blocks.Attention`` applies it: on the core's queries). ``attn_temp_floor=None``: off.

Layers that keep their positions are untouched: ``models.schedule`` gives their layer configs
``attn_temp_floor=None``, so a layer's own config says whether it tunes.
"""

from __future__ import annotations

import math

import torch

from .errors import ConfigError
from .variant import Param

ATTN_TEMP_FLOOR = Param(
    "attn_temp_floor",
    int,
    None,
    optional=True,
    range=(1, 1 << 20),
    cap=16384,
    label="NoPE query temperature: floor (positions; 0 = off)",
    surgery=True,
)
ATTN_TEMP_SCALE = Param("attn_temp_scale", float, 0.1, cap=10.0, label="NoPE query temperature: scale", surgery=True)
PARAMS = (ATTN_TEMP_FLOOR, ATTN_TEMP_SCALE)


def query_factors(positions: torch.Tensor, floor: int, scale: float) -> torch.Tensor:
    """``1 + scale * log1p(floor((p + 1) / floor))`` for each absolute position ``p`` (float32)."""
    return torch.log1p(torch.floor((positions.float() + 1.0) / floor)) * scale + 1.0


def temper(cfg, q: torch.Tensor, k_start: int) -> torch.Tensor:
    """``q (B, h, L, d_h)`` of queries at positions ``k_start .. k_start + L - 1``, times their factors in a layer
    whose config (``cfg``: the layer's own) tunes; ``q`` itself otherwise."""
    if cfg.attn_temp_floor is None:
        return q
    positions = torch.arange(k_start, k_start + q.shape[-2], device=q.device)
    factors = query_factors(positions, cfg.attn_temp_floor, cfg.attn_temp_scale)  # (L,)
    return (q * factors[:, None]).to(q.dtype)


def check_temperature(cfg) -> None:
    """The scale is a finite number in [0, 10]; a floor needs a layer without positions to act on, and a layer
    structure whose attention runs through ``models.blocks.Attention`` (not ``funnel``'s pooled queries)."""
    if not (math.isfinite(cfg.attn_temp_scale) and 0.0 <= cfg.attn_temp_scale <= 10.0):
        raise ConfigError("attn_temp_scale", cfg.attn_temp_scale, "a number in [0, 10] (Llama 4: 0.1)")
    if cfg.attn_temp_floor is None:
        return
    if cfg.layer == "funnel":  # its pooled queries' layers attend outside Attention.forward, at no one position
        raise ConfigError(
            "attn_temp_floor",
            cfg.attn_temp_floor,
            "None with layer='funnel': a pooled query stands for several positions, so no temperature of position "
            "is defined for it",
        )
    if cfg.position == "none":
        return
    from .schedule import parse

    if not any(k.nope for k in parse(cfg.layer_schedule)):
        raise ConfigError(
            "attn_temp_floor",
            cfg.attn_temp_floor,
            f"None with position={cfg.position!r} and no ':nope' layer in layer_schedule={cfg.layer_schedule!r}: "
            "the temperature tunes only the queries of layers without positions (Llama 4's NoPE layers)",
        )
