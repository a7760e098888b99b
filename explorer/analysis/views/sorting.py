"""The ``sinkhorn`` view: the learned block sorting of Sparse Sinkhorn Attention (Tay et al. 2020).

Reads ``LayerInfo.sinkhorn``, the Sinkhorn-balanced sorting matrix ``P [nb, nb]`` per head: row
``a`` is how much of each key block is soft-sorted next to query block ``a``. The attention map
only shows the mix spread over keys; ``P`` shows the learned permutation itself and how close
Sinkhorn balancing brought it to doubly stochastic (causal: strictly lower triangular).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from explorer.analysis.views.common import all_have, to_float64


@dataclass
class SinkhornView:
    P: np.ndarray  # (n, h, nb, nb) sorting matrix per layer and head
    block_size: int
    iters: int
    causal: bool

    @property
    def row_sums(self) -> np.ndarray:
        return self.P.sum(-1)  # (n, h, nb): 1 for every row with a block to sort (causal: not block 0)

    @property
    def col_sums(self) -> np.ndarray:
        return self.P.sum(-2)  # (n, h, nb): 1 at Sinkhorn convergence (bidirectional)

    def summary(self) -> dict:
        return {
            "n_blocks": int(self.P.shape[-1]),
            "block_size": self.block_size,
            "sinkhorn_iters": self.iters,
            "causal": self.causal,
            "P": np.round(self.P, 4).tolist(),
            "max_row_sum_error": round(float(_sum_error(self.row_sums, self.causal)), 6),
            "max_col_sum_error": round(float(_sum_error(self.col_sums, self.causal, cols=True)), 6),
        }


def _sum_error(sums: np.ndarray, causal: bool, cols: bool = False) -> float:
    """Largest ``|sum - 1|`` over the rows (columns) that have allowed entries; causal P is strictly lower
    triangular, so row 0 and the last column are empty, and column sums are not balanced to 1 (a column is
    normalised over the rows up to each row in turn), so the causal column error is reported as is."""
    if causal:
        sums = sums[..., :-1] if cols else sums[..., 1:]
    return float(np.abs(sums - 1).max()) if sums.size else 0.0


def sinkhorn_view(cfg, layers: list):
    if not all_have(layers, "sinkhorn"):
        return None
    P = np.stack([to_float64(i.sinkhorn[0]) for i in layers])  # (n, h, nb, nb)
    return SinkhornView(P=P, block_size=int(cfg.block_size), iters=int(cfg.sinkhorn_iters), causal=bool(cfg.causal))
