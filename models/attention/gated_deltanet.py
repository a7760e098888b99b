"""Gated DeltaNet, ``gated_deltanet`` (Yang, Kautz & Hatamizadeh, ICLR 2025, "Gated Delta Networks: Improving
Mamba2 with Delta Rule"), the token mixer of Qwen3-Next's linear-attention layers; chunked with the WY / UT form
of Yang et al., NeurIPS 2024 ("Parallelizing Linear Transformers with the Delta Rule over Sequence Length").

A recurrent mixer: each value head keeps a state ``S (d_k, d_v)`` that decays by ``exp(g_t)`` and is corrected
toward the current value by the delta rule,

    S_t = exp(g_t) S_{t-1};   S_t += k_t (beta_t (v_t - S_t^T k_t))^T;   o_t = S_t^T q_t     (kernels.gated_delta_rule)

With ``h_k = delta_key_heads`` (None: ``n_heads``), ``h_v = delta_value_heads`` (None: ``h_k``; a multiple of
it, each key head serving ``h_v / h_k`` consecutive value heads), ``d_k = delta_key_dim``, ``d_v =
delta_value_dim`` (None: ``d_head``), ``r = h_v / h_k``, the layer is exactly transformers'
``Qwen3NextGatedDeltaNet`` (its torch path), with its parameter names and layouts so a checkpoint maps one to one:

    in_proj_qkvz (d -> h_k (2 d_k + 2 r d_v)): per key head [q (d_k) | k (d_k) | v (r d_v) | z (r d_v)]
    in_proj_ba   (d -> h_k 2 r):              per key head [b (r) | a (r)]
    [q, k, v] = silu(conv1d([q, k, v]))       depthwise causal convolution over time, ``delta_conv`` taps, no bias
    q, k = q / sqrt(|q|^2 + 1e-6), k / ...;  q *= 1 / sqrt(d_k)     (per head, in float32)
    beta = sigmoid(b),  g = -exp(A_log) softplus(a + dt_bias)       (per value head and token)
    o = the recurrence above (q, k repeated to the value heads)
    y = norm.weight * RMSNorm(o) * silu(z)    per value head over d_v, eps ``norm_eps`` (Qwen3NextRMSNormGated:
                                              normalise, plain weight, then the gate); then the sublayer's out_proj

Init as transformers: ``A_log = log U(0.01, 16)``, ``dt_bias = 1``, ``norm.weight = 1``. ``delta_chunk``
(default 64) is the chunk of the WY / UT form: speed only, never the function.

The core owns its projections (``AttentionCaps.own_projections`` gives ``(h_v, d_v)``); ``project`` returns
``q, k (B, h_v, L, d_k)`` after the convolution, SiLU, L2 norm and query scale, repeated to the value heads, in
at least float32; ``v (B, h_v, L, d_v)`` after the convolution; ``mods = {"beta": (B, h_v, L), "g": (B, h_v, L)
float32, "z": (B, h_v, L, d_v)}`` (``AttentionCaps.core_mods``: no position modifiers). Position encodings are
ignored: ``rope`` is accepted (it rotates nothing here) so the layer sits in a RoPE model's schedule, as in
Qwen3-Next; a score bias is refused. Causal only, no memory, no softcap, no learned sinks and no ``attn_gate``
(the gated norm is its own output gate: a ``layer_schedule``'s Gated DeltaNet layers drop the model's gate, which
belongs to its attention layers).

Maps (``need_weights``): the dense implicit map ``A (B, h_v, L, L)`` with ``o = A v`` exactly
(``kernels.gated_delta_map``), the mixing before the gated norm; its rows do not sum to one and may be negative.
``implicit_ops`` hands the long-context views the same map as operators (``apply``: ``A values`` without forming
``A``; ``band``: ``A`` on a window of positions, exact since ``A[t, s]`` reads tokens ``s .. t`` only).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

import kernels
from kernels.cpu.implicit_bands import delta_blocks, delta_cells, delta_prep
from kernels.cpu.pooled_implicit import ImplicitOps

from ..capabilities import ROTARY, AttentionCaps
from ..errors import ConfigError
from ..variant import Param, Variant

DELTA_KEY_HEADS = Param(
    "delta_key_heads", int, None, optional=True, range=(1, 4096), cap=64, label="DeltaNet key heads (0 = heads)"
)
DELTA_VALUE_HEADS = Param(
    "delta_value_heads",
    int,
    None,
    optional=True,
    range=(1, 4096),
    cap=128,
    label="DeltaNet value heads (0 = key heads)",
)
DELTA_KEY_DIM = Param(
    "delta_key_dim", int, None, optional=True, range=(1, 4096), cap=256, label="DeltaNet key width (0 = d_head)"
)
DELTA_VALUE_DIM = Param(
    "delta_value_dim", int, None, optional=True, range=(1, 4096), cap=256, label="DeltaNet value width (0 = d_head)"
)
DELTA_CONV = Param("delta_conv", int, 4, range=(1, 64), cap=16, label="DeltaNet convolution taps")
DELTA_CHUNK = Param("delta_chunk", int, 64, range=(1, 4096), cap=1024, label="DeltaNet chunk (speed only)")
L2_EPS = 1e-6  # transformers' l2norm (fla's convention): x / sqrt(sum(x^2) + eps)
CORE_MODS = frozenset({"beta", "g", "z"})


def sizes(cfg) -> tuple:
    """``(h_k, h_v, d_k, d_v)`` of ``cfg`` (module docstring's defaults)."""
    hk = cfg.delta_key_heads or cfg.n_heads
    hv = cfg.delta_value_heads or hk
    return hk, hv, cfg.delta_key_dim or cfg.d_head, cfg.delta_value_dim or cfg.d_head


def l2norm(x: torch.Tensor) -> torch.Tensor:
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + L2_EPS)


