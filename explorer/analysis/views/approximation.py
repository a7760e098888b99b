"""The ``approximation`` view: approximate attention next to exact softmax on the same queries and keys.

Shown for every mechanism that is not a fixed pattern (``models.attention.PATTERNS``) and records
its post-position ``q``, ``k``: linear (Katharopoulos et al. 2020), Performer (Choromanski et al.
2021), Linformer (Wang et al. 2020), Nyströmformer (Xiong et al. 2021), LSH (Kitaev et al. 2020),
routing (Roy et al. 2021) and adaptive span (Sukhbaatar et al. 2019) among others. Reads
``LayerInfo.attention`` (the effective map), ``q``, ``k``, ``score_mods`` and, for merged
segments, ``segments`` and ``key_ids``. The exact map is ``kernels.attention_ref`` on the same
``q``, ``k`` and score modifiers under the same causal mask; the error is ``|effective - exact|``.
For shared-QK LSH the exact counterpart uses the keys LSH uses (unit-normalised queries) and its
self rule (a position attends itself only when it has no other key), so the error is the hashing
alone.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

import kernels
from explorer.analysis.views.common import json_round, to_float32
from models import LayerInfo
from models.attention import ATTENTION, PATTERNS


@dataclass
class ApproxView:
    mechanism: str
    effective: np.ndarray  # (n, h, L, Lk) the mechanism's effective attention
    exact: np.ndarray  # (n, h, L, Lk) exact softmax on the same q, k
    error: np.ndarray  # (n, h, L, Lk) |effective - exact|
    max_error: np.ndarray  # (n, h)
    mean_error: np.ndarray  # (n, h) over the (query, key) pairs the causal mask allows
    causal: bool
    reference: str

    def summary(self) -> dict:
        return {
            "mechanism": self.mechanism,
            "reference": self.reference,
            "causal": self.causal,
            "max_abs_error": json_round(self.max_error),
            "mean_abs_error": json_round(self.mean_error),
            "overall_max_abs_error": json_round(self.max_error.max()),
            "overall_mean_abs_error": json_round(self.mean_error.mean()),
        }


def exact_attention(q, k, mods: dict, causal: bool, shared_qk: bool = False) -> torch.Tensor:
    """Exact softmax ``(B, h, Lq, Lk)`` of ``q (B, h, Lq, d)`` over ``k (B, h_kv, Lk, d)`` with the
    position modifiers ``mods`` and the causal mask (queries are the last ``Lq`` keys); the
    ``1/sqrt(d_h)`` scale. ``shared_qk``: keys = unit-normalised queries, self only as a fallback."""
    q, k = q.float(), k.float()
    mask = None
    if shared_qk:
        k = q / q.norm(dim=-1, keepdim=True).clamp_min(1e-6)
        lq = q.shape[2]
        eye = torch.eye(lq, dtype=torch.bool, device=q.device)
        others = ~eye & (torch.ones_like(eye).tril() if causal else True)
        mask = ~eye | torch.diag(~others.any(-1))  # self allowed only where nothing else is
    v = torch.zeros_like(k)
    mods = {n: (t.float() if isinstance(t, torch.Tensor) and t.is_floating_point() else t) for n, t in mods.items()}
    _, probs = kernels.attention_ref(q, k, v, causal=causal, mask=mask, **mods)
    return probs


def _causal_allowed(lq: int, lk: int, causal: bool) -> np.ndarray:
    if not causal:
        return np.ones((lq, lk), bool)
    return np.arange(lk)[None, :] <= np.arange(lq)[:, None] + (lk - lq)


def _layer_exact(info: LayerInfo, causal: bool, shared_qk: bool) -> torch.Tensor:
    """Exact softmax aligned with ``info.attention``; segment by segment when merged."""
    parts = info.parts()
    if len(parts) == 1:
        p = parts[0]
        return exact_attention(p.q, p.k, p.score_mods or {}, causal, shared_qk)
    ids = info.key_ids.tolist()
    col = {int(x): c for c, x in enumerate(ids)}
    rows = []
    for p in parts:
        e = exact_attention(p.q, p.k, p.score_mods or {}, causal, shared_qk)  # (B, h, Ls, Ps)
        full = e.new_zeros(*e.shape[:3], len(ids))
        full[..., [col[int(x)] for x in p.key_ids.tolist()]] = e
        rows.append(full)
    return torch.cat(rows, dim=2)  # (B, h, L, Lk)


def approximation_view(cfg, layers: list):
    """Effective vs exact attention of a non-pattern mechanism, per applied layer and head."""
    # a layer schedule (models.schedule): each layer's own mechanism; shown when any layer is no pattern
    keys = [cfg.layer_config(i.index).attention for i in layers]
    if all(k in PATTERNS for k in keys) or not layers:
        return None
    if not all(isinstance(i.attention, torch.Tensor) and all(p.q is not None for p in i.parts()) for i in layers):
        return None

    def shared_qk(key) -> bool:  # keys are the unit-normalised queries
        caps = ATTENTION[key].caps
        return bool(caps is not None and caps.shared_qk)

    shared = shared_qk(cfg.attention)
    eff, exact = [], []
    for info, key in zip(layers, keys):
        eff.append(to_float32(info.attention[0]))
        exact.append(to_float32(_layer_exact(info, cfg.causal, shared_qk(key))[0]))
    eff, exact = np.stack(eff), np.stack(exact)  # (n, h, L, Lk)
    err = np.abs(eff - exact)
    allowed = _causal_allowed(eff.shape[2], eff.shape[3], cfg.causal)
    mean = err[..., allowed].mean(-1)
    ref = "softmax(q·k/√d_h) on the layer's q, k (after the position encoding)"
    if shared:
        ref = "softmax(q·k̂/√d_h), k̂ = q/|q| (shared-QK), self only when no other key"
    ref += ", causal mask" if cfg.causal else ", no mask"
    return ApproxView(
        mechanism=cfg.attention,
        effective=eff,
        exact=exact,
        error=err,
        max_error=err.max(axis=(2, 3)),
        mean_error=mean,
        causal=bool(cfg.causal),
        reference=ref,
    )
