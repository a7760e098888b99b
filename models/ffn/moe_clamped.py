"""gpt-oss's mixture of experts: ``moe_swiglu_clamped`` (OpenAI 2025, "gpt-oss-120b & gpt-oss-20b Model Card";
transformers' ``GptOssMLP``).

For a token ``x`` (width ``d``), ``E = n_experts`` experts of hidden width ``f = d_ff`` (None: ``round(8 d / 3)``,
the gated FFNs' rule):

- router: ``z = x W_r^T + b_r`` (a Linear with bias, ``[E, d]`` and ``[E]``); the token goes to the ``top_k``
  experts of largest ``z`` and their gates are the softmax over those ``k`` logits only (``top_k`` first, then
  softmax: the other experts' logits do not enter the gates).
- expert ``e``: ``h = x G_e + c_e`` with ``G_e [d, 2f]``, ``c_e [2f]`` (``gate_up_proj`` / ``gate_up_proj_bias``),
  interleaved: the gate is ``g = h[0::2]`` (even columns), the linear branch ``u = h[1::2]`` (odd columns);
  clamped: ``g = min(g, limit)``, ``u = clamp(u, -limit, limit)``; the clamped SwiGLU
  ``a = (u + 1) * g * sigmoid(alpha g)`` (``alpha = swiglu_alpha`` 1.702, ``limit = swiglu_limit`` 7.0; note the
  ``+ 1`` on the linear branch); out ``a D_e + o_e`` with ``D_e [f, d]``, ``o_e [d]`` (``down_proj`` /
  ``down_proj_bias``).
- ``y = sum_{j < k} gate_j expert_{e_j}(x)``. Dropless: no capacity, every token reaches its ``k`` experts, so a
  token's output never depends on another token.

The parameters are laid out as transformers' ``GptOssExperts`` stores them (``x @ W``, not ``nn.Linear``'s
``x @ W^T``), so a checkpoint maps one to one: ``router.weight`` / ``router.bias``, ``ffn.experts.gate_up_proj``
``[E, d, 2f]``, ``ffn.experts.gate_up_proj_bias`` ``[E, 2f]``, ``ffn.experts.down_proj`` ``[E, f, d]``,
``ffn.experts.down_proj_bias`` ``[E, d]``. Initialisation (ours): weights ``U(-1/sqrt(fan_in), 1/sqrt(fan_in))`` as
``nn.Linear``, expert biases 0.

No load-balancing loss: transformers adds its Switch-style ``router_aux_loss_coef`` term only when
``output_router_logits`` is set, which gpt-oss's config leaves false, so the family trains without one here.
``aux``: ``expert_counts`` (assignments per expert, every top-k choice), ``assignment`` (top-1 expert per token),
``dropped`` 0 and ``capacity`` None (dropless).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ..errors import ConfigError
from ..variant import Param, Variant
from .dense import D_FF, ffn_hidden_size
from .moe import N_EXPERTS, TOP_K

SWIGLU_ALPHA = Param("swiglu_alpha", float, 1.702, label="Clamped SwiGLU: sigmoid gain alpha")
SWIGLU_LIMIT = Param("swiglu_limit", float, 7.0, label="Clamped SwiGLU: clamp limit")


def clamped_swiglu(h: torch.Tensor, alpha: float, limit: float) -> torch.Tensor:
    """``(u + 1) * g * sigmoid(alpha g)`` of the interleaved ``h [..., 2f]``: ``g = min(h[0::2], limit)``,
    ``u = clamp(h[1::2], -limit, limit)`` -> ``[..., f]``."""
    g = h[..., 0::2].clamp(max=limit)
    u = h[..., 1::2].clamp(-limit, limit)
    return (u + 1) * (g * torch.sigmoid(alpha * g))


class Experts(nn.Module):
    """The ``n_experts`` clamped-SwiGLU experts, stored as stacked tensors (transformers' layout)."""

    def __init__(self, cfg):
        super().__init__()
        E, d, f = cfg.n_experts, cfg.d_model, ffn_hidden_size(cfg)
        self.gate_up_proj = nn.Parameter(torch.empty(E, d, 2 * f))  # (E, d, 2f): even columns gate, odd up
        self.gate_up_proj_bias = nn.Parameter(torch.zeros(E, 2 * f))
        self.down_proj = nn.Parameter(torch.empty(E, f, d))  # (E, f, d)
        self.down_proj_bias = nn.Parameter(torch.zeros(E, d))
        nn.init.uniform_(self.gate_up_proj, -(d**-0.5), d**-0.5)
        nn.init.uniform_(self.down_proj, -(f**-0.5), f**-0.5)
        self.alpha, self.limit = cfg.swiglu_alpha, cfg.swiglu_limit

    def forward(self, x: torch.Tensor, e: int) -> torch.Tensor:
        """Expert ``e`` on ``x (n, d)`` -> ``(n, d)``."""
        h = x @ self.gate_up_proj[e] + self.gate_up_proj_bias[e]  # (n, 2f)
        return clamped_swiglu(h, self.alpha, self.limit) @ self.down_proj[e] + self.down_proj_bias[e]


class ClampedSwiGLUMoE(nn.Module):
    """Router with bias, top-k then softmax over the chosen k, dropless dispatch to clamped-SwiGLU experts."""

    def __init__(self, cfg):
        super().__init__()
        self.n_experts, self.k = cfg.n_experts, cfg.top_k
        self.router = nn.Linear(cfg.d_model, cfg.n_experts, bias=True)
        self.experts = Experts(cfg)

    def output_parameters(self) -> list:
        return [self.experts.down_proj]

    def forward(self, x, tokens=None):
        lead, d = x.shape[:-1], x.shape[-1]
        xs = x.reshape(-1, d)  # (N, d)
        logits = self.router(xs)  # (N, E)
        top_z, top_e = logits.topk(self.k, dim=-1)  # (N, k), largest first
        gates = torch.softmax(top_z, dim=-1)  # (N, k): over the chosen k only
        y = torch.zeros_like(xs)
        for e in range(self.n_experts):  # an expert without tokens still runs (empty) so it gets a zero gradient
            tok, slot = torch.nonzero(top_e == e, as_tuple=True)  # (n_e,) each
            out = self.experts(xs[tok], e)  # (n_e, d)
            y = y.index_add(0, tok, out * gates[tok, slot, None].to(out.dtype))
        aux = {
            "expert_counts": torch.bincount(top_e.reshape(-1).detach(), minlength=self.n_experts).long(),
            "dropped": 0,
            "assignment": top_e[:, 0].detach().reshape(lead).long(),
            "capacity": None,
        }
        return y.reshape(x.shape), aux


def check_moe_clamped(cfg) -> None:
    if cfg.top_k > cfg.n_experts:
        raise ConfigError("top_k", cfg.top_k, f"an integer <= n_experts={cfg.n_experts}")
    for name in ("swiglu_alpha", "swiglu_limit"):
        value = getattr(cfg, name)
        if not (math.isfinite(value) and 0 < value <= 1000):
            raise ConfigError(name, value, "a number in (0, 1000]")


def moe_clamped_params(cfg) -> int:
    """Router ``d E + E``; per expert ``d 2f + 2f + f d + d``."""
    d, E, f = cfg.d_model, cfg.n_experts, ffn_hidden_size(cfg)
    return d * E + E + E * (3 * d * f + 2 * f + d)


VARIANTS = (
    Variant(
        "moe_swiglu_clamped",
        "OpenAI 2025 (gpt-oss)",
        "A router with bias sends each token to its top-k experts (softmax over the chosen k), each a SwiGLU "
        "with biases whose gate and linear branch are clamped, (up + 1) * gate * sigmoid(1.702 gate); dropless.",
        build=ClampedSwiGLUMoE,
        params=(N_EXPERTS, TOP_K, D_FF, SWIGLU_ALPHA, SWIGLU_LIMIT),
        check=check_moe_clamped,
        n_params=moe_clamped_params,
    ),
)
