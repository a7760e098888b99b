"""Variant views: what is special about a config, read from one forward pass (no gradio, no plots).

Each view is found from what ``ModelOutput.layers`` (one typed ``models.context.LayerInfo`` per
applied layer) contains, so any variant that reports the same statistics gets the same view without
a change here:

- ``approximation``: attention that is not a section-1 pattern (linear, performer, linformer,
  nystrom, lsh, routing, adaptive_span) with the layer's post-position ``q``, ``k`` recorded: its
  effective map next to exact softmax on the same ``q``, ``k`` and score modifiers under the same
  causal mask (``kernels.attention_ref``), and ``|effective - exact|``. For shared-QK LSH
  (Kitaev et al. 2020) the exact counterpart uses the keys LSH uses (unit-normalised queries) and
  its self rule (a position attends itself only when it has no other key), so the error is the
  hashing alone.
- ``groups``: ``info.buckets`` (LSH, first hash round) / ``info.clusters`` (routing: a query attends
  the keys of its own cluster; clustered: each query takes its k-means cluster centroid's row).
- ``span``: ``info.span`` (adaptive span ``z`` per head, Sukhbaatar et al. 2019).
- ``experts``: ``info.experts`` (``ExpertStats``: moe / switch / hash).
- ``memory``: ``info.memory_len`` per segment and ``info.reach`` per query (xl, compressive,
  knn, tokens).
- ``exit``: ``info.exit_depth`` (early exit, CALM); ``act``: ``info.act_steps`` (Universal
  Transformer with ACT).
- ``sinkhorn``, ``probsparse``, ``talking_heads``, ``residual``, ``pkm``, ``funnel``: in ``explorer.analysis.views.systems``
  (the sorting matrix; the active queries; the head-mixing matrices; the previous layer's share of the
  scores; the memory rows read; the pooled length per layer).

With segmented memories the model merges per-segment infos (``models.memory_view``); views that
count (experts, memory length) read every segment from ``info.segments``. Every view is a small
dataclass of numpy arrays with a JSON-safe ``summary()``; batch element 0 is shown.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

import kernels
from explorer.analysis.views.family import feedback_view, induced_view, lite_view, retrieval_view, sandwich_view
from explorer.analysis.views.systems import (
    funnel_view,
    head_mix_view,
    prior_view,
    probsparse_view,
    sinkhorn_view,
    slot_view,
)
from models.attention import ATTENTION, PATTERNS
from models.context import LayerInfo
from models.memory_view import local_reach

GROUP_KEYS = {"buckets": ("LSH bucket", "n_buckets"), "clusters": ("cluster", "n_clusters")}


def _r(x, nd: int = 5):
    """JSON-safe rounding of a scalar or nested array (NaN / inf -> None)."""
    a = np.asarray(x)
    if a.ndim == 0:
        v = float(a)
        return round(v, nd) if np.isfinite(v) else None
    return [_r(v, nd) for v in a]


def _np(t) -> np.ndarray:
    return t.detach().float().cpu().numpy()


def _parts(info: LayerInfo) -> list:
    """The per-segment records of a layer (just ``[info]`` when the call was one segment)."""
    return info.parts()


# ---------------------------------------------------------------------------- approximation
@dataclass
class ApproxView:
    mechanism: str
    effective: np.ndarray        # (n, h, L, Lk) the mechanism's effective attention
    exact: np.ndarray            # (n, h, L, Lk) exact softmax on the same q, k
    error: np.ndarray            # (n, h, L, Lk) |effective - exact|
    max_error: np.ndarray        # (n, h)
    mean_error: np.ndarray       # (n, h) over the (query, key) pairs the causal mask allows
    causal: bool
    reference: str

    def summary(self) -> dict:
        return {"mechanism": self.mechanism, "reference": self.reference, "causal": self.causal,
                "max_abs_error": _r(self.max_error), "mean_abs_error": _r(self.mean_error),
                "overall_max_abs_error": _r(self.max_error.max()),
                "overall_mean_abs_error": _r(self.mean_error.mean())}


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
    parts = _parts(info)
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
    if cfg.attention in PATTERNS or not layers:
        return None
    if not all(isinstance(i.attention, torch.Tensor) and all(p.q is not None for p in _parts(i)) for i in layers):
        return None
    caps = ATTENTION[cfg.attention].caps
    shared = bool(caps is not None and caps.shared_qk)  # keys are the unit-normalised queries
    eff, exact = [], []
    for info in layers:
        eff.append(_np(info.attention[0]))
        exact.append(_np(_layer_exact(info, cfg.causal, shared)[0]))
    eff, exact = np.stack(eff), np.stack(exact)  # (n, h, L, Lk)
    err = np.abs(eff - exact)
    allowed = _causal_allowed(eff.shape[2], eff.shape[3], cfg.causal)
    mean = err[..., allowed].mean(-1)
    ref = "softmax(q·k/√d_h) on the layer's q, k (after the position encoding)"
    if shared:
        ref = "softmax(q·k̂/√d_h), k̂ = q/|q| (shared-QK), self only when no other key"
    ref += ", causal mask" if cfg.causal else ", no mask"
    return ApproxView(mechanism=cfg.attention, effective=eff, exact=exact, error=err,
                      max_error=err.max(axis=(2, 3)), mean_error=mean, causal=bool(cfg.causal), reference=ref)


# ---------------------------------------------------------------------------- buckets / clusters
@dataclass
class GroupView:
    key: str                     # the LayerInfo field ("buckets", "clusters")
    what: str                    # "LSH bucket", "routing cluster", "k-means query cluster"
    labels: np.ndarray           # (n, h, L) int: group of each token per layer and head
    n_groups: int

    def summary(self) -> dict:
        sizes = np.stack([(self.labels == g).sum(-1) for g in range(self.n_groups)], -1)  # (n, h, G)
        return {"key": self.key, "what": self.what, "n_groups": self.n_groups,
                "labels": self.labels.tolist(), "group_sizes": sizes.tolist()}


def group_view(cfg, layers: list):
    for key, (what, param) in GROUP_KEYS.items():
        if layers and all(isinstance(getattr(i, key), torch.Tensor) for i in layers):
            labels = np.stack([getattr(i, key)[0].cpu().numpy().astype(np.int64) for i in layers])
            if key == "clusters":  # routing: online k-means shared by queries and keys; clustered: queries only
                what = "routing cluster" if cfg.attention == "routing" else "k-means query cluster"
            return GroupView(key=key, what=what, labels=labels, n_groups=int(getattr(cfg, param)))
    return None


# ---------------------------------------------------------------------------- adaptive span
@dataclass
class SpanView:
    span: np.ndarray             # (n, h) learned span z in tokens
    max_span: int
    ramp: int

    def summary(self) -> dict:
        return {"span": _r(self.span, 3), "max_span": self.max_span, "span_ramp": self.ramp}


def span_view(cfg, layers: list):
    if not layers or not all(isinstance(i.span, torch.Tensor) for i in layers):
        return None
    return SpanView(span=np.stack([_np(i.span) for i in layers]), max_span=int(cfg.max_span),
                    ramp=int(cfg.span_ramp))


# ---------------------------------------------------------------------------- experts
@dataclass
class ExpertView:
    ffn: str
    counts: np.ndarray           # (n, E) assignments per expert (all top-k choices, before drops)
    dropped: np.ndarray          # (n,) assignments dropped for capacity
    assignment: np.ndarray       # (n, L) top-1 expert of each token
    capacity: list               # per layer: per-expert capacity per sequence (None: no capacity)
    n_tokens: int                # tokens routed per layer (batch x length)

    @property
    def top_k(self) -> int:
        return int(round(self.counts[0].sum() / max(self.n_tokens, 1)))

    def summary(self) -> dict:
        return {"ffn": self.ffn, "expert_counts": self.counts.tolist(), "dropped": self.dropped.tolist(),
                "capacity": self.capacity, "n_tokens": self.n_tokens, "top_k": self.top_k,
                "assignment": self.assignment.tolist()}


def expert_view(cfg, layers: list):
    if not layers or not all(p.experts is not None for i in layers for p in _parts(i)):
        return None
    counts, dropped, assign, cap = [], [], [], []
    n_tokens = 0
    for info in layers:
        ps = [p.experts for p in _parts(info)]
        counts.append(sum(p.expert_counts.cpu().numpy().astype(np.int64) for p in ps))
        dropped.append(sum(int(p.dropped) for p in ps))
        assign.append(np.concatenate([p.assignment[0].cpu().numpy() for p in ps]))
        cap.append(None if ps[0].capacity is None else int(ps[0].capacity))
        n_tokens = sum(int(p.assignment.numel()) for p in ps)
    return ExpertView(ffn=cfg.ffn, counts=np.stack(counts), dropped=np.array(dropped), assignment=np.stack(assign),
                      capacity=cap, n_tokens=n_tokens)


# ---------------------------------------------------------------------------- memory
@dataclass
class MemoryView:
    memory: str
    memory_len: np.ndarray       # (n, S) slots each layer saw in each segment
    breakdown: list              # [layer][segment] -> {"mem": .., "cmem": ..} / {"prefix": ..} / {"knn": ..}
    segments: list               # [(first token, length)] per segment
    reach: np.ndarray            # (n, L) how many positions back each query can see
    local: np.ndarray            # (L,) the same within its own segment (no memory)

    def summary(self) -> dict:
        return {"memory": self.memory, "memory_len": self.memory_len.tolist(), "breakdown": self.breakdown,
                "segments": [list(s) for s in self.segments], "reach": self.reach.tolist(),
                "reach_without_memory": self.local.tolist()}


def memory_view(cfg, layers: list):
    if not layers or not all(p.memory_len is not None and isinstance(i.reach, torch.Tensor)
                             for i in layers for p in _parts(i)):
        return None
    lens = [int(p.input.shape[1]) for p in _parts(layers[0])]
    starts = np.cumsum([0] + lens[:-1]).tolist()
    local = np.concatenate([local_reach(cfg, n).cpu().numpy() for n in lens])
    return MemoryView(
        memory=cfg.memory,
        memory_len=np.array([[int(p.memory_len) for p in _parts(i)] for i in layers]),
        breakdown=[[{k: int(v) for k, v in (p.memory or {}).items()} for p in _parts(i)] for i in layers],
        segments=list(zip(starts, lens)), reach=np.stack([i.reach[0].cpu().numpy() for i in layers]),
        local=local)


# ---------------------------------------------------------------------------- per-token depth
@dataclass
class DepthView:
    key: str                     # the LayerInfo field: "exit_depth" or "act_steps"
    depth: np.ndarray            # (L,) exit layer (1-based) / ACT steps of each token
    n_layers: int
    threshold: float
    detail: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))  # (n, L) confidence / halting

    def summary(self) -> dict:
        return {"key": self.key, "per_token": _r(self.depth, 3), "mean": _r(self.depth.mean(), 3),
                "n_layers": self.n_layers, "threshold": self.threshold}


def exit_view(cfg, layers: list):
    if not layers or not isinstance(layers[-1].exit_depth, torch.Tensor):
        return None
    conf = [i.exit_confidence for i in layers]
    detail = np.stack([_np(c[0]) for c in conf]) if all(isinstance(c, torch.Tensor) for c in conf) else np.zeros((0, 0))
    return DepthView(key="exit_depth", depth=layers[-1].exit_depth[0].cpu().numpy().astype(np.int64),
                     n_layers=int(cfg.n_layers), threshold=float(cfg.exit_threshold), detail=detail)


def act_view(cfg, layers: list):
    if not layers or not isinstance(layers[-1].act_steps, torch.Tensor):
        return None
    halt = [i.act_halting for i in layers]
    detail = np.stack([_np(h[0]) for h in halt]) if all(isinstance(h, torch.Tensor) for h in halt) else np.zeros((0, 0))
    return DepthView(key="act_steps", depth=_np(layers[-1].act_steps[0]), n_layers=int(cfg.n_layers),
                     threshold=float(cfg.act_threshold), detail=detail)


# ---------------------------------------------------------------------------- all views
VIEWS = {"approximation": approximation_view, "groups": group_view, "span": span_view,
         "experts": expert_view, "memory": memory_view, "exit": exit_view, "act": act_view,
         "sinkhorn": sinkhorn_view, "probsparse": probsparse_view, "talking_heads": head_mix_view,
         "residual": prior_view, "pkm": slot_view, "funnel": funnel_view,
         "induced": induced_view, "lite": lite_view, "retrieval": retrieval_view, "feedback": feedback_view,
         "sandwich": sandwich_view}


@dataclass
class Views:
    tokens: list                 # label of each token
    items: dict                  # name -> view dataclass, only the views this output has

    def summary(self) -> dict:
        return {name: view.summary() for name, view in self.items.items()}


def compute_views(cfg, layers: list, tokens: list) -> Views:
    """Every view whose statistics ``layers`` (``ModelOutput.layers``) contains, in ``VIEWS`` order."""
    items = {}
    for name, fn in VIEWS.items():
        view = fn(cfg, layers)
        if view is not None:
            items[name] = view
    return Views(tokens=list(tokens), items=items)
