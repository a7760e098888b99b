"""Mamba-2, ``mamba2`` (Dao & Gu 2024, "Transformers are SSMs: Generalized Models and Efficient Algorithms Through
Structured State Space Duality", ICML 2024): a selective state-space mixer in the place of attention, causal.

With ``h = ssm_heads`` (None: ``n_heads``) heads of ``P = ssm_head_dim`` (None: ``d_head``) numbers, ``d_inner =
h P``, ``N = ssm_state``, ``G = ssm_groups`` (dividing ``h``; head ``i`` reads group ``i // (h / G)``), ``K =
ssm_conv``, and ``x`` the sublayer's input ``(B, L, d)``:

    [z, xBC, dt] = in_proj(x)                 d -> d_inner + (d_inner + 2 G N) + h
    xBC = silu(conv1d(xBC))                   depthwise, causal, width K, with bias (the K - 1 past tokens)
    [x, B, C] = split(xBC)                    (d_inner, G N, G N): P per head, N per group
    dt = softplus(dt + dt_bias),  A = -exp(A_log)                    per head (time_step_limit (0, inf))
    y_t = sum_{s <= t} (C_t . B_s) exp(sum_{r=s+1..t} dt_r A) dt_s x_s + D x_t
    out = RMSNorm_G(y * silu(z)) W_out        RMSNorm over each of the G groups of d_inner / G, gain ``norm.weight``,
                                              eps = norm_eps; ``out_proj`` is the sublayer's (``models.qkv``)

``ssm_norm`` picks the output's gate and norm (default ``"gated"``, the line above, Mamba-2's); Falcon-H1's mixer
(TII 2025, transformers' ``FalconH1Mixer``) has two others: ``"before_gate"`` (``mamba_norm_before_gate``)
``out = (RMSNorm_G(y) * silu(z)) W_out`` and ``"none"`` (``mamba_rms_norm`` false) ``out = (y * silu(z)) W_out``,
without a norm or its gain.

transformers' ``Mamba2Mixer`` (its torch path) is this function, with the same parameter names (``in_proj``,
``conv1d``, ``dt_bias``, ``A_log``, ``D``, ``norm.weight``; its ``out_proj`` is the sublayer's), so a checkpoint maps
one to one (``models/hf/mamba2.py``). Initialisation as Mamba-2's: ``A_log = log U(1, 16)``, ``dt_bias`` the inverse
softplus of ``dt ~ logU(1e-3, 0.1)`` (floored at 1e-4), ``D = 1``, norm gain 1. ``attn_bias="all"`` gives ``in_proj``
and ``out_proj`` biases (Mamba2Config's ``use_bias``).

The scan is ``kernels.ssd`` (the chunked SSD algorithm, chunks of ``ssm_chunk``: speed only; our Triton kernels on
CUDA, PyTorch elsewhere). The dense map
(``need_weights``) is the SSM's implicit attention (Ali, Zimerman & Wolf 2024, "The Hidden Attention of Mamba
Models"): ``M[t, s] = (C_t . B_s) exp(sum_{r=s+1..t} dt_r A) dt_s`` for ``s <= t``, 0 above the diagonal, so
``y = M x + D x`` (the skip ``D x`` is not in the map); float32, rows do not sum to one, entries may be negative.

The core owns its projections (``AttentionCaps.own_projections`` gives ``(h, P)``). ``project`` returns

    q = C (B, G, L, N),  k = B (B, G, L, N),  v = x (B, h, L, P) after the convolution,
    mods = {"dt": dt (B, h, L) after softplus, "z": the gate (B, h, L, P)}

and the core forward ``(B, h, L, P)``: the gated, normed ``y`` whose heads ``out_proj`` reads. The position
encoding is ignored (the recurrence's order is its position): ``rope`` is accepted so the mixer can sit in a rope
model's ``layer_schedule`` beside attention layers, where RoPE rotates only those. No memory, softcap, learned
sinks, query/key norm or output gate (it has its own gate ``z``); causal only.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

import kernels
from kernels.cpu.implicit_bands import ssd_blocks, ssd_cells
from kernels.cpu.pooled_implicit import ImplicitOps

from ..capabilities import ROTARY, AttentionCaps
from ..errors import ConfigError
from ..variant import Param, Variant

SSM_HEADS = Param(
    "ssm_heads", int, None, optional=True, range=(1, 1024), cap=64, label="Mamba-2 heads (None = n_heads)"
)
SSM_HEAD_DIM = Param(
    "ssm_head_dim", int, None, optional=True, range=(1, 4096), cap=256, label="Mamba-2 head width P (None = d_head)"
)
SSM_STATE = Param("ssm_state", int, 16, range=(1, 1024), cap=256, label="Mamba-2 state size N")
SSM_GROUPS = Param("ssm_groups", int, 1, range=(1, 1024), cap=64, label="Mamba-2 B/C groups (divides heads)")
SSM_CONV = Param("ssm_conv", int, 4, range=(1, 64), cap=16, label="Mamba-2 convolution width")
SSM_NORMS = ("gated", "before_gate", "none")  # module docstring
SSM_NORM = Param(
    "ssm_norm",
    str,
    "gated",
    choices=SSM_NORMS,
    label="Mamba-2 output norm (gated: RMSNorm(y silu z); before_gate: RMSNorm(y) silu z; none: y silu z)",
)
SSM_CHUNK = Param(
    "ssm_chunk", int, 64, range=(1, 4096), cap=1024, label="Mamba-2 scan chunk (speed only)", surgery=True
)
DT_MIN, DT_MAX, DT_FLOOR = 1e-3, 0.1, 1e-4  # Mamba-2's dt initialisation range
A_INIT = (1.0, 16.0)  # Mamba-2's A_init_range


def layout(cfg) -> tuple:
    """``(h, P, N, G, K)`` of ``cfg`` (module docstring)."""
    h = cfg.n_heads if cfg.ssm_heads is None else cfg.ssm_heads
    p = cfg.d_head if cfg.ssm_head_dim is None else cfg.ssm_head_dim
    return h, p, cfg.ssm_state, cfg.ssm_groups, cfg.ssm_conv


def gated_rms_norm(y, z, weight, groups: int, eps: float, before_gate: bool = False):
    """``RMSNorm_G(y * silu(z)) * weight`` for ``y, z (B, h, L, P)``, ``weight (h P,)``: the mean square over each
    group of ``h / G`` contiguous heads (``d_inner / G`` numbers), in at least float32; ``(B, h, L, P)``.
    ``before_gate``: ``RMSNorm_G(y) * weight * silu(z)`` (Falcon-H1's ``mamba_norm_before_gate``)."""
    B, h, L, P = y.shape
    acc = torch.promote_types(y.dtype, torch.float32)
    g = y.to(acc) if before_gate else y.to(acc) * F.silu(z.to(acc))
    grouped = g.view(B, groups, h // groups, L, P)  # (B, G, h / G, L, P)
    var = grouped.pow(2).mean(dim=(2, 4), keepdim=True)  # (B, G, 1, L, 1)
    normed = (grouped * torch.rsqrt(var + eps)).view(B, h, L, P) * weight.to(acc).view(h, 1, P)
    return normed * F.silu(z.to(acc)) if before_gate else normed


class Mamba2Mixer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        h, P, N, G, K = self.layout = layout(cfg)
        d_inner = h * P
        self.conv_dim = d_inner + 2 * G * N
        self.in_proj = nn.Linear(cfg.d_model, d_inner + self.conv_dim + h, bias=cfg.attn_bias == "all")
        self.conv1d = nn.Conv1d(self.conv_dim, self.conv_dim, K, groups=self.conv_dim, padding=K - 1, bias=True)
        dt = torch.exp(torch.rand(h) * (math.log(DT_MAX) - math.log(DT_MIN)) + math.log(DT_MIN)).clamp(min=DT_FLOOR)
        self.dt_bias = nn.Parameter(dt + torch.log(-torch.expm1(-dt)))  # inverse softplus: softplus(dt_bias) = dt
        self.A_log = nn.Parameter(torch.log(torch.empty(h).uniform_(*A_INIT)))
        self.D = nn.Parameter(torch.ones(h))
        if cfg.ssm_norm != "none":
            self.norm = nn.Module()
            self.norm.weight = nn.Parameter(torch.ones(d_inner))  # the gated RMSNorm's gain (transformers' name)

    def project(self, x_q, x_kv, position, layer: int, k_start: int = 0):
        """``(C (B, G, L, N), B (B, G, L, N), x (B, h, L, P), {"dt": (B, h, L), "z": (B, h, L, P)})`` from
        ``x_q (B, L, d)`` (module docstring); the position encoding is not applied (``x_kv`` is ``x_q``: the
        mixer takes no memory prefix)."""
        h, P, N, G, K = self.layout
        Bsz, L, _ = x_q.shape
        d_inner = h * P
        z, xbc, dt = self.in_proj(x_q).split([d_inner, self.conv_dim, h], dim=-1)
        xbc = F.silu(self.conv1d(xbc.transpose(1, 2))[..., :L]).transpose(1, 2)  # causal: (B, L, conv_dim)
        x, b, c = xbc.split([d_inner, G * N, G * N], dim=-1)
        dt = F.softplus(dt + self.dt_bias.to(dt.dtype))  # (B, L, h)

        def heads(t, n):  # (B, L, n * w) -> (B, n, L, w)
            return t.view(Bsz, L, n, -1).transpose(1, 2)

        mods = {"dt": dt.transpose(1, 2), "z": heads(z, h)}
        return heads(c, G), heads(b, G), heads(x, h), mods

    def a(self) -> torch.Tensor:
        """``A = -exp(A_log)`` per head ``(h,)``, float32."""
        return -torch.exp(self.A_log.float())

    def forward(self, q, k, v, mods, ctx):
        """``q = C``, ``k = B (B, G, L, N)``, ``v = x (B, h, L, P)``, ``mods`` with ``dt``, ``z`` -> the gated,
        normed ``y (B, h, L, P)``; the map ``M (B, h, L, L)`` (float32) when weights are requested."""
        if q.shape[2] != v.shape[2]:
            raise ValueError(f"mamba2 reads one segment: L={q.shape[2]} for C, {v.shape[2]} for x")
        dt, z = mods["dt"], mods["z"]
        a = self.a()
        y = kernels.ssd(v, dt, a, k, q, chunk=self.cfg.ssm_chunk)  # (B, h, L, P)
        y = y + self.D.to(y.dtype)[:, None, None] * v
        out = self.output(y, z).to(v.dtype)
        probs = kernels.ssd_map(dt, a, k, q) if ctx.need_weights else None
        return out, probs, {}

    def output(self, y, z) -> torch.Tensor:
        """``y (B, h, L, P)`` gated by ``z`` and normed as ``ssm_norm`` says (module docstring), in at least float32."""
        mode = self.cfg.ssm_norm
        if mode == "none":
            acc = torch.promote_types(y.dtype, torch.float32)
            return y.to(acc) * F.silu(z.to(acc))
        return gated_rms_norm(y, z, self.norm.weight, self.layout[3], self.cfg.norm_eps, mode == "before_gate")

    def pre_norm(self, q, k, v, mods) -> torch.Tensor:
        """``y = M x + D x (B, h, L, P)``, before the gate and the norm (what the dense map explains)."""
        y = kernels.ssd(v, mods["dt"], self.a(), k, q, chunk=self.cfg.ssm_chunk)
        return y + self.D.to(y.dtype)[:, None, None] * v

    def implicit_ops(self, q, k, v, mods) -> ImplicitOps:
        """``ImplicitOps`` of the implicit map ``M`` of what ``project`` returned: ``apply(values (B, h, L, c))
        = M values`` (the chunked scan with ``x := values``, zero initial state) and ``band(start, stop)`` the
        dense ``M`` over positions ``[start, stop)`` ``(B, h, n, n)``, exact because ``M[t, s]`` reads only the
        tokens ``s .. t``; ``blocks(width)``, the dense blocks on and below its diagonal for the pooled map's
        local mass; ``cells(block)``, its sums over every pair of position blocks, from the blocks' states."""
        dt, a = mods["dt"], self.a()

        def apply(values):
            return kernels.ssd(values, dt, a, k, q, chunk=self.cfg.ssm_chunk)

        def band(start: int, stop: int):
            return kernels.ssd_map(dt[:, :, start:stop], a, k[:, :, start:stop], q[:, :, start:stop])

        def blocks(width: int):  # the blocks on and below the diagonal, all at once (kernels.cpu.implicit_bands)
            return ssd_blocks(dt, a, k, q, width)

        def cells(block: int):  # the map's block sums from the blocks' states (semiseparable: no L x L)
            return ssd_cells(dt, a, k, q, block)

        return ImplicitOps(apply, band, blocks, cells)

    def new_state(self, batch: int, device=None, dtype=torch.float32) -> tuple:
        """The decoding state: the convolution's last ``K - 1`` inputs ``(B, conv_dim, K - 1)`` and the SSM state
        ``(B, h, P, N)``, zero."""
        h, P, N, G, K = self.layout
        return (
            torch.zeros(batch, self.conv_dim, K - 1, device=device, dtype=dtype),
            torch.zeros(batch, h, P, N, device=device, dtype=torch.promote_types(dtype, torch.float32)),
        )

    def step(self, x_t, state) -> tuple:
        """One token ``x_t (B, d)`` -> ``(out (B, h, P), state)``: the core's output for it (before ``out_proj``)
        by the recurrence (``kernels.ssd_step``), the convolution reading its kept inputs."""
        h, P, N, G, K = self.layout
        conv_state, ssm_state = state
        Bsz = x_t.shape[0]
        d_inner = h * P
        z, xbc, dt = self.in_proj(x_t).split([d_inner, self.conv_dim, h], dim=-1)
        window = torch.cat([conv_state.to(xbc.dtype), xbc[..., None]], dim=-1)  # (B, conv_dim, K)
        w = self.conv1d.weight[:, 0]  # (conv_dim, K)
        xbc = F.silu((window * w).sum(-1) + self.conv1d.bias)
        x, b, c = xbc.split([d_inner, G * N, G * N], dim=-1)
        dt = F.softplus(dt + self.dt_bias.to(dt.dtype))  # (B, h)
        x = x.view(Bsz, h, P)
        y, ssm_state = kernels.ssd_step(x, dt, self.a(), b.view(Bsz, G, N), c.view(Bsz, G, N), ssm_state)
        y = y + self.D.to(y.dtype)[:, None] * x
        out = self.output(y[:, :, None], z.view(Bsz, h, 1, P))
        return out[:, :, 0].to(x_t.dtype), (window[..., 1:], ssm_state)


def n_params(cfg) -> int:
    """``in_proj`` (its bias with ``attn_bias="all"``), the convolution, ``dt_bias``, ``A_log``, ``D`` and the norm's
    gain (none with ``ssm_norm="none"``; ``out_proj`` is the sublayer's)."""
    h, P, N, G, K = layout(cfg)
    d_inner, conv_dim = h * P, h * P + 2 * G * N
    width = d_inner + conv_dim + h
    norm = 0 if cfg.ssm_norm == "none" else d_inner
    return cfg.d_model * width + (width if cfg.attn_bias == "all" else 0) + conv_dim * (K + 1) + 3 * h + norm


def state_values(cfg) -> int:
    """Numbers a decoding layer keeps whatever the length (it caches no keys): the state, ``h P N``, and the
    convolution's last ``K - 1`` inputs of its ``d_inner + 2 G N`` channels."""
    h, P, N, G, K = layout(cfg)
    return h * P * N + (K - 1) * (h * P + 2 * G * N)


def check(cfg) -> None:
    h, P, N, G, K = layout(cfg)
    if cfg.ssm_norm not in SSM_NORMS:
        raise ConfigError("ssm_norm", cfg.ssm_norm, f"one of {list(SSM_NORMS)} (module docstring of mamba2)")
    if h % G:
        raise ConfigError("ssm_groups", G, f"a divisor of the Mamba-2 head count {h} (each group serves h / G heads)")
    if cfg.attn_bias == "qkv":
        raise ConfigError(
            "attn_bias",
            cfg.attn_bias,
            "'none' or 'all' with attention='mamba2': it has no q, k, v projections; 'all' gives its in_proj and "
            "out_proj biases (Mamba2Config's use_bias)",
        )
    refusals = {
        "softcap": (cfg.softcap is not None, "None", "its map is no softmax, so there are no logits to cap"),
        "attn_gate": (cfg.attn_gate != "none", "'none'", "it gates its own output with z before the norm"),
        "attn_temp_floor": (
            cfg.attn_temp_floor is not None,
            "None",
            "the query temperature scales softmax queries, and Mamba-2 has none",
        ),
    }
    for name, (bad, ok, why) in refusals.items():
        if bad:
            raise ConfigError(name, getattr(cfg, name), f"{ok} with attention='mamba2': {why}")
    if cfg.memory == "knn":
        raise ConfigError(
            "memory",
            cfg.memory,
            "not 'knn' with attention='mamba2': the Memorizing Transformer retrieves with softmax keys, and "
            "Mamba-2 keeps a recurrent state instead",
        )


VARIANTS = (
    Variant(
        "mamba2",
        "Dao & Gu 2024 (Mamba-2: Transformers are SSMs, state-space duality, ICML 2024)",
        "Selective state-space mixer: a causal scan with a per-head decaying state (chunked SSD), its own "
        "convolution and gate; no softmax.",
        build=Mamba2Mixer,
        params=(SSM_HEADS, SSM_HEAD_DIM, SSM_STATE, SSM_GROUPS, SSM_CONV, SSM_NORM, SSM_CHUNK, "causal"),
        check=check,
        caps=AttentionCaps(
            accepts=frozenset({ROTARY}),
            core_mods=frozenset({"dt", "z"}),
            own_gate=True,
            refuses_because="ignores positions (the scan's order is its position) and forms no per-pair score",
            memory_keys=False,
            sinks_reason="has no softmax, so no sink logit has a denominator to join",
            causal_modes=frozenset({True}),
            causal_reason="the scan carries a state forward in time: each output reads only its past",
            own_projections=lambda c: layout(c)[:2],
            rows_sum_to_one=None,
            state_values=state_values,
        ),
        n_params=n_params,
    ),
)