class GatedRMSNorm(nn.Module):
    """``weight * RMSNorm(o) * silu(z)`` over the last dim (transformers' ``Qwen3NextRMSNormGated``: normalised
    in float32, cast back, the plain weight, then the gate in float32)."""

    def __init__(self, d: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, o, z):
        dtype = o.dtype
        of = o.float() if o.dtype != torch.float64 else o
        normed = (of * torch.rsqrt(of.pow(2).mean(-1, keepdim=True) + self.eps)).to(dtype)
        return (self.weight.to(dtype) * normed * F.silu(z.to(of.dtype))).to(dtype)


class GatedDeltaNet(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        d = cfg.d_model
        self.hk, self.hv, self.dk, self.dv = hk, hv, dk, dv = sizes(cfg)
        self.rep = hv // hk
        conv_dim = 2 * hk * dk + hv * dv
        self.in_proj_qkvz = nn.Linear(d, 2 * hk * dk + 2 * hv * dv, bias=False)
        self.in_proj_ba = nn.Linear(d, 2 * hv, bias=False)
        self.conv1d = nn.Conv1d(conv_dim, conv_dim, cfg.delta_conv, groups=conv_dim, bias=False)
        self.dt_bias = nn.Parameter(torch.ones(hv))
        self.A_log = nn.Parameter(torch.empty(hv).uniform_(0.01, 16).log())
        self.norm = GatedRMSNorm(dv, cfg.norm_eps)

    def project(self, x_q, x_kv, position, layer: int, k_start: int = 0):
        """``(q, k (B, h_v, L, d_k), v (B, h_v, L, d_v), {"beta", "g", "z"})`` (module docstring); ``position``
        is not used (no position enters the recurrence)."""
        if x_kv.shape[1] != x_q.shape[1]:
            raise ValueError(f"gated_deltanet mixes one segment: Lq={x_q.shape[1]} != Lk={x_kv.shape[1]}")
        B, L, _ = x_q.shape
        hk, hv, dk, dv, r = self.hk, self.hv, self.dk, self.dv, self.rep
        qkvz = self.in_proj_qkvz(x_q).view(B, L, hk, 2 * dk + 2 * r * dv)  # grouped per key head
        q, k, v, z = torch.split(qkvz, [dk, dk, r * dv, r * dv], dim=-1)
        b, a = torch.split(self.in_proj_ba(x_q).view(B, L, hk, 2 * r), [r, r], dim=-1)
        mixed = torch.cat([q.reshape(B, L, hk * dk), k.reshape(B, L, hk * dk), v.reshape(B, L, hv * dv)], -1)
        taps = self.conv1d.weight.shape[-1]
        mixed = F.silu(self.conv1d(F.pad(mixed.transpose(1, 2), (taps - 1, 0))))  # (B, conv_dim, L): causal
        q, k, v = torch.split(mixed.transpose(1, 2), [hk * dk, hk * dk, hv * dv], dim=-1)
        acc = torch.promote_types(x_q.dtype, torch.float32)
        q = l2norm(q.reshape(B, L, hk, dk).to(acc)) / math.sqrt(dk)
        k = l2norm(k.reshape(B, L, hk, dk).to(acc))
        q, k = (t.repeat_interleave(r, dim=2).transpose(1, 2) for t in (q, k))  # (B, h_v, L, d_k)
        v = v.reshape(B, L, hv, dv).transpose(1, 2)  # (B, h_v, L, d_v)
        z = z.reshape(B, L, hv, dv).transpose(1, 2)  # (B, h_v, L, d_v)
        beta = torch.sigmoid(b.reshape(B, L, hv)).transpose(1, 2)  # (B, h_v, L)
        g = -self.A_log.float().exp() * F.softplus(a.reshape(B, L, hv).float() + self.dt_bias)  # (B, L, h_v)
        return q, k, v, {"beta": beta, "g": g.transpose(1, 2).to(acc), "z": z}

    def mix(self, q, k, v, mods):
        """The recurrence's output before the gated norm, ``(B, h_v, L, d_v)`` in ``v``'s dtype."""
        return kernels.gated_delta_rule(q, k, v, mods["beta"], mods["g"], chunk=self.cfg.delta_chunk)

    def forward(self, q, k, v, mods, ctx):
        """``q, k (B, h_v, L, d_k)``, ``v (B, h_v, L, d_v)``, ``mods`` of ``project`` -> the gated norm's output
        ``(B, h_v, L, d_v)`` [, the dense map ``(B, h_v, L, L)``]."""
        o = self.mix(q, k, v, mods)
        probs = None
        if ctx.need_weights:
            probs = kernels.gated_delta_map(q, k, mods["beta"], mods["g"]).to(v.dtype)
        return self.norm(o, mods["z"]), probs, {}

    def implicit_ops(self, q, k, v, mods) -> ImplicitOps:
        """``ImplicitOps`` for the pooled maps of long inputs, from exactly what ``project`` returned:
        ``apply(values (B, h_v, L, c)) -> (B, h_v, L, c)`` = ``A values`` (the chunked form with ``values`` as
        its values, zero initial state); ``band(start, stop) -> (B, h_v, n, n)`` = ``A`` on positions
        ``[start, stop)``; ``blocks(width)``: the dense blocks on and below its diagonal for the local
        mass; ``cells(block)``: its sums over every pair of position blocks."""
        beta, g, chunk = mods["beta"], mods["g"], self.cfg.delta_chunk

        def apply(values):
            return kernels.gated_delta_rule(q, k, values, beta, g, chunk=chunk)

        def band(start: int, stop: int):
            return kernels.gated_delta_map(
                q[:, :, start:stop], k[:, :, start:stop], beta[:, :, start:stop], g[:, :, start:stop]
            )

        preps = {}  # width -> the chunk quantities blocks and cells share (one computation when widths agree)

        def prep(width: int) -> dict:
            if width not in preps:
                preps[width] = delta_prep(q, k, beta, g, width)
            return preps[width]

        def blocks(width: int):  # the blocks on and below the diagonal, all at once (kernels.cpu.implicit_bands)
            return delta_blocks(q, k, beta, g, width, prep(width))

        def cells(block: int):  # the map's block sums, one walk over the blocks (semiseparable of rank d_k)
            return delta_cells(q, k, beta, g, block, prep(block))

        return ImplicitOps(apply, band, blocks, cells)


def n_params(cfg) -> int:
    """The core's projections, convolution, decay parameters and gated norm (``out_proj`` is the sublayer's)."""
    hk, hv, dk, dv = sizes(cfg)
    d = cfg.d_model
    return d * (2 * hk * dk + 2 * hv * dv) + d * 2 * hv + (2 * hk * dk + hv * dv) * cfg.delta_conv + 2 * hv + dv


def state_values(cfg) -> int:
    """Numbers a decoding layer keeps whatever the length (it caches no keys): the state, ``h_v d_k d_v``, and the
    convolution's last ``delta_conv - 1`` inputs of its ``2 h_k d_k + h_v d_v`` channels."""
    hk, hv, dk, dv = sizes(cfg)
    return hv * dk * dv + (cfg.delta_conv - 1) * (2 * hk * dk + hv * dv)


def check(cfg) -> None:
    hk, hv, _, _ = sizes(cfg)
    if hv % hk:
        raise ConfigError(
            "delta_value_heads",
            cfg.delta_value_heads,
            f"a multiple of the key heads ({hk}): each key head serves a group of consecutive value heads (Qwen3-Next)",
        )
    if cfg.attn_bias != "none":
        raise ConfigError(
            "attn_bias", cfg.attn_bias, "'none' with attention='gated_deltanet' (its projections have no biases)"
        )
    if cfg.softcap is not None:
        raise ConfigError(
            "softcap", cfg.softcap, "None with attention='gated_deltanet' (a recurrence has no scores to cap)"
        )
    if cfg.attn_gate != "none":
        raise ConfigError(
            "attn_gate",
            cfg.attn_gate,
            "'none' with attention='gated_deltanet': its gated norm (silu(z)) is its own output gate",
        )
    if cfg.memory == "knn":  # memories that prepend keys are refused by the capabilities (memory_keys=False)
        raise ConfigError(
            "memory",
            cfg.memory,
            "not 'knn' with attention='gated_deltanet': the Memorizing Transformer's layer retrieves with the "
            "shared K/V projections' keys and mixes softmax attention, and this mixer is a recurrence",
        )


VARIANTS = (
    Variant(
        "gated_deltanet",
        "Yang, Kautz & Hatamizadeh 2025 (Gated Delta Networks, ICLR 2025)",
        "Recurrent mixer: a per-head state that decays by a learned gate and is corrected by the delta rule "
        "(Qwen3-Next's linear layers).",
        build=GatedDeltaNet,
        params=(DELTA_KEY_HEADS, DELTA_VALUE_HEADS, DELTA_KEY_DIM, DELTA_VALUE_DIM, DELTA_CONV, DELTA_CHUNK, "causal"),
        check=check,
        caps=AttentionCaps(
            accepts=frozenset({ROTARY}),
            refuses_because="is a recurrence with no score per (query, key) pair (and ignores RoPE)",
            memory_keys=False,
            sinks_reason="has no softmax: its state decays by a learned gate instead",
            causal_modes=frozenset({True}),
            causal_reason="the delta rule is a recurrence over the past",
            own_projections=lambda c: sizes(c)[1::2],
            rows_sum_to_one=None,
            core_mods=CORE_MODS,
            own_gate=True,
            state_values=state_values,
        ),
        n_params=n_params,
    ),
)
