"""The ``probsparse`` view: which queries ProbSparse attention let attend (Zhou et al. 2021, Informer).

Reads ``LayerInfo.active_queries``: the top-``u`` queries by ``max - mean`` of their scores
(causal: a running top-``u`` over the queries so far) attended with a full softmax; the others
output the (running) mean of V. ``u = probsparse_factor * ceil(ln L)``, at most ``L``
(``models.attention.probsparse.n_active``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from explorer.analysis.views.common import all_have
from models.attention.probsparse import n_active


@dataclass
class ProbSparseView:
    active: np.ndarray  # (n, h, L) bool: the query attended (else: mean of V)
    u: int  # probsparse_factor * ceil(ln L), at most L
    causal: bool

    def summary(self) -> dict:
        return {
            "u": self.u,
            "causal": self.causal,
            "active": self.active.astype(int).tolist(),
            "n_active": self.active.sum(-1).tolist(),
        }


def probsparse_view(cfg, layers: list):
    if not all_have(layers, "active_queries"):
        return None
    active = np.stack([i.active_queries[0].cpu().numpy().astype(bool) for i in layers])  # (n, h, L)
    return ProbSparseView(active=active, u=n_active(cfg, active.shape[-1]), causal=bool(cfg.causal))
