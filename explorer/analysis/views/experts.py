"""The ``experts`` view: how a mixture of experts spread the tokens, and what it dropped.

Reads ``LayerInfo.experts`` (``ExpertStats``: ``expert_counts``, ``dropped``, ``assignment``,
``capacity``) of every segment (``LayerInfo.segments``) for ``moe`` (Shazeer et al. 2017;
Lepikhin et al. 2020, GShard), ``switch`` (Fedus et al. 2021) and ``hash`` (Roller et al. 2021):
assignments per expert (every top-k choice, before drops), assignments dropped for capacity, and
the top-1 expert of each token.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class ExpertView:
    ffn: str
    counts: np.ndarray  # (n, E) assignments per expert (all top-k choices, before drops)
    dropped: np.ndarray  # (n,) assignments dropped for capacity
    assignment: np.ndarray  # (n, L) top-1 expert of each token
    capacity: list  # per layer: per-expert capacity per sequence (None: no capacity)
    n_tokens: int  # tokens routed per layer (batch x length)
    layers: list = None  # the model's layer index of each row (a schedule's ':dense' layers have no experts)

    def __post_init__(self):
        if self.layers is None:
            self.layers = list(range(len(self.counts)))

    @property
    def top_k(self) -> int:
        return int(round(self.counts[0].sum() / max(self.n_tokens, 1)))

    def summary(self) -> dict:
        return {
            "ffn": self.ffn,
            "expert_counts": self.counts.tolist(),
            "dropped": self.dropped.tolist(),
            "capacity": self.capacity,
            "n_tokens": self.n_tokens,
            "top_k": self.top_k,
            "assignment": self.assignment.tolist(),
            "layers": list(self.layers),
        }


def expert_view(cfg, layers: list):
    """The view of the layers whose FFN routes (every layer, or a schedule's layers without ``:dense``);
    None when no layer does."""
    routed = [(i, info) for i, info in enumerate(layers or []) if all(p.experts is not None for p in info.parts())]
    if not routed:
        return None
    counts, dropped, assign, cap = [], [], [], []
    n_tokens = 0
    for _, info in routed:
        ps = [p.experts for p in info.parts()]
        counts.append(sum(p.expert_counts.cpu().numpy().astype(np.int64) for p in ps))
        dropped.append(sum(int(p.dropped) for p in ps))
        assign.append(np.concatenate([p.assignment[0].cpu().numpy() for p in ps]))
        cap.append(None if ps[0].capacity is None else int(ps[0].capacity))
        n_tokens = sum(int(p.assignment.numel()) for p in ps)
    return ExpertView(
        ffn=cfg.ffn,
        counts=np.stack(counts),
        dropped=np.array(dropped),
        assignment=np.stack(assign),
        capacity=cap,
        n_tokens=n_tokens,
        layers=[i for i, _ in routed],
    )
