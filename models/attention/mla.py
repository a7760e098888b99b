"""Multi-head latent attention, ``mla`` (DeepSeek-AI 2024, "DeepSeek-V2: A Strong, Economical, and Efficient
Mixture-of-Experts Language Model", section 2.1; the same layer in DeepSeek-V3).

Keys and values of every head come from one compressed latent per token, and a small decoupled RoPE key
is shared by all heads, so a decoding cache keeps ``kv_lora_rank + qk_rope_head_dim`` numbers per token and
layer instead of ``2 * h * d_h``. With ``x`` a token's hidden state (width ``d``), ``h`` heads,
``dn = qk_nope_head_dim``, ``dr = qk_rope_head_dim``, ``dv = v_head_dim``, ``r = kv_lora_rank``:

    q_n = x W_q                       (B, L, h (dn + dr)), or x W_qa -> RMSNorm -> W_qb when q_lora_rank > 0
    [q^C_n, q^R_n] = split(q_n)       per head: the first dn numbers, then dr (the "nope" part first)
    [c, k^R] = x W_kva                (r + dr): the latent, then the shared RoPE key
    c = RMSNorm(c)                    (eps 1e-6, learned gain: DeepSeek's kv_a_layernorm)
    [k^C_n, v_n] = c W_kvb            per head: dn key numbers, then dv value numbers (W_UK, W_UV)
    q_n = [q^C_n, RoPE(q^R_n)],  k_n = [k^C_n, RoPE(k^R)]   (one k^R per token, shared by the heads)
    o_n = softmax(q_n k_n^T / sqrt(dn + dr)) v_n,  out = [o_1 .. o_h] W_o

The names and layouts are those of ``transformers``' ``DeepseekV3Attention`` (``q_proj`` or ``q_a_proj``,
``q_a_layernorm``, ``q_b_proj``; ``kv_a_proj_with_mqa``, ``kv_a_layernorm``, ``kv_b_proj``; its ``o_proj`` is
the sublayer's ``out_proj``), so a checkpoint maps one to one. ``rope_interleave`` (DeepSeek's default, True):
the rope numbers of a projection are interleaved pairs ``(x0, x1), (x2, x3), ...``; they are de-interleaved
(evens, then odds) and rotated with the ``rope`` position encoding's rotate-half, which is exactly
``apply_rotary_pos_emb_interleave``; False: rotate-half on the numbers as they are. The rotation's base and
position scale are the ``rope`` encoding's (``rope_base``, ``rope_scale``, or YaRN's ``yarn_*`` frequencies and
cos / sin factor, computed over the ``dr`` rotated numbers: ``models/positions/yarn.py``); the whole ``dr`` part
rotates (``rope_fraction`` must be 1). DeepSeek's YaRN temperature (``yarn_mscale_all_dim``, its config's
``mscale_all_dim``): the softmax scale is ``m_all^2 / sqrt(dn + dr)`` with ``m_all = 0.1 mscale_all_dim ln s + 1``
(transformers' ``yarn_apply_mscale``), in both forms below.

Two forms of the same function (``mla_absorb``): the naive form up-projects every cached latent to per-head
keys and values (``transformers``' path); the absorbed form folds ``W_UK`` into the query
(``q^C_n W_UK,n^T``, width r) and attends against the latent itself, then applies ``W_UV`` to the
attended latent (DeepSeek-V2's inference trick: it never materialises per-head keys). Both run their softmax
through the shared kernels (``kernels.attention``: the Triton flash kernel on CUDA, SDPA or the block-sparse
PyTorch path on a CPU), the absorbed form as MQA (the latent is one K/V head for every query head); the unequal
widths (``dn + dr`` against ``dv``; ``r + dr`` against ``r``) are zero-padded to a common kernel width
(``padded.py``) with the explicit scale ``m_all^2 / sqrt(dn + dr)`` (``m_all = 1`` without YaRN's temperature).
When the maps are requested (``need_weights``) the forward runs dense in PyTorch, at least in float32, and returns
the maps with its output.

The core owns its projections (``AttentionCaps.own_projections``): ``project`` returns ``q (B, h, Lq, dn + dr)``
(rotated), ``k (B, 1, Lk, r + dr)`` = ``[c, RoPE(k^R)]`` (what the cache holds) and ``v = c``; the forward
reports the equivalent per-head ``q``, ``k`` for the views when weights are requested. Refused: positions
other than ``rope``, ``n_kv_heads`` (keys and values come from the latent), projection biases, the memories
that prepend keys or retrieve with the shared projections (``knn``); the funnel structure takes ``full`` only.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ..capabilities import ROTARY, AttentionCaps
from ..errors import ConfigError
from ..positions.yarn import softmax_scale_mult
from ..variant import Param, Variant
from .padded import padded_attention
from .scores import allowed_pairs, masked_softmax

Q_LORA_RANK = Param("q_lora_rank", int, 0, range=(0, 16384), cap=1024, label="MLA query rank (0 = plain projection)")
KV_LORA_RANK = Param("kv_lora_rank", int, 64, range=(1, 16384), cap=1024, label="MLA latent width (kv_lora_rank)")
QK_NOPE_HEAD_DIM = Param(
    "qk_nope_head_dim", int, 32, range=(1, 4096), cap=256, label="MLA query/key width without RoPE"
)
QK_ROPE_HEAD_DIM = Param("qk_rope_head_dim", int, 16, range=(2, 4096), cap=256, label="MLA decoupled RoPE width")
V_HEAD_DIM = Param("v_head_dim", int, 32, range=(1, 4096), cap=256, label="MLA value width per head")
MLA_ABSORB = Param("mla_absorb", bool, False, label="MLA: attend in the latent (absorbed form)", surgery=True)
ROPE_INTERLEAVE = Param("rope_interleave", bool, True, label="MLA: RoPE pairs interleaved (DeepSeek's layout)")
RMS_EPS = 1e-6  # DeepseekV3RMSNorm's default, which q_a_layernorm and kv_a_layernorm use


def deinterleave(t: torch.Tensor) -> torch.Tensor:
    """``(x0, x1, x2, x3, ...) -> (x0, x2, ..., x1, x3, ...)``: interleaved RoPE pairs as rotate-half's halves."""
    return torch.cat([t[..., 0::2], t[..., 1::2]], dim=-1)


class MLAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        d, h = cfg.d_model, cfg.n_heads
        self.h, self.dn, self.dr, self.dv, self.r = (
            h,
            cfg.qk_nope_head_dim,
            cfg.qk_rope_head_dim,
            cfg.v_head_dim,
            cfg.kv_lora_rank,
        )
        dq = self.dn + self.dr
        # the softmax scale: 1 / sqrt(dn + dr), times DeepSeek's YaRN temperature m_all^2 (yarn_mscale_all_dim)
        self.scale = softmax_scale_mult(cfg) / math.sqrt(dq)
        if cfg.q_lora_rank:
            self.q_a_proj = nn.Linear(d, cfg.q_lora_rank, bias=False)
            self.q_a_layernorm = nn.RMSNorm(cfg.q_lora_rank, eps=RMS_EPS)
            self.q_b_proj = nn.Linear(cfg.q_lora_rank, h * dq, bias=False)
        else:
            self.q_proj = nn.Linear(d, h * dq, bias=False)
        self.kv_a_proj_with_mqa = nn.Linear(d, self.r + self.dr, bias=False)
        self.kv_a_layernorm = nn.RMSNorm(self.r, eps=RMS_EPS)
        self.kv_b_proj = nn.Linear(self.r, h * (self.dn + self.dv), bias=False)

    def queries(self, x: torch.Tensor) -> torch.Tensor:
        """``x (B, L, d)`` -> ``(B, h, L, dn + dr)``, before the rotation."""
        q = self.q_b_proj(self.q_a_layernorm(self.q_a_proj(x))) if self.cfg.q_lora_rank else self.q_proj(x)
        return q.unflatten(-1, (self.h, -1)).transpose(1, 2)  # (B, h, L, dn + dr)

    def project(self, x_q, x_kv, position, layer: int, k_start: int = 0):
        """``(q (B, h, Lq, dn + dr), k (B, 1, Lk, r + dr), v (B, 1, Lk, r), mods)``: rotated queries; the
        cache ``[c, RoPE(k^R)]``; the latent ``c`` the values come from; the rotation's modifiers (none)."""
        q_nope, q_rope = self.queries(x_q).split([self.dn, self.dr], dim=-1)
        c, k_rope = self.kv_a_proj_with_mqa(x_kv).split([self.r, self.dr], dim=-1)  # (B, Lk, r), (B, Lk, dr)
        c = self.kv_a_layernorm(c)[:, None]  # (B, 1, Lk, r)
        k_rope = k_rope[:, None]  # (B, 1, Lk, dr): one RoPE key per token for every head
        if self.cfg.rope_interleave:
            q_rope, k_rope = deinterleave(q_rope), deinterleave(k_rope)
        q_rope, k_rope, mods = position.modify(
            q_rope.contiguous(), k_rope.contiguous(), layer, k_start=k_start, scale=self.scale
        )
        return torch.cat([q_nope, q_rope], dim=-1), torch.cat([c, k_rope], dim=-1), c, mods

    def up_projections(self) -> tuple:
        """``W_UK (h, dn, r)`` and ``W_UV (h, dv, r)``: the rows of ``kv_b_proj`` for each head."""
        w = self.kv_b_proj.weight.view(self.h, self.dn + self.dv, self.r)
        return w[:, : self.dn], w[:, self.dn :]

    def expand(self, k: torch.Tensor) -> tuple:
        """Per-head keys ``(B, h, Lk, dn + dr)`` and values ``(B, h, Lk, dv)`` from the cache ``k``."""
        c, k_rope = k.split([self.r, self.dr], dim=-1)
        kv = self.kv_b_proj(c[:, 0]).unflatten(-1, (self.h, -1)).transpose(1, 2)  # (B, h, Lk, dn + dv)
        k_nope, v = kv.split([self.dn, self.dv], dim=-1)
        return torch.cat([k_nope, k_rope.expand(-1, self.h, -1, -1)], dim=-1), v

    def forward(self, q, k, v, mods, ctx):
        """``q (B, h, Lq, dn + dr)``, ``k (B, 1, Lk, r + dr)``, ``v`` the latent ``(B, 1, Lk, r)``
        -> ``(B, h, Lq, dv)``. Without maps through the shared kernels, with them dense."""
        if not ctx.need_weights:
            return self._kernel_forward(q, k, v), None, {}
        return self._dense_forward(q, k, v, ctx)

    def _kernel_forward(self, q, k, v) -> torch.Tensor:
        """The output through ``kernels.attention`` (Triton on CUDA, SDPA / block-sparse PyTorch on a CPU),
        widths zero-padded to a common kernel width (``padded.py``). Naive form: per-head keys and values
        (``h`` K/V heads); absorbed form: the latent as one K/V head shared by every query head (MQA), keys
        ``[c, RoPE(k^R)]`` (``r + dr``) and values ``c`` (``r``), then ``W_UV`` on the attended latent."""
        cfg, scale = self.cfg, self.scale
        if cfg.mla_absorb:
            w_uk, w_uv = self.up_projections()
            q_nope, q_rope = q.split([self.dn, self.dr], dim=-1)
            q_lat = torch.einsum("bhld,hdr->bhlr", q_nope, w_uk.to(q.dtype))  # (B, h, Lq, r)
            lat = padded_attention(
                torch.cat([q_lat, q_rope], dim=-1), k, v, scale=scale, causal=cfg.causal, softcap=cfg.softcap
            )  # (B, h, Lq, r)
            out = torch.einsum("bhlr,hvr->bhlv", lat, w_uv.to(lat.dtype))  # (B, h, Lq, dv)
        else:
            keys, values = self.expand(k)  # (B, h, Lk, dn + dr), (B, h, Lk, dv)
            out = padded_attention(q, keys, values, scale=scale, causal=cfg.causal, softcap=cfg.softcap)
        return out.to(v.dtype)

    def _dense_forward(self, q, k, v, ctx):
        """The output and the maps in dense PyTorch (at least float32), for the views."""
        cfg, lq, lk = self.cfg, q.shape[2], k.shape[2]
        acc = torch.promote_types(q.dtype, torch.float32)
        scale = self.scale
        w_uk, w_uv = (w.to(acc) for w in self.up_projections())
        q, k = q.to(acc), k.to(acc)
        shown = None
        if cfg.mla_absorb:  # attend in the latent: W_UK folded into the query, W_UV after
            q_nope, q_rope = q.split([self.dn, self.dr], dim=-1)
            q_lat = torch.einsum("bhld,hdr->bhlr", q_nope, w_uk)  # (B, h, Lq, r)
            s = torch.cat([q_lat, q_rope], dim=-1) @ k.transpose(-1, -2)  # (B, h, Lq, Lk): one key "head"
        else:  # transformers' path: per-head keys and values up-projected from every cached latent
            keys, values = self.expand(k)  # (B, h, Lk, dn + dr), (B, h, Lk, dv)
            s = q @ keys.transpose(-1, -2)
            shown = keys
        s = s * scale
        if cfg.softcap is not None:
            s = cfg.softcap * torch.tanh(s / cfg.softcap)
        p = masked_softmax(s, allowed_pairs(lq, lk, cfg.causal, q.device))  # (B, h, Lq, Lk)
        if cfg.mla_absorb:
            out = torch.einsum("bhlr,hvr->bhlv", p @ v.to(acc), w_uv)  # (B, h, Lq, dv)
        else:
            out = p @ values
        if shown is None:
            shown = self.expand(k)[0]
        # the views' exact softmax(q.k / sqrt(d)) on these per-head q, k is this very map (d = dn + dr; the query
        # carries YaRN's m_all^2 when yarn_mscale_all_dim is set)
        mult = scale * math.sqrt(self.dn + self.dr)
        shown_q = q if mult == 1 else q * mult
        aux = {"q": shown_q.detach().to(v.dtype), "k": shown.detach().to(v.dtype), "score_mods": {}}
        return out.to(v.dtype), p.to(v.dtype), aux


