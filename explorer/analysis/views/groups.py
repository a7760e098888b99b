"""The ``groups`` view: which tokens share a bucket or a cluster, per layer and head.

Reads ``LayerInfo.buckets`` (LSH, Kitaev et al. 2020: the first hash round; a query attends only
keys of its own bucket) or ``LayerInfo.clusters`` (routing, Roy et al. 2021: online k-means shared
by queries and keys, a query attends the keys of its own cluster; clustered attention, Vyas et al.
2020: k-means on the queries only, each query takes its cluster centroid's softmax row).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

# LayerInfo field -> (what a group is, the config field holding the number of groups)
GROUP_KEYS = {"buckets": ("LSH bucket", "n_buckets"), "clusters": ("cluster", "n_clusters")}


@dataclass
class GroupView:
    key: str  # the LayerInfo field ("buckets", "clusters")
    what: str  # "LSH bucket", "routing cluster", "k-means query cluster"
    labels: np.ndarray  # (n, h, L) int: group of each token per layer and head
    n_groups: int

    def summary(self) -> dict:
        sizes = np.stack([(self.labels == g).sum(-1) for g in range(self.n_groups)], -1)  # (n, h, G)
        return {
            "key": self.key,
            "what": self.what,
            "n_groups": self.n_groups,
            "labels": self.labels.tolist(),
            "group_sizes": sizes.tolist(),
        }


def group_view(cfg, layers: list):
    for key, (what, param) in GROUP_KEYS.items():
        if layers and all(isinstance(getattr(i, key), torch.Tensor) for i in layers):
            labels = np.stack([getattr(i, key)[0].cpu().numpy().astype(np.int64) for i in layers])
            if key == "clusters":  # routing: online k-means shared by queries and keys; clustered: queries only
                what = "routing cluster" if cfg.attention == "routing" else "k-means query cluster"
            return GroupView(key=key, what=what, labels=labels, n_groups=int(getattr(cfg, param)))
    return None
