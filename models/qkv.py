"""The Q/K/V and output projections of multi-head attention, shared by every attention sublayer.

``QKVProjection`` owns ``q_proj``, ``k_proj``, ``v_proj`` (``n_heads`` query heads, ``n_kv_heads``
key/value heads: MHA, GQA or MQA; each head ``d_h = cfg.d_head`` wide, ``head_dim`` or by default ``d_model /
n_heads``: q ``d_model -> n_heads * d_h``, k and v ``d_model -> n_kv_heads * d_h``) and ``out_proj``
(``n_heads * d_h -> d_model``), without bias unless ``cfg.attn_bias`` asks for them
(``"qkv"``: q, k, v, as Qwen2; ``"all"``: the output projection too, as GPT-2 and BERT), and the query/key
norm ``cfg.qk_norm`` (below). The self-attention sublayer
(``models.blocks.Attention``), the decoder's cross-attention (``models.encdec``) and the layer
structures that call a sublayer's projections on other inputs (funnel's pooled queries, the
compressive memory's reconstruction loss) subclass or call it, so the head split is written once.
Parameter names (``q_proj.weight`` ...) are part of saved checkpoints and the explorer's gradient
plots: subclasses keep them at their own top level.

Query/key normalisation (``cfg.qk_norm``), an RMSNorm ``t / sqrt(mean(t^2) + norm_eps) * g`` of the projected
queries and keys, before any position encoding (RoPE rotates the normed vectors) and before the core:
- ``"head"``: over each head's ``d_h`` dims, one gain ``g [d_h]`` shared by the query heads (``q_norm``) and
  one by the K/V heads (``k_norm``): Qwen3 (2025), Gemma 3 (2025; its RMSNorm stores the gain as ``1 + w``,
  the same function of another parameter); Dehghani et al. 2023 (ViT-22B) normalise the same way.
- ``"all"``: over the whole query projection ``[n_heads * d_h]`` and the whole key projection
  ``[n_kv_heads * d_h]`` before they are split into heads, gains of those widths: OLMo 2 (OLMo et al. 2024).
- ``"rms_rope"``: over each head's ``d_h`` dims without a gain, ``t / sqrt(mean(t^2) + norm_eps)``, and only in
  the layers that rotate their queries and keys (``position="rope"``; a ``layer_schedule``'s ``:nope`` layers keep
  theirs as projected): Llama 4 (Meta 2025; transformers' ``Llama4TextL2Norm``, applied after RoPE there, which is
  the same function, since a rotation keeps each head's sum of squares). No parameters.
- ``"none"``: no norm (default).
Every path that projects with this module (self-attention, cross-attention, funnel's pooled queries, the
compressive memory's reconstruction) reads q and k through ``normed_heads``; ``check_qk_norm`` refuses the
mechanisms that never form ``q . k`` from both.
"""

from __future__ import annotations

import torch
from torch import nn

from kernels import norms as kernel_norms

from .capabilities import ROTARY
from .errors import ConfigError

QK_NORMS = ("none", "head", "all", "rms_rope")


def value_layout(cfg, d_value) -> tuple:
    """``(heads, width)`` of the values a core with its own projections returns: ``d_value`` is what its
    ``AttentionCaps.own_projections(cfg)`` says, a width (``n_heads`` heads of it: MLA, NSA) or a pair
    ``(heads, width)`` (a recurrent mixer whose head count is its own: Mamba-2, Gated DeltaNet)."""
    if isinstance(d_value, tuple):
        heads, width = d_value
        return int(heads), int(width)
    return cfg.n_heads, int(d_value)


def projection_params(cfg, d_value: int | tuple | None = None) -> int:
    """Parameters of one ``QKVProjection``: q and out with ``n_heads``, k and v with ``n_kv_heads``; only
    ``out_proj`` (``value_layout``'s heads and width) for a core that owns its projections (MLA)."""
    if d_value is not None:
        heads, width = value_layout(cfg, d_value)
        return heads * width * cfg.d_model + (cfg.d_model if cfg.attn_bias == "all" else 0)
    weights = 2 * cfg.d_model * cfg.n_heads * cfg.d_head + 2 * cfg.d_model * cfg.kv_heads * cfg.d_head
    bias = cfg.attn_bias
    qkv = (cfg.n_heads + 2 * cfg.kv_heads) * cfg.d_head if bias in ("qkv", "all") else 0
    return weights + qkv + (cfg.d_model if bias == "all" else 0) + qk_norm_params(cfg)


def qk_norm_params(cfg) -> int:
    """Gains of the query/key norms: ``2 d_h`` per head-wise pair, ``(n_heads + n_kv_heads) d_h`` over
    the whole projections."""
    if cfg.qk_norm == "head":
        return 2 * cfg.d_head
    if cfg.qk_norm == "all":
        return (cfg.n_heads + cfg.kv_heads) * cfg.d_head
    return 0


def check_qk_norm(cfg, attention) -> None:
    """Refuse a query/key norm the chosen attention (its registry record) cannot use: one whose keys are
    its queries (no key projection to normalise) or that forms no ``q . k`` at all (synthesizers)."""
    if cfg.qk_norm == "rms_rope" and cfg.position != "rope":
        raise ConfigError(
            "qk_norm",
            cfg.qk_norm,
            f"'none', 'head' or 'all' with position={cfg.position!r}: 'rms_rope' normalises queries and keys only "
            "in layers with position='rope' (Llama 4), so without RoPE it normalises nothing",
        )
    if cfg.qk_norm == "none" or attention is None:
        return
    caps = attention.caps
    if caps is not None and caps.own_projections:
        why = "it projects its own queries and keys (MLA normalises its query bottleneck and its latent itself)"
    elif caps is not None and caps.shared_qk:
        why = "its keys are the unit-normalised queries (shared-QK), so a key norm would normalise nothing"
    elif caps is not None and ROTARY not in caps.accepts:
        why = (
            "it forms no query-key dot product (its logits are synthesized), so normed queries and keys change nothing"
        )
    else:
        return
    raise ConfigError("qk_norm", cfg.qk_norm, f"'none' with attention={cfg.attention!r}: {why}")


