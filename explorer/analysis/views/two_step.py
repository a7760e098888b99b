"""The ``induced`` view: attention through ``m`` points in two steps (ISAB, Lee et al. 2019; Luna,
Ma et al. 2021).

Reads ``LayerInfo.induced_pack`` (step 1: the ``m`` inducing points, Luna's packed sequence,
attending to the tokens, ``A1 [m, L]``), ``induced_unpack`` (step 2: the tokens attending to the
points, ``A2 [L, m]``) and ``attention``: their product ``A2 A1 [L, L]`` is the effective token
map, compared with the map the layer reported.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from explorer.analysis.views.common import all_have, round_list, to_float64


@dataclass
class InducedView:
    mechanism: str
    pack: np.ndarray  # (n, h, m, L) step 1: each point's softmax over the tokens
    unpack: np.ndarray  # (n, h, L, m) step 2: each token's softmax over the points
    reported: np.ndarray  # (n, h, L, L) the effective attention the layer reported

    @property
    def effective(self) -> np.ndarray:
        return self.unpack @ self.pack  # (n, h, L, L): the matrix applied to V

    def summary(self) -> dict:
        eff = self.effective
        return {
            "mechanism": self.mechanism,
            "n_inducing": int(self.pack.shape[2]),
            "max_product_error": round(float(np.abs(eff - self.reported).max()), 8),
            "max_row_sum_error": round(float(np.abs(eff.sum(-1) - 1).max()), 8),
            "points_per_token": round_list(self.unpack.max(-1).mean(-1), 4),
        }  # (n, h) mean top step-2 weight


def induced_view(cfg, layers: list):
    if not (all_have(layers, "induced_pack") and all_have(layers, "induced_unpack") and all_have(layers, "attention")):
        return None
    return InducedView(
        mechanism=cfg.attention,
        pack=np.stack([to_float64(i.induced_pack[0]) for i in layers]),
        unpack=np.stack([to_float64(i.induced_unpack[0]) for i in layers]),
        reported=np.stack([to_float64(i.attention[0]) for i in layers]),
    )
