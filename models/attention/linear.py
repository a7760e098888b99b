"""Linearized attention: a feature map ``phi`` replaces ``exp(q.k)``, so attention costs O(L).

``out_i = phi(q_i) S / phi(q_i) z`` with ``S = sum_j phi(k_j) v_j^T``, ``z = sum_j phi(k_j)``
(sums over ``j <= i_abs`` when causal, as prefix sums), computed by
``kernels.linear_attention.linear_attention`` (chunked prefix sums on CPU, Triton on CUDA), which
adds ``eps`` to the denominator and shares K/V heads across a GQA group. No ``L x L`` matrix is formed unless the
effective attention is requested; then it is ``A = phi(Q) phi(K)^T`` (causal: ``j <= i_abs``) divided by its row sums
(without the kernel's ``eps``, so rows sum to exactly 1; ``A V`` equals the output up to it).

``linear`` (Katharopoulos et al. 2020, "Transformers are RNNs"): ``phi(x) = elu(x) + 1``.

``performer`` (Choromanski et al. 2021, "Rethinking Attention with Performers", FAVOR+): inputs
are scaled by ``d_h^-1/4`` and ``W [m, d_h]`` (``m = n_features``) has orthogonal rows in blocks of
``d_h`` (QR of a Gaussian matrix) with chi(d_h)-distributed norms, drawn once from ``cfg.seed``
(a buffer: fixed per model, saved with it).
- ``feature_map="positive"``: ``phi(x) = exp(W x - |x|^2 / 2) / sqrt(m)``, so ``phi(q).phi(k)`` is an
  unbiased, positive estimator of ``exp(q.k / sqrt(d_h))``;
- ``feature_map="trig"`` (RFA, Peng et al. 2021; Performer v1):
  ``phi(x) = exp(|x|^2 / 2) / sqrt(m) [sin(W x), cos(W x)]`` (``2m`` features), also unbiased for
  the softmax kernel thanks to the ``exp(|x|^2/2)`` factor, but not positive, so its normalisers
  can come close to 0 (the instability FAVOR+ removes).
Stabilisers (as the Performer code): each query's features are divided by ``exp`` of their own
largest log-amplitude (a per-query constant: cancels in the ratio); in the bidirectional model the
keys' by the largest over all keys (a global constant). A causal model leaves keys unshifted, since a
constant taken over all positions would depend (through ``eps``) on the future.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from kernels.linear_attention import linear_attention

from ..capabilities import ROTARY, AttentionCaps
from ..errors import ConfigError
from ..variant import Param, Variant
from .common import check_no_softcap, expand_kv

N_FEATURES = Param("n_features", int, 64, range=(1, 4096), cap=1024, surgery=True)  # random features per head
FEATURE_MAP = Param("feature_map", str, "positive", choices=("positive", "trig"), surgery=True)

EPS = 1e-6
_SALT = 0x9E7F


def elu_feature(x: torch.Tensor) -> torch.Tensor:
    return F.elu(x.float()) + 1.0


def orthogonal_gaussian(m: int, d: int, gen: torch.Generator) -> torch.Tensor:
    """``[m, d]``: blocks of ``d`` orthonormal rows (QR of a Gaussian), rows rescaled by chi(d) norms."""
    blocks = []
    for _ in range(math.ceil(m / d)):
        qm, r = torch.linalg.qr(torch.randn(d, d, generator=gen))  # orthonormal columns
        qm = qm * torch.sign(torch.diagonal(r))  # LAPACK's sign convention biases directions; this makes Q Haar
        blocks.append(qm.T)
    w = torch.cat(blocks)[:m]
    norms = torch.randn(m, d, generator=gen).norm(dim=1)  # |g| of a d-dim Gaussian ~ chi(d)
    return w * norms[:, None]


def favor_features(x: torch.Tensor, w: torch.Tensor, kind: str, shift: str) -> torch.Tensor:
    """Random features of ``x [B, h, L, d]`` (already scaled by ``d^-1/4``); ``shift`` in
    ``{"row", "all", "none"}`` is the stabiliser (see module docstring)."""
    proj = x @ w.T  # (B, h, L, m)
    half_sq = 0.5 * (x * x).sum(-1, keepdim=True)  # (B, h, L, 1)
    log_amp = proj - half_sq if kind == "positive" else half_sq
    if shift == "row":
        log_amp = log_amp - log_amp.amax(-1, keepdim=True).detach()
    elif shift == "all":
        log_amp = log_amp - log_amp.amax(dim=(-2, -1), keepdim=True).detach()
    amp = torch.exp(log_amp) / math.sqrt(w.shape[0])
    if kind == "positive":
        return amp
    return torch.cat([amp * torch.sin(proj), amp * torch.cos(proj)], dim=-1)  # (B, h, L, 2m)


def kernel_probs(phi_q: torch.Tensor, phi_k: torch.Tensor, causal: bool) -> torch.Tensor:
    """Effective attention ``[B, h, Lq, Lk]``: the kernel matrix normalised by its row sums."""
    a = phi_q.double() @ phi_k.double().transpose(-1, -2)  # (B, h, Lq, Lk); fp64: trig rows cancel
    if causal:
        lq, lk = a.shape[-2:]
        i = torch.arange(lq, device=a.device)[:, None] + (lk - lq)
        a = a.masked_fill(torch.arange(lk, device=a.device)[None, :] > i, 0.0)
    return a / a.sum(-1, keepdim=True)


def attend(phi_q, phi_k, v, causal: bool):
    """Linear attention with queries the last ``Lq`` of ``Lk`` positions (memory keys come first)."""
    lq, lk = phi_q.shape[2], phi_k.shape[2]
    if lq < lk:  # queries sit at the end: zero features for the memory rows, dropped afterwards
        phi_q = F.pad(phi_q, (0, 0, lk - lq, 0))
    out = linear_attention(phi_q, phi_k, v, causal=causal, eps=EPS)
    return out[:, :, lk - lq :]


class LinearAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg

    def features(self, q, k):
        return elu_feature(q), elu_feature(k)

    def forward(self, q, k, v, mods, ctx):
        phi_q, phi_k = self.features(q, k)  # phi_k keeps the h_kv heads: the kernel shares them (GQA)
        out = attend(phi_q, phi_k, v, self.cfg.causal).to(q.dtype)
        probs = None
        if ctx.need_weights:
            probs = kernel_probs(phi_q, expand_kv(phi_k, q.shape[1]), self.cfg.causal).to(q.dtype)
        return out, probs, {}


class PerformerAttention(LinearAttention):
    def __init__(self, cfg):
        super().__init__(cfg)
        gen = torch.Generator().manual_seed(cfg.seed * 1000003 + _SALT)
        self.register_buffer("W", orthogonal_gaussian(cfg.n_features, cfg.d_head, gen))  # (m, d_h)

    def features(self, q, k):
        scale = q.shape[-1] ** -0.25
        kind = self.cfg.feature_map
        phi_q = favor_features(q.float() * scale, self.W, kind, "row")
        phi_k = favor_features(k.float() * scale, self.W, kind, "none" if self.cfg.causal else "all")
        return phi_q, phi_k


def check(cfg) -> None:
    check_no_softcap(cfg, f"{cfg.attention} attention")


def check_performer(cfg) -> None:
    check(cfg)
    if cfg.feature_map not in FEATURE_MAP.choices:
        raise ConfigError("feature_map", cfg.feature_map, f"one of {list(FEATURE_MAP.choices)}")


# rope acts on q, k before the feature map and works; there is no score matrix for the rest
CAPS = AttentionCaps(
    accepts=frozenset({ROTARY}),
    memory_keys=False,
    refuses_because=(
        "has no score matrix to add a bias or relative vectors to (rope acts on q, k before the feature map)"
    ),
    sinks_reason=(
        "has no softmax row over keys: its normaliser is phi(q_i) . sum_j phi(k_j), a feature-map sum with "
        "no exp(logit) term a learned sink could join"
    ),
)

VARIANTS = (
    Variant(
        "linear",
        "Katharopoulos et al. 2020 (Transformers are RNNs)",
        "exp(q.k) replaced by elu+1 feature maps: attention becomes running sums, linear in L.",
        build=LinearAttention,
        check=check,
        caps=CAPS,
        surgery=True,
    ),
    Variant(
        "performer",
        "Choromanski et al. 2021 (Performer, FAVOR+); Peng et al. 2021 (RFA)",
        "Random features whose dot product estimates the softmax kernel: softmax attention approximated in O(L).",
        build=PerformerAttention,
        params=(N_FEATURES, FEATURE_MAP),
        check=check_performer,
        caps=CAPS,
        surgery=True,
    ),
)
