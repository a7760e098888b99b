"""The ``retrieval`` view: what a retrieval-augmented LM fetched and how it changed the next token
(kNN-LM, Khandelwal et al. 2020; SPALM, Yogatama et al. 2021).

Reads the ``LayerInfo.lm_*`` records of the last layer that has them: the neighbours retrieved for
each position (``lm_next``: stored next token, ``lm_dist``: squared distance, ``lm_pos``: stored
position), the memory's weight in the mixture (``lm_mix``: the fixed ``knn_lambda``; SPALM's
``1 - g`` per position) and the next-token distribution without the memory, from the memory alone
and mixed (``lm_p_model``, ``lm_p_memory``, ``lm_p_mixed``). The store fills after each segment.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from explorer.analysis.views.common import round_list, to_float64
from explorer.runtime.tokens import token_label


@dataclass
class RetrievalView:
    memory: str
    next: np.ndarray  # (L, k) int: stored next token of each neighbour (-1: none), nearest first
    dist: np.ndarray  # (L, k) squared L2 distance (NaN: none)
    pos: np.ndarray  # (L, k) int: position of the stored context (-1: none)
    mix: np.ndarray  # (L,) the memory's weight: knn_lambda / 1 - g (0 while the store is empty)
    p_model: np.ndarray  # (L, V) next-token distribution without the memory
    p_memory: np.ndarray  # (L, V) from the memory alone (NaN rows: empty store)
    p_mixed: np.ndarray  # (L, V) what the model outputs
    segment_len: int = 0  # the store fills after each segment of this many tokens

    @property
    def top(self) -> np.ndarray:
        return self.p_mixed.argmax(-1)  # (L,) the output's most likely next token

    def top_probs(self) -> dict:
        """Probability of the output's top token under each distribution, ``(L,)`` each."""
        idx = self.top[:, None]
        return {
            n: np.take_along_axis(p, idx, -1)[:, 0]
            for n, p in (("model", self.p_model), ("memory", self.p_memory), ("mixed", self.p_mixed))
        }

    @property
    def retrieved(self) -> np.ndarray:
        return (self.next >= 0).any(-1)  # (L,) positions that found at least one neighbour

    def summary(self) -> dict:
        got = self.retrieved
        changed = (self.p_model.argmax(-1) != self.top) & got
        return {
            "memory": self.memory,
            "knn_k": int(self.next.shape[1]),
            "segment_len": self.segment_len,
            "positions_with_neighbours": int(got.sum()),
            "neighbour_next": self.next.tolist(),
            "neighbour_pos": self.pos.tolist(),
            "neighbour_dist": [[None if not np.isfinite(d) else round(float(d), 4) for d in row] for row in self.dist],
            "memory_weight": round_list(self.mix),
            "top_changed": int(changed.sum()),
            "top_token": [token_label(int(t)) for t in self.top],
        }


def retrieval_view(cfg, layers: list):
    found = [i for i in layers if isinstance(i.lm_mix, torch.Tensor)]
    if not found:
        return None
    i = found[-1]  # the memory records on the last layer
    return RetrievalView(
        memory=cfg.memory,
        next=i.lm_next[0].cpu().numpy().astype(np.int64),
        dist=to_float64(i.lm_dist[0]),
        pos=i.lm_pos[0].cpu().numpy().astype(np.int64),
        mix=to_float64(i.lm_mix[0]),
        p_model=to_float64(i.lm_p_model[0]),
        p_memory=to_float64(i.lm_p_memory[0]),
        p_mixed=to_float64(i.lm_p_mixed[0]),
        segment_len=int(cfg.segment_len),
    )
