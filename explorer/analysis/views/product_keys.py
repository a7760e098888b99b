"""The ``pkm`` view: which value rows of a product-key memory were read (Lample et al. 2019).

Reads ``LayerInfo.slot_counts`` of every segment (``LayerInfo.parts()``): how often each of the
``pkm_subkeys^2`` value rows was among a token's top-``pkm_topk`` of a head, summed over the
layer's FFN calls and segments.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch


@dataclass
class SlotView:
    counts: np.ndarray  # (n, pkm_subkeys^2) reads of each value row per layer
    topk: int
    heads: int

    @property
    def used(self) -> np.ndarray:
        return (self.counts > 0).sum(-1)  # (n,) rows read at least once

    def summary(self) -> dict:
        top = np.argsort(-self.counts, axis=-1, kind="stable")[:, :10]  # (n, 10) most-read rows
        return {
            "n_slots": int(self.counts.shape[-1]),
            "pkm_topk": self.topk,
            "pkm_heads": self.heads,
            "reads": self.counts.sum(-1).tolist(),
            "used": self.used.tolist(),
            "top_slots": top.tolist(),
            "top_counts": np.take_along_axis(self.counts, top, -1).tolist(),
        }


def slot_view(cfg, layers: list):
    if not layers or not all(isinstance(p.slot_counts, torch.Tensor) for i in layers for p in i.parts()):
        return None
    counts = np.stack([sum(p.slot_counts.cpu().numpy().astype(np.int64) for p in i.parts()) for i in layers])
    return SlotView(counts=counts, topk=int(cfg.pkm_topk), heads=int(cfg.pkm_heads))
