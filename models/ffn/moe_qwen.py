"""Qwen's mixture of experts with a gated shared expert, ``moe_qwen`` (Qwen Team 2024, "Qwen2 Technical Report",
section 2.2.3, Qwen2-MoE; the same block in Qwen3-Next, transformers' ``Qwen3NextSparseMoeBlock``).

With ``x`` a token's hidden state, ``E = n_experts`` routed experts, ``K = top_k``:

    p = softmax(x R^T)                       over all E experts (router ``Linear(d, E)``, no bias; in float32)
    T = the K largest p_e;  w_e = p_e / sum_{j in T} p_j  if ``norm_topk_prob`` else p_e
    y = sum_{e in T} w_e FFN_e(x)  +  sigmoid(x . g) FFN_shared(x)

Every routed expert is a SwiGLU ``W2 (silu(x W) * (x V))`` without biases of width ``d_ff``
(``ffn_hidden_size``'s gated rule when None; Qwen's ``moe_intermediate_size``); the shared expert is one SwiGLU of
width ``shared_d_ff`` (None: ``d_ff``; Qwen's ``shared_expert_intermediate_size``), scaled per token by the
sigmoid of ``shared_gate`` (``Linear(d, 1)``, no bias). Dropless: every token reaches its K experts, and a token's
output never depends on another's.

Loss: transformers' ``load_balancing_loss_func`` on one layer's call, ``E sum_e f_e P_e`` with ``f_e`` the
fraction of the ``N K`` assignments that went to ``e`` (no gradient) and ``P_e`` the mean router probability,
times ``ROUTER_AUX_WEIGHT`` = 0.001 (Qwen3-Next's ``router_aux_loss_coef``); 1 (before the weight) for uniform
routing.

transformers stores the experts fused: ``experts.gate_up_proj [E, 2 d_ff, d]`` (the gate's rows first) and
``experts.down_proj [E, d, d_ff]``, applied as ``F.linear``: expert ``e``'s ``w.weight`` is ``gate_up_proj[e,
:d_ff]``, ``v.weight`` ``gate_up_proj[e, d_ff:]``, ``w2.weight`` ``down_proj[e]`` (``models.hf.qwen3_next``).

``aux``: ``expert_counts`` ``[E]`` (every top-k choice), ``dropped`` 0, ``assignment`` (each token's first
choice), ``capacity`` None, ``loss``.
"""

from __future__ import annotations

import torch
from torch import nn

from ..errors import ConfigError
from ..variant import Param, Variant
from .dense import D_FF, ffn_hidden_size
from .moe import N_EXPERTS, TOP_K
from .moe_shared import NORM_TOPK_PROB, SwiGLUExpert

SHARED_D_FF = Param(
    "shared_d_ff", int, None, optional=True, range=(1, 1 << 18), cap=4096, label="Shared expert width (0 = d_ff)"
)
ROUTER_AUX_WEIGHT = 1e-3  # Qwen3-Next's router_aux_loss_coef


def shared_width(cfg) -> int:
    return cfg.shared_d_ff or ffn_hidden_size(cfg)


class QwenMoE(nn.Module):
    """Softmax top-k router over SwiGLU experts plus a sigmoid-gated shared SwiGLU expert; dropless."""

    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        d, E = cfg.d_model, cfg.n_experts
        self.n_experts, self.k = E, cfg.top_k
        self.router = nn.Linear(d, E, bias=False)
        self.experts = nn.ModuleList(SwiGLUExpert(d, ffn_hidden_size(cfg)) for _ in range(E))
        self.shared = SwiGLUExpert(d, shared_width(cfg))
        self.shared_gate = nn.Linear(d, 1, bias=False)

    def output_parameters(self) -> list:
        return [e.w2.weight for e in self.experts] + [self.shared.w2.weight]

    def forward(self, x, tokens=None):
        lead, d = x.shape[:-1], x.shape[-1]
        xs = x.reshape(-1, d)  # (N, d)
        wide = torch.promote_types(xs.dtype, torch.float32)
        probs = torch.softmax(self.router(xs).to(wide), dim=-1)  # (N, E)
        top_p, top_e = probs.topk(self.k, dim=-1)  # (N, K), largest first
        if self.cfg.norm_topk_prob:
            top_p = top_p / top_p.sum(-1, keepdim=True)
        y = torch.zeros_like(xs)
        flat_e = top_e.reshape(-1)  # (N*K,)
        flat_tok = torch.arange(xs.shape[0], device=x.device).repeat_interleave(self.k)  # (N*K,)
        flat_w = top_p.reshape(-1).to(xs.dtype)
        for e, expert in enumerate(self.experts):  # an expert no token chose runs on an empty batch (zero grads)
            sel = torch.nonzero(flat_e == e, as_tuple=True)[0]  # (n_e,)
            tok = flat_tok[sel]
            y = y.index_add(0, tok, expert(xs[tok]) * flat_w[sel, None])
        y = y + torch.sigmoid(self.shared_gate(xs)) * self.shared(xs)
        counts = torch.bincount(flat_e.detach(), minlength=self.n_experts)
        f = counts.to(probs.dtype) / max(1, flat_e.numel())  # (E,): share of the assignments, no gradient
        aux = {
            "expert_counts": counts.long(),
            "dropped": 0,
            "assignment": top_e[:, 0].detach().reshape(lead).long(),
            "capacity": None,
            "loss": ROUTER_AUX_WEIGHT * self.n_experts * (f * probs.mean(0)).sum(),
        }
        return y.reshape(x.shape), aux


def check(cfg) -> None:
    if cfg.top_k > cfg.n_experts:
        raise ConfigError("top_k", cfg.top_k, f"an integer <= n_experts={cfg.n_experts}")


def n_params(cfg) -> int:
    """Router, ``E`` routed experts (``3 d d_ff`` each; ``d_ff`` None: the gated rule ``round(8 d / 3)``), the
    shared expert (``3 d shared_d_ff``) and its gate."""
    d = cfg.d_model
    return d * cfg.n_experts + cfg.n_experts * 3 * d * ffn_hidden_size(cfg) + 3 * d * shared_width(cfg) + d


VARIANTS = (
    Variant(
        "moe_qwen",
        "Qwen Team 2024 (Qwen2 Technical Report: Qwen2-MoE; also Qwen3-Next)",
        "A softmax router picks each token's top-k SwiGLU experts; a shared SwiGLU expert, scaled by a learned "
        "sigmoid gate, sees every token. Dropless.",
        build=QwenMoE,
        params=(N_EXPERTS, TOP_K, NORM_TOPK_PROB, SHARED_D_FF, D_FF),
        check=check,
        n_params=n_params,
    ),
)
