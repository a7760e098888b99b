"""The ``span`` view: the learned attention span of every head (adaptive span, Sukhbaatar et al. 2019).

Reads ``LayerInfo.span`` (``z`` per head, in tokens); a key at distance ``d`` gets the weight
``clamp((R + z - d) / R, 0, 1)`` with ``R = span_ramp``, up to ``max_span``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from explorer.analysis.views.common import json_round, to_float32


@dataclass
class SpanView:
    span: np.ndarray  # (n, h) learned span z in tokens
    max_span: int
    ramp: int

    def summary(self) -> dict:
        return {"span": json_round(self.span, 3), "max_span": self.max_span, "span_ramp": self.ramp}


def span_view(cfg, layers: list):
    if not layers or not all(isinstance(i.span, torch.Tensor) for i in layers):
        return None
    return SpanView(
        span=np.stack([to_float32(i.span) for i in layers]), max_span=int(cfg.max_span), ramp=int(cfg.span_ramp)
    )
