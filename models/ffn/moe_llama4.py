"""Llama 4's mixture of experts (Meta 2025, "The Llama 4 herd"; transformers' ``Llama4TextMoe``): ``moe_llama4``.

A router ``Linear(d, E)`` without bias scores each token; its ``top_k`` largest logits ``z`` are chosen and
squashed by a sigmoid (not a softmax: no renormalisation, every other expert's score is 0). The score scales the
expert's *input*, not its output, and a shared SwiGLU expert sees every token unscaled:

    y = shared(x) + sum_{e in top_k(z)} expert_e(sigmoid(z_e) * x)

Every expert and the shared one is a SwiGLU ``W2 (silu(x W) * (x V))`` without biases of width ``d_ff``
(``ffn_hidden_size``'s gated rule ``round(8 d / 3)`` when ``d_ff`` is None; Llama 4: ``intermediate_size``).
Because SwiGLU has no bias the scaled input is not the scaled output: ``expert(s x) != s expert(x)``.
Dropless: no capacity, every chosen expert runs on every token that chose it (one gather / scatter-add per
expert), so a token's output never depends on the other tokens. No load-balancing loss: transformers' Llama 4
adds none to its training loss (``aux`` has no ``"loss"``).

transformers stores the experts fused: ``experts.gate_up_proj [E, d, 2 d_ff]`` (the gate's columns first, then
the up projection's) and ``experts.down_proj [E, d_ff, d]``, applied as ``x @ W``; expert ``e``'s ``w.weight``
here is ``gate_up_proj[e, :, :d_ff].T``, ``v.weight`` ``gate_up_proj[e, :, d_ff:].T``, ``w2.weight``
``down_proj[e].T`` (``models.hf.llama4``). ``shared_expert.{gate,up,down}_proj`` -> ``shared.{w, v, w2}``.

``aux``: ``expert_counts`` ``[E]`` (assignments per expert, every top-k choice), ``dropped`` 0, ``assignment``
(each token's first choice), ``capacity`` None.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..errors import ConfigError
from ..variant import Variant
from .dense import D_FF, GatedFFN
from .moe import N_EXPERTS, TOP_K


def expert_width(cfg) -> int:
    """Each expert's (and the shared expert's) hidden width: ``d_ff``, else the gated rule ``round(8 d / 3)``."""
    return cfg.d_ff if cfg.d_ff is not None else round(8 * cfg.d_model / 3)


class _SwiGLU(GatedFFN):
    """One expert: ``W2 (silu(x W) * (x V))`` of width ``expert_width(cfg)``, no biases."""

    def __init__(self, cfg):
        nn.Module.__init__(self)
        d, hidden = cfg.d_model, expert_width(cfg)
        self.act = F.silu
        self.w = nn.Linear(d, hidden, bias=False)
        self.v = nn.Linear(d, hidden, bias=False)
        self.w2 = nn.Linear(hidden, d, bias=False)


class Llama4MoEFFN(nn.Module):
    """Sigmoid top-k router scaling the chosen experts' inputs, plus a shared SwiGLU expert; dropless."""

    def __init__(self, cfg):
        super().__init__()
        self.n_experts, self.k = cfg.n_experts, cfg.top_k
        self.router = nn.Linear(cfg.d_model, cfg.n_experts, bias=False)
        self.experts = nn.ModuleList(_SwiGLU(cfg) for _ in range(cfg.n_experts))
        self.shared = _SwiGLU(cfg)

    def output_parameters(self) -> list:
        return [e.w2.weight for e in self.experts] + [self.shared.w2.weight]

    def forward(self, x, tokens=None):
        lead, d = x.shape[:-1], x.shape[-1]
        xs = x.reshape(-1, d)  # (N, d)
        logits = self.router(xs)  # (N, E)
        top_z, top_e = logits.topk(self.k, dim=-1)  # (N, k), largest first
        wide = torch.promote_types(top_z.dtype, torch.float32)  # at least float32, as transformers' router
        scores = torch.sigmoid(top_z.to(wide)).to(xs.dtype)  # (N, k)
        y, _ = self.shared(xs)
        flat_e = top_e.reshape(-1)  # (N*k,)
        flat_tok = torch.arange(xs.shape[0], device=x.device).repeat_interleave(self.k)  # (N*k,)
        flat_s = scores.reshape(-1)
        for e, expert in enumerate(self.experts):  # an expert no token chose runs on an empty batch (zero grads)
            sel = torch.nonzero(flat_e == e, as_tuple=True)[0]  # (n_e,)
            tok = flat_tok[sel]
            out, _ = expert(xs[tok] * flat_s[sel, None])  # the score scales the expert's input
            y = y.index_add(0, tok, out)
        aux = {
            "expert_counts": torch.bincount(flat_e.detach(), minlength=self.n_experts).long(),
            "dropped": 0,
            "assignment": top_e[:, 0].detach().reshape(lead).long(),
            "capacity": None,
        }
        return y.reshape(x.shape), aux


def check_llama4_moe(cfg) -> None:
    if cfg.top_k > cfg.n_experts:
        raise ConfigError("top_k", cfg.top_k, f"an integer <= n_experts={cfg.n_experts}")


def llama4_moe_params(cfg) -> int:
    """``E`` routed experts and the shared one (``3 d d_ff`` each), and the router's ``d E``."""
    return (cfg.n_experts + 1) * 3 * cfg.d_model * expert_width(cfg) + cfg.d_model * cfg.n_experts


VARIANTS = (
    Variant(
        "moe_llama4",
        "Meta 2025 (Llama 4)",
        "A sigmoid router picks each token's top-k SwiGLU experts and scales their input by its score; a shared "
        "SwiGLU expert sees every token. Dropless, no balancing loss.",
        build=Llama4MoEFFN,
        params=(N_EXPERTS, TOP_K, D_FF),
        check=check_llama4_moe,
        n_params=llama4_moe_params,
    ),
)
