"""Low-rank attention: Linformer and Nystromformer (bidirectional only).

``linformer`` (Wang et al. 2020, "Linformer: Self-Attention with Linear Complexity"): keys and
values are projected along the sequence, ``K' = E K``, ``V' = F V`` with learned
``E, F [proj_len, max_len]`` (sliced to the first ``Lk`` columns, one pair per layer shared by the
heads; init as the fairseq reference, Xavier-uniform with gain ``1/sqrt(2)``), then
``out = softmax(Q K'^T / sqrt(d_h)) V'``. Effective attention (display): the catalogue maps the
``Lq x proj_len`` matrix ``A`` back through ``E``. ``E`` has signed entries, so ``A E`` is neither
non-negative nor row-stochastic; we use ``A |E|_rows`` where ``|E|_rows`` is ``|E|`` with each row
normalised to sum 1 (each projected key spreads its attention over the positions it mixes, in
proportion to ``|E_kj|``), which makes every row a distribution. It is a picture of *where* the
projected keys look, not the matrix applied to ``V`` (that is ``A F``).

``nystrom`` (Xiong et al. 2021, "Nystromformer"): landmarks ``Ql, Kl`` are the means of
``m = n_landmarks`` segments of Q and K; ``out = softmax(Q Kl^T) pinv(softmax(Ql Kl^T))
(softmax(Ql K^T) V)`` (all scores scaled by ``1/sqrt(d_h)``). When ``L % m != 0`` the segments are
``[floor(s L / m), floor((s + 1) L / m))``: lengths differ by at most one, no position is padded or
double counted (the reference code pads and masks the padding out of the means, which is the same
idea); when ``L < m`` each position is its own landmark. The pseudo-inverse is
``torch.linalg.pinv`` in float64 (exact, differentiable) rather than the paper's 6-step iteration,
so ``n_landmarks = L`` reproduces softmax attention. Effective attention:
``P = softmax(Q Kl^T) pinv(.) softmax(Ql K^T)``; its rows sum to 1 analytically whenever the
landmark kernel is invertible (it is row-stochastic, so ``A2 1 = 1`` gives ``pinv(A2) 1 = 1``); we
divide by the row sum only to remove round-off. Entries may be negative (a Nystrom approximation
is not a softmax), which is exactly what the explorer's error view shows.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ..capabilities import ROTARY, AttentionCaps
from ..errors import ConfigError
from ..variant import Param, Variant
from .common import expand_kv

# projected keys (a learned max_len x proj_len projection per layer) and landmarks
PROJ_LEN = Param("proj_len", int, 64, range=(1, 4096), cap=1024)
N_LANDMARKS = Param("n_landmarks", int, 16, range=(1, 1024), cap=256)


def _work_dtype(x: torch.Tensor) -> torch.dtype:
    """At least float32, never below the input's precision."""
    return torch.promote_types(x.dtype, torch.float32)


def _softcap(s, cfg):
    return s if cfg.softcap is None else cfg.softcap * torch.tanh(s / cfg.softcap)


class LinformerAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        bound = math.sqrt(6.0 / (cfg.proj_len + cfg.max_len)) / math.sqrt(2.0)
        self.E = nn.Parameter(torch.empty(cfg.proj_len, cfg.max_len).uniform_(-bound, bound))
        self.F = nn.Parameter(torch.empty(cfg.proj_len, cfg.max_len).uniform_(-bound, bound))

    def forward(self, q, k, v, mods, ctx):
        cfg = self.cfg
        B, h, lq, d = q.shape
        lk = k.shape[2]
        if lk > cfg.max_len:
            raise ConfigError(
                "max_len",
                cfg.max_len,
                f"an integer >= {lk}: linformer's learned projections E, F have max_len={cfg.max_len} columns "
                f"(one per key position) but the keys span {lk} positions; raise max_len or shorten the input",
            )
        k, v = expand_kv(k, h), expand_kv(v, h)
        E, F = self.E[:, :lk], self.F[:, :lk]
        work = _work_dtype(q)
        kp = torch.einsum("pl,bhld->bhpd", E.to(k.dtype), k)  # (B, h, proj_len, d_h)
        vp = torch.einsum("pl,bhld->bhpd", F.to(v.dtype), v)
        s = _softcap((q @ kp.transpose(-1, -2)).to(work) / math.sqrt(d), cfg)  # (B, h, Lq, proj_len)
        a = torch.softmax(s, dim=-1)
        out = (a @ vp.to(work)).to(q.dtype)
        probs = None
        if ctx.need_weights:
            e = E.abs().to(work)
            e = e / e.sum(-1, keepdim=True).clamp_min(1e-30)  # (proj_len, Lk), rows sum to 1
            probs = (a @ e).to(q.dtype)  # (B, h, Lq, Lk)
        return out, probs, {}


