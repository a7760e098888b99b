"""The ``talking_heads`` and ``residual`` views: what a layer's scores mix in besides its own ``q·k``.

- ``talking_heads``: ``LayerInfo.head_mix`` (Shazeer et al. 2020): the learned ``[h, h]`` matrices
  that mix the heads' scores before the softmax and their weights after it (identity at
  initialisation).
- ``residual``: ``LayerInfo.prior_share`` (RealFormer, He et al. 2020; predictive attention, Wang
  et al. 2021): how much of each layer's pre-softmax scores comes from the previous layer's scores
  / maps, and ``LayerInfo.prior_alpha``, predictive attention's learned mixing weight.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from explorer.analysis.views.common import all_have, to_float64


@dataclass
class HeadMixView:
    pre: np.ndarray  # (n, h, h) [new head, old head] mixing of the scores (before softmax)
    post: np.ndarray  # (n, h, h) mixing of the attention weights (after softmax)

    def summary(self) -> dict:
        eye = np.eye(self.pre.shape[-1])
        return {
            "pre_softmax": np.round(self.pre, 4).tolist(),
            "post_softmax": np.round(self.post, 4).tolist(),
            "max_off_identity": round(float(max(np.abs(self.pre - eye).max(), np.abs(self.post - eye).max())), 6),
            "post_row_sums": np.round(self.post.sum(-1), 4).tolist(),
        }


def head_mix_view(cfg, layers: list):
    if not all_have(layers, "head_mix"):
        return None
    mix = np.stack([to_float64(i.head_mix) for i in layers])  # (n, 2, h, h)
    return HeadMixView(pre=mix[:, 0], post=mix[:, 1])


@dataclass
class PriorView:
    attention: str
    share: np.ndarray  # (n, h) |prior| / (|prior| + |own|) of the layer's scores (0: layer 0)
    alpha: np.ndarray  # (n,) predictive attention's sigmoid(a) (NaN where unused or realformer)

    def summary(self) -> dict:
        return {
            "attention": self.attention,
            "prior_share": np.round(self.share, 4).tolist(),
            "alpha": [None if not np.isfinite(a) else round(float(a), 4) for a in self.alpha],
        }


def prior_view(cfg, layers: list):
    if not all_have(layers, "prior_share"):
        return None
    share = np.stack([to_float64(i.prior_share[0]) for i in layers])  # (n, h)
    alpha = np.array([float(i.prior_alpha) if isinstance(i.prior_alpha, torch.Tensor) else np.nan for i in layers])
    return PriorView(attention=cfg.attention, share=share, alpha=alpha)