def cache_values(cfg) -> int:
    """Numbers per token and layer a decoding cache keeps: the latent and the shared RoPE key."""
    return cfg.kv_lora_rank + cfg.qk_rope_head_dim


def n_params(cfg) -> int:
    """The core's projections and norms (``out_proj``, ``h * dv -> d``, is the sublayer's)."""
    d, h, dq = cfg.d_model, cfg.n_heads, cfg.qk_nope_head_dim + cfg.qk_rope_head_dim
    rq = cfg.q_lora_rank
    q = d * rq + rq + rq * h * dq if rq else d * h * dq
    kv = d * (cfg.kv_lora_rank + cfg.qk_rope_head_dim) + cfg.kv_lora_rank
    return q + kv + cfg.kv_lora_rank * h * (cfg.qk_nope_head_dim + cfg.v_head_dim)


def check(cfg) -> None:
    if cfg.position != "rope":
        raise ConfigError(
            "position",
            cfg.position,
            "'rope' with attention='mla': MLA rotates only its decoupled RoPE part (qk_rope_head_dim numbers of "
            "each query and one key per token shared by all heads), which is what lets the latent cache stay "
            "position-free; an absolute encoding or a score bias is not part of the method",
        )
    if cfg.rope_fraction != 1.0:
        raise ConfigError(
            "rope_fraction",
            cfg.rope_fraction,
            "1.0 with attention='mla': its decoupled RoPE part (qk_rope_head_dim numbers) is rotated whole; the "
            "position-free part is qk_nope_head_dim",
        )
    if cfg.qk_rope_head_dim % 2:
        raise ConfigError("qk_rope_head_dim", cfg.qk_rope_head_dim, "an even width (RoPE rotates pairs)")
    if cfg.n_kv_heads is not None:
        raise ConfigError(
            "n_kv_heads",
            cfg.n_kv_heads,
            "None with attention='mla': its keys and values come from one shared latent per token, up-projected "
            "to every head, so there are no K/V heads to group (the cache size is kv_lora_rank + qk_rope_head_dim)",
        )
    if cfg.attn_bias != "none":
        raise ConfigError(
            "attn_bias", cfg.attn_bias, "'none' with attention='mla' (DeepSeek's MLA projections have no biases)"
        )
    if cfg.head_dim is not None:
        raise ConfigError(
            "head_dim",
            cfg.head_dim,
            "None with attention='mla': its heads have their own widths (qk_nope_head_dim + qk_rope_head_dim for "
            "queries and keys, v_head_dim for values), so head_dim would change nothing",
        )
    if cfg.memory == "knn":  # memories that prepend keys are refused by the capabilities (memory_keys=False)
        raise ConfigError(
            "memory",
            cfg.memory,
            "not 'knn' with attention='mla': the Memorizing Transformer's layer retrieves with the keys of the "
            "shared K/V projections and wraps the core call, and MLA's keys come from its latent",
        )


VARIANTS = (
    Variant(
        "mla",
        "DeepSeek-AI 2024 (DeepSeek-V2: multi-head latent attention)",
        "Keys and values up-projected from one shared latent per token plus a shared decoupled RoPE key: "
        "a small KV cache.",
        build=MLAttention,
        params=(
            Q_LORA_RANK,
            KV_LORA_RANK,
            QK_NOPE_HEAD_DIM,
            QK_ROPE_HEAD_DIM,
            V_HEAD_DIM,
            MLA_ABSORB,
            ROPE_INTERLEAVE,
            "causal",
            "softcap",
        ),
        check=check,
        caps=AttentionCaps(
            accepts=frozenset({ROTARY}),
            refuses_because="rotates its decoupled RoPE part itself and adds no per-pair score term",
            memory_keys=False,
            own_projections=lambda c: c.v_head_dim,
            cache_values=cache_values,
        ),
        n_params=n_params,
    ),
)
