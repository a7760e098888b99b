"""Mixture-of-experts feed-forward sublayers (catalogue section 6): ``moe``, ``switch``, ``hash``.

Every expert is the dense GELU FFN of ``dense.py`` (hidden size ``ffn_hidden_size(cfg)``, i.e.
``4 d`` unless ``cfg.d_ff``); ``n_experts`` of them per layer, each with its own parameters.

- ``moe`` (Lepikhin et al. 2020, GShard; Shazeer et al. 2017): softmax router ``Linear(d, E)``
  without bias; each token goes to its ``top_k`` experts with gates renormalised over the chosen k;
  ``y = sum_{chosen e, not dropped} gate_e * expert_e(x)``. GShard's random dispatch of the second
  expert is not used: routing is deterministic.
- ``switch`` (Fedus et al. 2021, Switch Transformer): top-1 routing and ``y = p_e(x) expert_e(x)``
  with ``p_e`` the router probability (not renormalised, so the router gets a gradient from the
  output).
- ``hash`` (Roller et al. 2021, Hash Layers): expert = ``table[token_id]``, a fixed seeded random
  *balanced* table (``randperm(vocab_size) % n_experts`` from a generator seeded with ``cfg.seed``,
  stored as a buffer), so each expert owns ``vocab_size / n_experts`` ids; ``y = expert(x)``, no
  router parameters, no capacity, no loss. Called without token ids (a bare unit call) it hashes
  the position ``0..L-1`` instead; the model always passes the ids.

Conventions the paper leaves open:
- Capacity group = one sequence (one row of ``x[..., L, d]``), so a sequence's output never
  depends on the other sequences in the batch. Capacity per expert per sequence is
  ``ceil(capacity_factor * L * top_k / n_experts)`` (moe) and ``ceil(capacity_factor * L /
  n_experts)`` (switch).
- Assignment priority when an expert overflows: all first choices before all second choices
  (top-k rank first), then by token position (earlier first). An assignment past capacity is
  dropped for that expert only; the token keeps its other experts' outputs with their gates as
  they were (no second renormalisation). A token with every choice dropped gets 0 from the FFN, so
  it passes through the residual unchanged. ``switch`` (and ``hash``) are therefore causal-safe;
  ``moe`` with ``top_k > 1`` is not strictly: whether a token's second choice fits depends on the
  first choices of later tokens, exactly as in GShard.
- Load-balancing loss (``moe`` and ``switch``): ``n_experts * sum_e f_e P_e`` over all ``B * L``
  tokens of the call, ``f_e`` = fraction of tokens whose top-1 choice is ``e`` (GShard uses the
  first choice; counted before capacity drops; no gradient), ``P_e`` = mean router probability of
  ``e``. It is 1 for perfectly uniform routing. It goes into ``aux["loss"]`` times
  ``BALANCE_WEIGHT`` = 0.01, Switch's alpha (Fedus et al. 2021, section 2.2: large enough to balance
  the experts, small enough not to swamp the language model's loss; at 1 per layer a 4-layer model's
  training loss carried ~4 nats of balancing that no routing can lower below 4), so ``out.aux_loss``
  sums one such weighted term per MoE layer.

``aux`` (all three): ``"expert_counts"`` LongTensor ``[n_experts]`` (assignments per expert, all
top-k choices, before dropping), ``"dropped"`` int (assignments dropped for capacity),
``"assignment"`` LongTensor ``x.shape[:-1]`` (top-1 expert per token), ``"capacity"`` (int per
expert per sequence, None for hash), and ``"loss"`` (scalar tensor, not for hash).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ..errors import ConfigError
from ..variant import Param, Variant
from .dense import D_FF, GELUFFN, dense_params

# experts per layer (each a full FFN; up to Qwen3-Next's 512) and experts per token; the capacity factor is a float
N_EXPERTS = Param("n_experts", int, 4, range=(1, 512), cap=16)
TOP_K = Param("top_k", int, 2, range=(1, 256), cap=16)
CAPACITY_FACTOR = Param("capacity_factor", float, 1.25, cap=8.0)
BALANCE_WEIGHT = 0.01  # the load-balancing loss's coefficient: Switch's alpha = 1e-2


def capacity(cfg, group_size: int, k: int) -> int:
    """Expert capacity per group (GShard / Switch): ``ceil(capacity_factor * tokens * k / E)``."""
    return math.ceil(cfg.capacity_factor * group_size * k / cfg.n_experts)


def load_balancing_loss(probs: torch.Tensor, top1: torch.Tensor, n_experts: int) -> torch.Tensor:
    """``E * sum_e f_e P_e``; ``probs (N, E)`` router probabilities, ``top1 (N,)`` first choices."""
    f = F.one_hot(top1, n_experts).to(probs.dtype).mean(0)  # (E,), no gradient
    P = probs.mean(0)  # (E,)
    return n_experts * (f * P).sum()


def keep_within_capacity(expert_idx: torch.Tensor, n_experts: int, cap: int) -> torch.Tensor:
    """Which assignments fit, priority top-k rank first, then position.

    ``expert_idx (G, S, k)`` chosen experts of ``S`` tokens in each of ``G`` groups; returns a bool
    ``(G, S, k)``: True where the assignment is among the first ``cap`` of its expert in its group.
    """
    G, S, k = expert_idx.shape
    ordered = expert_idx.transpose(1, 2).reshape(G, k * S)  # (G, k*S): rank-major, then position
    onehot = F.one_hot(ordered, n_experts)  # (G, k*S, E)
    slot = ((onehot.cumsum(1) - 1) * onehot).sum(-1)  # (G, k*S) index within its expert's buffer
    return (slot < cap).view(G, k, S).transpose(1, 2)  # (G, S, k)


class _ExpertsFFN(nn.Module):
    """``n_experts`` GELU FFNs and the dispatch / combine shared by the three variants."""

    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.n_experts = cfg.n_experts
        self.experts = nn.ModuleList(GELUFFN(cfg) for _ in range(cfg.n_experts))

    def output_parameters(self) -> list:
        return [e.w2.weight for e in self.experts]

    def combine(self, x: torch.Tensor, expert_idx, gates, keep) -> torch.Tensor:
        """``y_t = sum_j keep_tj gate_tj expert_{e_tj}(x_t)``; ``x (N, d)``, the rest ``(N, k)``.

        One gather / expert / scatter-add per expert; an expert with no tokens still runs (on an
        empty batch) so every expert's weights always receive a (zero) gradient.
        """
        N, k = expert_idx.shape
        flat_e = expert_idx.reshape(-1)  # (N*k,)
        flat_tok = torch.arange(N, device=x.device).repeat_interleave(k)  # (N*k,) token of each assignment
        flat_gate = gates.reshape(-1).to(x.dtype)
        flat_keep = keep.reshape(-1)
        y = torch.zeros_like(x)
        for e, expert in enumerate(self.experts):
            sel = torch.nonzero((flat_e == e) & flat_keep, as_tuple=True)[0]  # (n_e,)
            tok = flat_tok[sel]
            out, _ = expert(x[tok])  # (n_e, d)
            y = y.index_add(0, tok, out * flat_gate[sel, None])
        return y

    def stats(self, expert_idx, keep, lead_shape, cap) -> dict:
        """Routing statistics for the app (all detached): counts before dropping, drops, top-1."""
        return {
            "expert_counts": torch.bincount(expert_idx.reshape(-1).detach(), minlength=self.n_experts).long(),
            "dropped": int((~keep).sum().item()),
            "assignment": expert_idx[..., 0].detach().reshape(lead_shape).long(),
            "capacity": cap,
        }


class _RoutedFFN(_ExpertsFFN):
    """Learned softmax router, top-k with capacity, load-balancing loss."""

    renormalise = True  # gates = chosen probabilities / their sum (moe) or the raw probability (switch)

    def __init__(self, cfg, k: int):
        super().__init__(cfg)
        self.k = k
        self.router = nn.Linear(cfg.d_model, cfg.n_experts, bias=False)

    def forward(self, x, tokens=None):
        lead, d = x.shape[:-1], x.shape[-1]
        S = lead[-1] if lead else 1
        xs = x.reshape(-1, S, d)  # (G, S, d): one capacity group per sequence
        G = xs.shape[0]
        # softmax and routing in float32 (Switch's selective precision), stable under bf16 inputs
        probs = torch.softmax(self.router(xs).float(), dim=-1)  # (G, S, E)
        top_p, top_e = probs.topk(self.k, dim=-1)  # (G, S, k), rank 0 first
        cap = capacity(self.cfg, S, self.k)
        keep = keep_within_capacity(top_e, self.n_experts, cap)  # (G, S, k)
        gates = top_p / top_p.sum(-1, keepdim=True) if self.renormalise else top_p  # (G, S, k)
        y = self.combine(
            xs.reshape(G * S, d),
            top_e.reshape(G * S, self.k),
            gates.reshape(G * S, self.k),
            keep.reshape(G * S, self.k),
        )
        aux = self.stats(top_e, keep, lead, cap)
        aux["loss"] = BALANCE_WEIGHT * load_balancing_loss(
            probs.reshape(G * S, -1), top_e[..., 0].reshape(-1), self.n_experts
        )
        return y.reshape(x.shape), aux


class MoEFFN(_RoutedFFN):
    """GShard top-k mixture of experts with gates renormalised over the chosen k."""

    renormalise = True

    def __init__(self, cfg):
        super().__init__(cfg, cfg.top_k)


class SwitchFFN(_RoutedFFN):
    """Switch Transformer: top-1, output scaled by the router probability."""

    renormalise = False  # for top-1 a renormalised gate is 1 and the router would get no gradient

    def __init__(self, cfg):
        super().__init__(cfg, 1)


class HashFFN(_ExpertsFFN):
    """Hash layer: expert fixed by the token id through a seeded balanced random table."""

    def __init__(self, cfg):
        super().__init__(cfg)
        g = torch.Generator().manual_seed(cfg.seed)
        table = torch.randperm(cfg.vocab_size, generator=g) % cfg.n_experts  # (vocab,) balanced
        self.register_buffer("table", table)

    def forward(self, x, tokens=None):
        lead, d = x.shape[:-1], x.shape[-1]
        if tokens is None:  # bare unit call: hash the position instead of the id
            S = lead[-1] if lead else 1
            tokens = torch.arange(S, device=x.device).expand(lead) % self.table.numel()
        expert_idx = self.table[tokens.reshape(-1)][:, None]  # (N, 1)
        keep = torch.ones_like(expert_idx, dtype=torch.bool)
        ones = torch.ones(expert_idx.shape, dtype=x.dtype, device=x.device)
        y = self.combine(x.reshape(-1, d), expert_idx, ones, keep)
        return y.reshape(x.shape), self.stats(expert_idx, keep, lead, None)


def check_capacity(cfg) -> None:
    if not (math.isfinite(cfg.capacity_factor) and cfg.capacity_factor > 0):
        raise ConfigError("capacity_factor", cfg.capacity_factor, "a finite positive number")


def check_moe(cfg) -> None:
    check_capacity(cfg)
    if cfg.top_k > cfg.n_experts:
        raise ConfigError("top_k", cfg.top_k, f"an integer <= n_experts={cfg.n_experts}")


def _experts_params(cfg, router: bool) -> int:
    return cfg.n_experts * dense_params(cfg) + (cfg.d_model * cfg.n_experts if router else 0)


VARIANTS = (
    Variant(
        "moe",
        "Lepikhin et al. 2020 (GShard); Shazeer et al. 2017",
        "A softmax router sends each token to its top-k of n_experts GELU FFNs, with expert capacity "
        "and a load-balancing loss.",
        build=MoEFFN,
        params=(N_EXPERTS, TOP_K, CAPACITY_FACTOR, D_FF),
        check=check_moe,
        n_params=lambda c: _experts_params(c, True),
    ),
    Variant(
        "switch",
        "Fedus et al. 2021 (Switch Transformer)",
        "Top-1 routing to one of n_experts GELU FFNs; tokens over capacity skip the FFN through the residual.",
        build=SwitchFFN,
        params=(N_EXPERTS, CAPACITY_FACTOR, D_FF),
        check=check_capacity,
        n_params=lambda c: _experts_params(c, True),
    ),
    Variant(
        "hash",
        "Roller et al. 2021 (Hash Layers)",
        "Each token id is sent to a fixed expert by a random hash table; no router, no loss.",
        build=HashFFN,
        params=(N_EXPERTS, D_FF),
        n_params=lambda c: _experts_params(c, False),
    ),
)
