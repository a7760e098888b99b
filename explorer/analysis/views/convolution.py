"""The ``lite`` view: the convolution half of Lite Transformer's attention (LSRA, Wu et al. 2020).

Reads ``LayerInfo.conv_taps`` (the softmax taps of every convolution head's kernel) and
``conv_share`` (each position's share of the output that comes from the convolution heads: the
squared norm of the concatenated head outputs; the attention heads hold the rest). The first tap
sits at ``query - (K - 1)`` when causal, ``query - K // 2`` otherwise (``models/attention/lite.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from explorer.analysis.views.common import all_have, round_list, to_float64


@dataclass
class LiteView:
    taps: np.ndarray  # (n, h/2, K) softmax kernel of each convolution head
    offsets: list  # (K,) key position - query position of each tap
    conv_share: np.ndarray  # (n, L) the convolution heads' share of each position's |out|^2
    n_heads: int
    causal: bool

    def summary(self) -> dict:
        return {
            "conv_kernel": len(self.offsets),
            "tap_offsets": self.offsets,
            "taps": round_list(self.taps),
            "conv_share": round_list(self.conv_share),
            "mean_conv_share": round_list(self.conv_share.mean(-1)),
            "n_attention_heads": self.n_heads - self.taps.shape[1],
            "n_conv_heads": int(self.taps.shape[1]),
        }


def lite_view(cfg, layers: list):
    if not (all_have(layers, "conv_taps") and all_have(layers, "conv_share")):
        return None
    K = int(cfg.conv_kernel)
    pad = K - 1 if cfg.causal else K // 2
    return LiteView(
        taps=np.stack([to_float64(i.conv_taps) for i in layers]),
        offsets=[t - pad for t in range(K)],
        conv_share=np.stack([to_float64(i.conv_share[0]) for i in layers]),
        n_heads=int(cfg.n_heads),
        causal=bool(cfg.causal),
    )
