"""DeepSeekMoE with shared experts and auxiliary-loss-free routing, ``moe_deepseek`` (DeepSeek-AI 2024,
"DeepSeek-V3 Technical Report", section 2.1.2; fine-grained and shared experts: Dai et al. 2024, DeepSeekMoE).

With ``x`` a token's hidden state, ``E = n_experts`` routed experts, ``K = top_k``:

    s_e = sigmoid(x . r_e)                         affinity of each routed expert (router ``Linear(d, E)``, no bias)
    c_e = s_e + b_e                                b = ``e_score_correction_bias``, used only to choose experts
    groups: the E experts in ``n_group`` equal groups, each scored by the sum of its two best c_e; only the
            experts of the ``topk_group`` best groups stay candidates (node-limited routing)
    T = the K candidates with the largest c_e
    g_e = s_e / (sum_{j in T} s_j + 1e-20)  if ``norm_topk_prob`` else s_e,  for e in T (the bias never weighs)
    y = sum_{e in T} routed_scaling * g_e * FFN_e(x)  +  FFN_shared(x)

Every expert is a SwiGLU ``W2 (silu(x W) * (x V))`` without biases, of width ``d_ff`` (``ffn_hidden_size``:
``4 d`` unless ``d_ff`` is set; DeepSeek's ``moe_intermediate_size``); the shared expert is one SwiGLU of
width ``d_ff * n_shared_experts`` (DeepSeek's ``n_shared_experts`` shared experts, fused as ``transformers``'
``DeepseekV3MoE`` holds them) added for every token; ``n_shared_experts = 0``: none. Routing is dropless:
every token reaches all its K experts (no capacity, nothing dropped), and one sequence never depends on
another. The router runs in float32 (``transformers`` keeps ``gate.weight`` and the bias in float32).

These are the conventions of ``transformers`` 5's ``DeepseekV3TopkRouter`` / ``DeepseekV3MoE``, so a DeepSeek-V3
checkpoint maps one to one (``models/hf/deepseek_v3.py``). The bias is a persistent buffer, as there: V3 moves
it after each training step by ``gamma * sign(mean load - load_e)`` (auxiliary-loss-free balancing); that
update is not modelled, so the bias stays what was loaded (zeros for a fresh model) while a model trains here.
The loss is V3's complementary sequence-wise balance loss (eq. 17-20): per sequence of ``T`` tokens,
``f_e = E / (K T) * #{t : e in T_t}`` (no gradient), ``P_e = mean_t s_e,t / sum_j s_j,t``, ``L = alpha sum_e
f_e P_e`` with ``alpha = SEQ_BALANCE_WEIGHT`` = 1e-4 (V3's value), averaged over the sequences; it is
``alpha`` for perfectly uniform routing.

``aux``: ``"expert_counts"`` LongTensor ``[n_experts]`` (assignments per expert, all K choices),
``"dropped"`` 0, ``"assignment"`` LongTensor ``x.shape[:-1]`` (each token's first choice, by ``c_e``),
``"capacity"`` None, ``"loss"``.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ..errors import ConfigError
from ..variant import Param, Variant
from .dense import D_FF, ffn_hidden_size
from .moe import N_EXPERTS, TOP_K

N_SHARED_EXPERTS = Param("n_shared_experts", int, 1, range=(0, 64), cap=4, label="Shared experts (width x d_ff)")
N_GROUP = Param("n_group", int, 1, range=(1, 256), cap=16, label="Expert groups (n_group)")
TOPK_GROUP = Param("topk_group", int, 1, range=(1, 256), cap=16, label="Groups a token may use (topk_group)")
ROUTED_SCALING = Param("routed_scaling", float, 1.0, cap=16.0, label="Routed experts' scale")
NORM_TOPK_PROB = Param("norm_topk_prob", bool, True, label="Normalise the chosen scores")
SEQ_BALANCE_WEIGHT = 1e-4  # DeepSeek-V3's alpha for the sequence-wise balance loss (section 4.2)


class SwiGLUExpert(nn.Module):
    """``W2 (silu(x W) * (x V))``, no biases, of width ``hidden`` (the names of ``dense.GatedFFN``)."""

    def __init__(self, d: int, hidden: int):
        super().__init__()
        self.w = nn.Linear(d, hidden, bias=False)
        self.v = nn.Linear(d, hidden, bias=False)
        self.w2 = nn.Linear(hidden, d, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w(x)) * self.v(x))


class DeepSeekMoE(nn.Module):
    """Sigmoid router with a selection-only bias and group-limited top-k, SwiGLU experts, shared experts."""

    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        d, hidden, E = cfg.d_model, ffn_hidden_size(cfg), cfg.n_experts
        self.n_experts, self.k = E, cfg.top_k
        self.router = nn.Linear(d, E, bias=False)
        # chosen-expert offsets of auxiliary-loss-free balancing: a buffer (no gradient reaches it)
        self.register_buffer("e_score_correction_bias", torch.zeros(E))
        self.experts = nn.ModuleList(SwiGLUExpert(d, hidden) for _ in range(E))
        self.shared = SwiGLUExpert(d, hidden * cfg.n_shared_experts) if cfg.n_shared_experts else None

    def output_parameters(self) -> list:
        return [e.w2.weight for e in self.experts] + ([self.shared.w2.weight] if self.shared is not None else [])

    def route(self, x: torch.Tensor) -> tuple:
        """``x (N, d)`` -> ``(scores (N, E) float32, chosen (N, K) best first, weights (N, K))``."""
        cfg, N, E = self.cfg, x.shape[0], self.n_experts
        scores = F.linear(x.float(), self.router.weight.float()).sigmoid()  # (N, E)
        choice = scores + self.e_score_correction_bias.float()  # (N, E): for choosing only
        if cfg.n_group > 1:
            groups = choice.view(N, cfg.n_group, E // cfg.n_group)  # (N, G, E / G)
            group_score = groups.topk(2, dim=-1).values.sum(-1)  # (N, G): the two best experts of each group
            best = group_score.topk(cfg.topk_group, dim=-1).indices  # (N, topk_group)
            keep = torch.zeros_like(group_score, dtype=torch.bool).scatter(1, best, True)  # (N, G)
            choice = choice.masked_fill(~keep.repeat_interleave(E // cfg.n_group, dim=1), float("-inf"))
        chosen = choice.topk(self.k, dim=-1).indices  # (N, K), best first
        weights = scores.gather(1, chosen)  # (N, K): the scores without the bias
        if cfg.norm_topk_prob:
            weights = weights / (weights.sum(-1, keepdim=True) + 1e-20)
        return scores, chosen, weights * cfg.routed_scaling

    def combine(self, x: torch.Tensor, chosen: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        """``y_t = sum_j w_tj expert_{e_tj}(x_t)``; one gather / expert / scatter-add per expert (an expert
        with no token still runs on an empty batch, so every expert's weights get a (zero) gradient)."""
        N, k = chosen.shape
        flat_e = chosen.reshape(-1)  # (N*K,)
        flat_tok = torch.arange(N, device=x.device).repeat_interleave(k)  # (N*K,) token of each assignment
        flat_w = weights.reshape(-1).to(x.dtype)
        y = torch.zeros_like(x)
        for e, expert in enumerate(self.experts):
            sel = torch.nonzero(flat_e == e, as_tuple=True)[0]  # (n_e,)
            tok = flat_tok[sel]
            y = y.index_add(0, tok, expert(x[tok]) * flat_w[sel, None])
        return y

    def forward(self, x, tokens=None):
        lead, d = x.shape[:-1], x.shape[-1]
        S = lead[-1] if lead else 1
        flat = x.reshape(-1, d)  # (N, d)
        scores, chosen, weights = self.route(flat)
        y = self.combine(flat, chosen, weights)
        if self.shared is not None:
            y = y + self.shared(flat)
        aux = {
            "expert_counts": torch.bincount(chosen.reshape(-1).detach(), minlength=self.n_experts).long(),
            "dropped": 0,
            "assignment": chosen[:, 0].detach().reshape(lead).long(),
            "capacity": None,
            "loss": SEQ_BALANCE_WEIGHT * sequence_balance_loss(scores.view(-1, S, self.n_experts), chosen, self.k),
        }
        return y.reshape(x.shape), aux


def sequence_balance_loss(scores: torch.Tensor, chosen: torch.Tensor, k: int) -> torch.Tensor:
    """DeepSeek-V3's ``sum_e f_e P_e`` per sequence, averaged; ``scores (G, S, E)``, ``chosen (G*S, K)``."""
    G, S, E = scores.shape
    picked = F.one_hot(chosen.view(G, S * k), E).sum(1).to(scores.dtype)  # (G, E) assignments per sequence
    f = picked * E / (k * S)  # no gradient: a count
    P = (scores / scores.sum(-1, keepdim=True)).mean(1)  # (G, E)
    return (f * P).sum(-1).mean()


def check(cfg) -> None:
    E = cfg.n_experts
    if cfg.top_k > E:
        raise ConfigError("top_k", cfg.top_k, f"an integer <= n_experts={E}")
    if E % cfg.n_group:
        divisors = [g for g in range(1, E + 1) if E % g == 0]
        raise ConfigError("n_group", cfg.n_group, f"a divisor of n_experts={E} (equal expert groups): {divisors}")
    if cfg.n_group > 1 and E // cfg.n_group < 2:
        raise ConfigError(
            "n_group",
            cfg.n_group,
            f"1, or at most n_experts / 2 = {E // 2}: a group is scored by the sum of its two best experts",
        )
    if cfg.topk_group > cfg.n_group:
        raise ConfigError("topk_group", cfg.topk_group, f"an integer in [1, n_group={cfg.n_group}]")
    reachable = E if cfg.n_group == 1 else cfg.topk_group * (E // cfg.n_group)
    if cfg.top_k > reachable:
        raise ConfigError(
            "top_k",
            cfg.top_k,
            f"at most the {reachable} experts of the topk_group={cfg.topk_group} groups a token may use",
        )
    if not (math.isfinite(cfg.routed_scaling) and cfg.routed_scaling > 0):
        raise ConfigError("routed_scaling", cfg.routed_scaling, "a finite positive number")


def n_params(cfg) -> int:
    """Router + routed experts + the shared expert (the bias is a buffer, not a parameter)."""
    d, hidden = cfg.d_model, ffn_hidden_size(cfg)
    return d * cfg.n_experts + (cfg.n_experts + cfg.n_shared_experts) * 3 * d * hidden


VARIANTS = (
    Variant(
        "moe_deepseek",
        "DeepSeek-AI 2024 (DeepSeek-V3; DeepSeekMoE: Dai et al. 2024)",
        "Sigmoid router with a bias used only to choose experts, group-limited top-k of n_experts SwiGLU "
        "experts, plus shared experts every token uses; dropless.",
        build=DeepSeekMoE,
        params=(N_EXPERTS, TOP_K, N_SHARED_EXPERTS, N_GROUP, TOPK_GROUP, ROUTED_SCALING, NORM_TOPK_PROB, D_FF),
        check=check,
        n_params=n_params,
    ),
)
