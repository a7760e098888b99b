"""The ``exit`` and ``act`` views: how many layers each token ran through.

``exit``: ``LayerInfo.exit_depth`` of the last layer (early exit, Elbayad et al. 2020; CALM,
Schuster et al. 2022: the 1-based layer where a token stopped) and every layer's
``exit_confidence``. ``act``: ``LayerInfo.act_steps`` of the last layer (Universal Transformer,
Dehghani et al. 2019, with ACT, Graves 2016: block applications per token) and every layer's
``act_halting``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from explorer.analysis.views.common import json_round, to_float32


@dataclass
class DepthView:
    key: str  # the LayerInfo field: "exit_depth" or "act_steps"
    depth: np.ndarray  # (L,) exit layer (1-based) / ACT steps of each token
    n_layers: int
    threshold: float
    detail: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))  # (n, L) confidence / halting

    def summary(self) -> dict:
        return {
            "key": self.key,
            "per_token": json_round(self.depth, 3),
            "mean": json_round(self.depth.mean(), 3),
            "n_layers": self.n_layers,
            "threshold": self.threshold,
        }


def exit_view(cfg, layers: list):
    if not layers or not isinstance(layers[-1].exit_depth, torch.Tensor):
        return None
    conf = [i.exit_confidence for i in layers]
    detail = (
        np.stack([to_float32(c[0]) for c in conf])
        if all(isinstance(c, torch.Tensor) for c in conf)
        else np.zeros((0, 0))
    )
    return DepthView(
        key="exit_depth",
        depth=layers[-1].exit_depth[0].cpu().numpy().astype(np.int64),
        n_layers=int(cfg.n_layers),
        threshold=float(cfg.exit_threshold),
        detail=detail,
    )


def act_view(cfg, layers: list):
    if not layers or not isinstance(layers[-1].act_steps, torch.Tensor):
        return None
    halt = [i.act_halting for i in layers]
    detail = (
        np.stack([to_float32(h[0]) for h in halt])
        if all(isinstance(h, torch.Tensor) for h in halt)
        else np.zeros((0, 0))
    )
    return DepthView(
        key="act_steps",
        depth=to_float32(layers[-1].act_steps[0]),
        n_layers=int(cfg.n_layers),
        threshold=float(cfg.act_threshold),
        detail=detail,
    )
