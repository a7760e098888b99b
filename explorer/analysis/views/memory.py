"""The ``memory`` view: how much memory each layer held per segment, and how far back each query sees.

For ``xl`` (Dai et al. 2019), ``compressive`` (Rae et al. 2019), ``knn`` (Wu et al. 2022) and
``tokens`` (Sukhbaatar et al. 2019; Burtsev et al. 2020). Reads, per segment
(``LayerInfo.parts()``), ``memory_len`` (slots prepended or stored), ``memory`` (their breakdown:
``mem`` / ``cmem`` / ``prefix`` / ``knn``) and ``input`` (the segment's length), and the merged
``reach`` (distance from each query to the oldest token it can attend); the reach without memory
is ``local_reach`` of each segment on its own.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from models.memory.view import local_reach


@dataclass
class MemoryView:
    memory: str
    memory_len: np.ndarray  # (n, S) slots each layer saw in each segment
    breakdown: list  # [layer][segment] -> {"mem": .., "cmem": ..} / {"prefix": ..} / {"knn": ..}
    segments: list  # [(first token, length)] per segment
    reach: np.ndarray  # (n, L) how many positions back each query can see
    local: np.ndarray  # (L,) the same within its own segment (no memory)

    def summary(self) -> dict:
        return {
            "memory": self.memory,
            "memory_len": self.memory_len.tolist(),
            "breakdown": self.breakdown,
            "segments": [list(s) for s in self.segments],
            "reach": self.reach.tolist(),
            "reach_without_memory": self.local.tolist(),
        }


def memory_view(cfg, layers: list):
    if not layers or not all(
        p.memory_len is not None and isinstance(i.reach, torch.Tensor) for i in layers for p in i.parts()
    ):
        return None
    lens = [int(p.input.shape[1]) for p in layers[0].parts()]
    starts = np.cumsum([0] + lens[:-1]).tolist()
    local = np.concatenate([local_reach(cfg, n).cpu().numpy() for n in lens])
    return MemoryView(
        memory=cfg.memory,
        memory_len=np.array([[int(p.memory_len) for p in i.parts()] for i in layers]),
        breakdown=[[{k: int(v) for k, v in (p.memory or {}).items()} for p in i.parts()] for i in layers],
        segments=list(zip(starts, lens)),
        reach=np.stack([i.reach[0].cpu().numpy() for i in layers]),
        local=local,
    )