class QKNorm(nn.Module):
    """RMSNorm of width ``d`` with gain ``weight`` and ``eps = cfg.norm_eps`` (``kernels.norms.rms_norm``)."""

    def __init__(self, d: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x, detach: bool = False):
        return kernel_norms.rms_norm(x, self.weight.detach() if detach else self.weight, self.eps)


class UnitQKNorm(nn.Module):
    """RMSNorm without a gain, ``x / sqrt(mean(x^2) + eps)`` over the last dim, computed in at least float32 and
    cast back (Llama 4's query/key norm); ``detach`` is accepted for ``QKNorm``'s signature (no gain to detach)."""

    def __init__(self, eps: float):
        super().__init__()
        self.eps = eps

    def forward(self, x, detach: bool = False):
        xf = x.to(torch.promote_types(x.dtype, torch.float32))  # at least float32 (float64 stays float64)
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype)


class QKVProjection(nn.Module):
    """``d_value``: set when the attention core owns its Q/K/V projections (``AttentionCaps.own_projections``,
    MLA): only ``out_proj`` is built, reading ``n_heads`` heads of ``d_value`` (then ``d_head``), or the
    ``(heads, width)`` of a pair (``value_layout``; then ``n_heads`` is that head count)."""

    def __init__(self, cfg, d_value: int | tuple | None = None):
        super().__init__()
        self.n_heads, self.n_kv_heads = cfg.n_heads, cfg.kv_heads
        self.d_head = cfg.d_head
        if d_value is not None:
            self.n_heads, self.d_head = value_layout(cfg, d_value)
        h, hkv, dh = self.n_heads, self.n_kv_heads, self.d_head
        bias = cfg.attn_bias
        qkv_bias, out_bias = bias in ("qkv", "all"), bias == "all"
        if d_value is None:
            self.q_proj = nn.Linear(cfg.d_model, h * dh, bias=qkv_bias)
            self.k_proj = nn.Linear(cfg.d_model, hkv * dh, bias=qkv_bias)
            self.v_proj = nn.Linear(cfg.d_model, hkv * dh, bias=qkv_bias)
        self.out_proj = nn.Linear(h * dh, cfg.d_model, bias=out_bias)
        self.qk_norm = cfg.qk_norm
        if cfg.qk_norm == "rms_rope":  # per head, no gain (a :nope layer's config has qk_norm "none": schedule.py)
            self.qk_norm = "head"
            self.q_norm, self.k_norm = UnitQKNorm(cfg.norm_eps), UnitQKNorm(cfg.norm_eps)
        elif cfg.qk_norm in ("head", "all"):  # gains of d_h (shared by the heads) or of the whole projection
            wide = cfg.qk_norm == "all"
            self.q_norm = QKNorm(h * dh if wide else dh, cfg.norm_eps)
            self.k_norm = QKNorm(hkv * dh if wide else dh, cfg.norm_eps)

    def heads(self, t: torch.Tensor, n_heads: int) -> torch.Tensor:
        """``(B, L, n_heads * d_h) -> (B, n_heads, L, d_h)``."""
        B, L, _ = t.shape
        return t.view(B, L, n_heads, self.d_head).transpose(1, 2)  # (B, n, L, d_h)

    def normed_heads(self, t: torch.Tensor, which: str, detach: bool = False) -> torch.Tensor:
        """A query (``which="q"``) or key (``"k"``) projection ``(B, L, n * d_h)`` through the query/key norm,
        split into heads ``(B, n, L, d_h)``; ``detach``: the norm's gain without its gradient."""
        n = self.n_heads if which == "q" else self.n_kv_heads
        if self.qk_norm == "none":
            return self.heads(t, n)
        norm = self.q_norm if which == "q" else self.k_norm
        if self.qk_norm == "all":  # over the whole projection, then split
            return self.heads(norm(t, detach), n)
        B, L, _ = t.shape
        return norm(t.view(B, L, n, self.d_head), detach).transpose(1, 2)  # per head: (B, n, L, d_h)

    def project(self, x_q: torch.Tensor, x_kv: torch.Tensor) -> tuple:
        """``q (B, h, Lq, d_h)`` from ``x_q (B, Lq, d)``; ``k, v (B, h_kv, Lk, d_h)`` from ``x_kv (B, Lk, d)``;
        q and k through the query/key norm."""
        q = self.normed_heads(self.q_proj(x_q), "q")
        k = self.normed_heads(self.k_proj(x_kv), "k")
        v = self.heads(self.v_proj(x_kv), self.n_kv_heads)
        return q, k, v

    def merge(self, out: torch.Tensor) -> torch.Tensor:
        """``out (B, h, L, d_h)`` -> the output projection of the concatenated heads ``(B, L, d)``."""
        B, h, L, dh = out.shape
        return self.out_proj(out.transpose(1, 2).reshape(B, L, h * dh))  # (B, L, h * d_h) -> (B, L, d)