def segment_means(x: torch.Tensor, m: int) -> torch.Tensor:
    """Means of ``m`` near-equal segments ``[floor(sL/m), floor((s+1)L/m))`` of ``x [B, h, L, d]``."""
    L = x.shape[2]
    bounds = torch.div(torch.arange(m + 1, device=x.device) * L, m, rounding_mode="floor")  # (m + 1,)
    i = torch.arange(L, device=x.device)
    member = (i >= bounds[:-1, None]) & (i < bounds[1:, None])  # (m, L)
    avg = member.to(x.dtype) / member.sum(-1, keepdim=True).to(x.dtype)
    return torch.einsum("ml,bhld->bhmd", avg, x)  # (B, h, m, d)


class NystromAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg

    def forward(self, q, k, v, mods, ctx):
        cfg = self.cfg
        B, h, lq, d = q.shape
        lk = k.shape[2]
        k, v = expand_kv(k, h), expand_kv(v, h)
        m = min(cfg.n_landmarks, lq, lk)
        work = _work_dtype(q)  # float32, or float64 for float64 inputs
        qf, kf, vf = q.to(work), k.to(work), v.to(work)
        ql, kl = segment_means(qf, m), segment_means(kf, m)  # (B, h, m, d_h)
        scale = 1.0 / math.sqrt(d)
        a1 = torch.softmax(_softcap(qf @ kl.transpose(-1, -2) * scale, cfg), dim=-1)  # (B, h, Lq, m)
        a2 = torch.softmax(_softcap(ql @ kl.transpose(-1, -2) * scale, cfg), dim=-1)  # (B, h, m, m)
        a3 = torch.softmax(_softcap(ql @ kf.transpose(-1, -2) * scale, cfg), dim=-1)  # (B, h, m, Lk)
        z = torch.linalg.pinv(a2.double()).to(work)
        out = (a1 @ (z @ (a3 @ vf))).to(q.dtype)
        probs = None
        if ctx.need_weights:
            p = a1 @ z @ a3  # (B, h, Lq, Lk)
            probs = (p / p.sum(-1, keepdim=True)).to(q.dtype)
        return out, probs, {}


def check_linformer(cfg) -> None:
    if cfg.proj_len > cfg.max_len:
        raise ConfigError(
            "proj_len",
            cfg.proj_len,
            f"an integer in [1, max_len={cfg.max_len}]: E, F project at most max_len key positions, "
            "so more projected rows than positions only adds parameters",
        )


_NO_SCORES = "has no per-(query, key) score matrix to add a position bias or relative vectors to"
LINFORMER_CAPS = AttentionCaps(
    accepts=frozenset({ROTARY}),
    memory_keys=False,
    refuses_because=_NO_SCORES,
    causal_modes=frozenset({False}),
    causal_reason="it is bidirectional only (E and F mix every key position into each projected key, so a "
    "causal mask cannot be applied)",
)
NYSTROM_CAPS = AttentionCaps(
    accepts=frozenset({ROTARY}),
    memory_keys=False,
    refuses_because=_NO_SCORES,
    causal_modes=frozenset({False}),
    causal_reason="it is bidirectional only (the landmarks are means over segments that include future positions)",
)

VARIANTS = (
    Variant(
        "linformer",
        "Wang et al. 2020 (Linformer)",
        "Keys and values are projected along the sequence to proj_len rows by learned E, F: attention in "
        "O(L * proj_len).",
        build=LinformerAttention,
        params=(PROJ_LEN, "max_len"),
        check=check_linformer,
        caps=LINFORMER_CAPS,
        n_params=lambda c: 2 * c.proj_len * c.max_len,
    ),
    Variant(
        "nystrom",
        "Xiong et al. 2021 (Nystromformer)",
        "Softmax attention approximated through n_landmarks segment-mean landmarks and a pseudo-inverse "
        "(Nystrom method).",
        build=NystromAttention,
        params=(N_LANDMARKS,),
        caps=NYSTROM_CAPS,
    ),
)
