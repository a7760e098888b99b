"""Native Sparse Attention, ``nsa`` (Yuan et al. 2025, DeepSeek-AI, ACL 2025: "Native Sparse Attention:
Hardware-Aligned and Natively Trainable Sparse Attention"), causal.

Each query ``t`` reads three branches, each with its own keys and values (the paper's "independent keys and
values for three branches"), mixed by per-head sigmoid gates computed from the input (eq. 5):

    o_t = sum_{c in {cmp, slc, win}} g_t^c Attn(q_t, K~_t^c, V~_t^c),   g_t = sigmoid(x_t W_g + b_g)  (3 per head)

With ``l = nsa_cmp_block``, ``d = nsa_cmp_stride``, ``l' = nsa_slc_block``, ``n = nsa_slc_top_n``,
``w = window``, 0-based positions and ``d_h`` the head width:

- cmp (eq. 7): compression block ``i`` holds the cmp keys of tokens ``i d .. i d + l - 1``;
  ``phi(K) = W_2 gelu(W_1 vec(K + E) + b_1) + b_2`` (``E`` the learned intra-block position embedding
  ``(l, d_h)``, ``W_1: l d_h -> l d_h``, ``W_2: l d_h -> d_h``; one MLP for keys, one for values, shared by the
  K/V heads) gives one key and one value per block. Causal rule: block ``i`` is visible to ``t`` iff its last
  token is ``<= t`` (``i d + l - 1 <= t``), the paper's ``i <= floor((t - l) / d)`` (1-based): a compressed key
  reads only keys the query may read itself. A query before the first complete block (``t < l - 1``) gets a
  zero cmp output (an empty softmax), its gate still counts for the others.
- slc (eqs. 8-12): importance of selection block ``j`` (tokens ``j l' .. j l' + l' - 1``) from the cmp
  softmax ``p^cmp_t``: ``p^slc_t[j] = sum_{m < l'/d} sum_{n < l/d} p^cmp_t[(l'/d)(j + 1) - 1 - m - n]``, i.e.
  eq. (9) indexed at block ``j``'s last stride chunk: each compression block counts once per stride chunk of
  it inside block ``j`` (for ``l = l' = d`` block ``j`` is compression block ``j``); summed over the query
  heads of a GQA group (eq. 10), so a group shares its blocks. The ``n`` kept blocks always include the
  initial block 0 and the two local blocks (the query's own and the one before: the paper's "1 initial and 2
  local blocks", counted in ``n``), then the highest importance among the blocks that start at or before
  ``t`` (ties: the later block). Attention over the selected blocks' tokens ``<= t``.
- win: the ``w`` latest tokens ``t - w < j <= t``.

All three read the post-position queries and keys (RoPE rotates the queries and every branch's keys, so the
compression reads rotated keys, as fla-org's NSA pools them); scale ``1 / sqrt(d_h)``. Projections (owned by
the core, ``AttentionCaps.own_projections``): ``q_proj (d -> h d_h)``, ``k_proj`` / ``v_proj`` ``(d -> 3 h_kv
d_h)`` whose heads are ``[cmp | slc | win]``, ``branch_gate (d -> 3 h)``. ``project`` returns ``q`` with the
three gate logits appended to each head (``(B, h, L, d_h + 3)``), ``k``, ``v`` ``(B, 3 h_kv, L, d_h)``.

Runs: the selection (``select``) is data-dependent and not differentiated (as in the paper); gradients reach
the cmp projections through the cmp branch, and every branch's values and the gates. Without maps the selected
branch runs through ``kernels.selected_attention`` (``kernels/selected.py``), forward and backward: on CUDA in
fp32 (a model in fp16 / bf16 computes its branches in fp32) with ``d_h`` in 16 / 32 / 64 / 128, the Triton kernel
of the paper's section 3.4 (``kernels/triton/selected.py``: one program per position and K/V head, the GQA group's
query heads as its rows, the selected blocks read from an index list, online softmax; dQ per position, dK / dV
per key block over the positions that selected it, no atomics); otherwise (CPU, float64, other widths) the
block-sparse PyTorch path: each query a query block of one row whose visited key blocks are its selected
blocks (tiles of ``1 x l'``; the own block a partial tile cut at ``t``), the batch and the K/V heads laid end to
end as one sequence so a GQA group's query heads share the layout (``kernels.selection_layout``). The window
runs with its band layout through ``kernels.attention``. With maps (``ctx.need_weights``) every
branch runs dense with masks (``dense``), the same function.

The drawn map is the gate-weighted mix of the three branches' softmax maps over tokens, the cmp branch's
weight of block ``i`` spread evenly over its ``l`` tokens, divided by the row's gate sum
(``g^cmp [t >= l - 1] + g^slc + g^win``), so each row is a distribution: where a query's output is read from,
branch by branch in the gates' proportions (the output itself is not normalised by the gates).
"""

from __future__ import annotations

import math
from functools import lru_cache

import torch
import torch.nn.functional as F
from torch import nn

import kernels

from ..capabilities import ROTARY, AttentionCaps
from ..errors import ConfigError
from ..variant import Param, Variant
from .common import expand_kv
from .patterns import WINDOW

NSA_CMP_BLOCK = Param("nsa_cmp_block", int, 8, range=(1, 4096), cap=32, label="NSA compression block (l)")
NSA_CMP_STRIDE = Param("nsa_cmp_stride", int, 4, range=(1, 4096), cap=32, label="NSA compression stride (d)")
NSA_SLC_BLOCK = Param("nsa_slc_block", int, 8, range=(1, 4096), cap=128, label="NSA selection block (l')", surgery=True)
NSA_SLC_TOP_N = Param(
    "nsa_slc_top_n",
    int,
    4,
    range=(3, 4096),
    cap=64,
    label="NSA selected blocks (n, with the initial and 2 local)",
    surgery=True,
)
CMP, SLC, WIN = 0, 1, 2  # the branches, in the order of the gates and the K/V heads
_BAND = 64  # tile of the window branch's band layout


class BlockCompressor(nn.Module):
    """``phi``: the keys (or values) of a block of ``l`` tokens -> one (module docstring)."""

    def __init__(self, block: int, stride: int, d_h: int):
        super().__init__()
        self.block, self.stride = block, stride
        self.pos = nn.Parameter(torch.randn(block, d_h) * 0.02)  # intra-block position embedding E
        self.fc1 = nn.Linear(block * d_h, block * d_h)
        self.fc2 = nn.Linear(block * d_h, d_h)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x (B, h_kv, L, d_h)`` -> ``(B, h_kv, n_c, d_h)``, ``n_c = floor((L - l) / d) + 1`` (0 when L < l)."""
        B, hkv, L, dh = x.shape
        if L < self.block:
            return x.new_zeros(B, hkv, 0, dh)
        blocks = x.unfold(2, self.block, self.stride).transpose(-1, -2)  # (B, h_kv, n_c, l, d_h)
        return self.fc2(F.gelu(self.fc1((blocks + self.pos.to(x.dtype)).flatten(-2))))


def cmp_visible(L: int, block: int, stride: int, device=None) -> torch.Tensor:
    """``[L, n_c]`` bool: compression block ``i`` (tokens ``i d .. i d + l - 1``) is visible to ``t``."""
    n_c = (L - block) // stride + 1 if L >= block else 0
    last = torch.arange(n_c, device=device) * stride + block - 1
    return last[None, :] <= torch.arange(L, device=device)[:, None]


def cmp_to_slc(n_c: int, L: int, block: int, stride: int, slc_block: int, device=None) -> torch.Tensor:
    """``[n_c, n_s]``: how many stride chunks of compression block ``i`` lie in selection block ``j`` (eq. 9)."""
    n_s = -(-L // slc_block)
    chunk = torch.arange(n_c, device=device)[:, None] + torch.arange(block // stride, device=device)  # (n_c, l/d)
    j = (chunk * stride) // slc_block
    m = torch.zeros(n_c, n_s, device=device)
    return m.scatter_add_(1, j, torch.ones_like(j, dtype=m.dtype))


def window_allowed(L: int, w: int, device=None) -> torch.Tensor:
    """``[L, L]`` bool: ``t - w < j <= t``."""
    rel = torch.arange(L, device=device)[None, :] - torch.arange(L, device=device)[:, None]  # j - t
    return (rel <= 0) & (rel > -w)


@lru_cache(maxsize=16)
def window_layout(L: int, w: int) -> kernels.BlockMask:
    """The memoised band layout of the window branch (CPU; moved with ``.to(device)``)."""

    def rows(a, b):
        return window_allowed(L, w)[a:b]

    return kernels.block_mask_from_rows(rows, L, L, _BAND, torch.device("cpu"))


def _softmax_rows(s: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    """Softmax over the allowed entries; a row with none is all zero (and passes no NaN to the backward)."""
    s = s.masked_fill(~allowed, float("-inf")).masked_fill(~allowed.any(-1, keepdim=True), 0.0)
    return torch.softmax(s, dim=-1) * allowed


class NativeSparseAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        d, h, hkv, dh = cfg.d_model, cfg.n_heads, cfg.kv_heads, cfg.d_head
        bias = cfg.attn_bias in ("qkv", "all")
        self.h, self.hkv, self.dh = h, hkv, dh
        self.q_proj = nn.Linear(d, h * dh, bias=bias)
        self.k_proj = nn.Linear(d, 3 * hkv * dh, bias=bias)  # heads [cmp | slc | win]
        self.v_proj = nn.Linear(d, 3 * hkv * dh, bias=bias)
        self.branch_gate = nn.Linear(d, 3 * h)  # per head: g^cmp, g^slc, g^win (logits)
        self.k_compress = BlockCompressor(cfg.nsa_cmp_block, cfg.nsa_cmp_stride, dh)
        self.v_compress = BlockCompressor(cfg.nsa_cmp_block, cfg.nsa_cmp_stride, dh)

    def project(self, x_q, x_kv, position, layer: int, k_start: int = 0):
        """``(q (B, h, Lq, d_h + 3), k, v (B, 3 h_kv, Lk, d_h), mods)``: rotated queries with the gate logits
        appended, the three branches' rotated keys and their values, the position's modifiers."""
        B, lq, _ = x_q.shape
        lk = x_kv.shape[1]
        q = self.q_proj(x_q).view(B, lq, self.h, self.dh).transpose(1, 2)  # (B, h, Lq, d_h)
        k = self.k_proj(x_kv).view(B, lk, 3 * self.hkv, self.dh).transpose(1, 2)  # (B, 3 h_kv, Lk, d_h)
        v = self.v_proj(x_kv).view(B, lk, 3 * self.hkv, self.dh).transpose(1, 2)
        q, k, mods = position.modify(
            q.contiguous(), k.contiguous(), layer, k_start=k_start, scale=1.0 / math.sqrt(self.dh)
        )
        gates = self.branch_gate(x_q).view(B, lq, self.h, 3).transpose(1, 2)  # (B, h, Lq, 3)
        return torch.cat([q, gates.to(q.dtype)], dim=-1), k, v.contiguous(), mods

    def compressed(self, q, kc, vc):
        """The cmp branch: ``(o (B, h, L, d_h), p (B, h, L, n_c))``."""
        L = q.shape[2]
        ck, cv = self.k_compress(kc), self.v_compress(vc)  # (B, h_kv, n_c, d_h)
        s = q @ expand_kv(ck, self.h).transpose(-1, -2) / math.sqrt(self.dh)  # (B, h, L, n_c)
        p = _softmax_rows(s, cmp_visible(L, self.cfg.nsa_cmp_block, self.cfg.nsa_cmp_stride, q.device))
        return p @ expand_kv(cv, self.h), p

    @torch.no_grad()
    def select(self, p_cmp: torch.Tensor) -> torch.Tensor:
        """``p_cmp (B, h, L, n_c)`` -> the selected blocks ``(B, h_kv, L, n_s)`` (bool), module docstring."""
        cfg = self.cfg
        B, h, L, n_c = p_cmp.shape
        lp = cfg.nsa_slc_block
        m = cmp_to_slc(n_c, L, cfg.nsa_cmp_block, cfg.nsa_cmp_stride, lp, p_cmp.device).to(p_cmp.dtype)
        imp = (p_cmp @ m).view(B, self.hkv, h // self.hkv, L, -1).sum(2)  # (B, h_kv, L, n_s)
        n_s = imp.shape[-1]
        j = torch.arange(n_s, device=p_cmp.device)
        own = (torch.arange(L, device=p_cmp.device) // lp)[:, None]  # (L, 1)
        forced = (j == 0) | (j == own) | (j == own - 1)
        score = imp.masked_fill(forced, float("inf")).masked_fill(j > own, float("-inf"))
        # descending, ties to the later block: a stable sort of the blocks in reverse order
        order = n_s - 1 - torch.sort(score.flip(-1), dim=-1, descending=True, stable=True).indices
        keep = order[..., : min(cfg.nsa_slc_top_n, n_s)]
        sel = torch.zeros_like(imp, dtype=torch.bool).scatter_(-1, keep, True)
        return sel & (j <= own)

    def _parts(self, q, k, v):
        acc = torch.promote_types(q.dtype, torch.float32)
        q, g = q[..., : self.dh].to(acc), torch.sigmoid(q[..., self.dh :].to(acc))  # g (B, h, L, 3)
        ks = tuple(t.contiguous() for t in k.to(acc).chunk(3, dim=1))  # cmp, slc, win: (B, h_kv, L, d_h) each
        vs = tuple(t.contiguous() for t in v.to(acc).chunk(3, dim=1))
        return q.contiguous(), g, ks, vs

    def dense(self, q, k, v):
        """The whole formula with masks: ``(out (B, h, L, d_h), drawn map (B, h, L, L))`` (module docstring)."""
        cfg, L = self.cfg, q.shape[2]
        q, g, (kc, ks, kw), (vc, vs, vw) = self._parts(q, k, v)
        o_cmp, p_cmp = self.compressed(q, kc, vc)
        sel = self.select(p_cmp)  # (B, h_kv, L, n_s)
        block = torch.arange(L, device=q.device) // cfg.nsa_slc_block
        causal = window_allowed(L, L, q.device)
        slc = expand_kv(sel[..., block], self.h) & causal  # (B, h, L, L): tokens of the selected blocks, <= t
        p_slc = _softmax_rows(q @ expand_kv(ks, self.h).transpose(-1, -2) / math.sqrt(self.dh), slc)
        p_win = _softmax_rows(
            q @ expand_kv(kw, self.h).transpose(-1, -2) / math.sqrt(self.dh), window_allowed(L, cfg.window, q.device)
        )
        out = (
            g[..., CMP, None] * o_cmp
            + g[..., SLC, None] * (p_slc @ expand_kv(vs, self.h))
            + g[..., WIN, None] * (p_win @ expand_kv(vw, self.h))
        )
        n_c = p_cmp.shape[-1]
        start = torch.arange(n_c, device=q.device)[:, None] * cfg.nsa_cmp_stride
        tok = torch.arange(L, device=q.device)[None, :]
        spread = ((tok >= start) & (tok < start + cfg.nsa_cmp_block)).to(q.dtype) / cfg.nsa_cmp_block  # (n_c, L)
        has_cmp = cmp_visible(L, cfg.nsa_cmp_block, cfg.nsa_cmp_stride, q.device).any(-1).to(q.dtype)[:, None]
        mix = g[..., CMP, None] * (p_cmp @ spread) + g[..., SLC, None] * p_slc + g[..., WIN, None] * p_win
        probs = mix / (g[..., CMP, None] * has_cmp + g[..., SLC, None] + g[..., WIN, None])
        return out, probs

    def sparse(self, q, k, v):
        """The same output with the selected branch and the window on the block-sparse kernels."""
        cfg, L = self.cfg, q.shape[2]
        q, g, (kc, ks, kw), (vc, vs, vw) = self._parts(q, k, v)
        o_cmp, p_cmp = self.compressed(q, kc, vc)
        sel = self.select(p_cmp)
        o_slc = self.selected(q, ks, vs, sel)
        o_win = kernels.attention(q, kw, vw, block_mask=window_layout(L, min(cfg.window, L)).to(q.device))
        return g[..., CMP, None] * o_cmp + g[..., SLC, None] * o_slc + g[..., WIN, None] * o_win

    def selected(self, q, ks, vs, sel):
        """The slc branch, ``kernels.selected_attention`` (Triton on CUDA, block-sparse PyTorch otherwise):
        ``(B, h, L, d_h)``."""
        return kernels.selected_attention(q, ks, vs, sel, self.cfg.nsa_slc_block, max_blocks=self.cfg.nsa_slc_top_n)

    def forward(self, q, k, v, mods, ctx):
        """``q (B, h, L, d_h + 3)`` (gate logits appended), ``k, v (B, 3 h_kv, L, d_h)`` -> ``(B, h, L, d_h)``."""
        if q.shape[2] != k.shape[2]:
            raise ValueError(f"nsa attends within one segment: Lq={q.shape[2]} != Lk={k.shape[2]}")
        if ctx.need_weights:
            out, probs = self.dense(q, k, v)
            return out.to(v.dtype), probs.to(v.dtype), {}
        return self.sparse(q, k, v).to(v.dtype), None, {}


def n_params(cfg) -> int:
    """The core's projections, gates and the two compression MLPs (``out_proj`` is the sublayer's)."""
    d, h, hkv, dh, lb = cfg.d_model, cfg.n_heads, cfg.kv_heads, cfg.d_head, cfg.nsa_cmp_block
    bias = cfg.attn_bias in ("qkv", "all")
    proj = d * h * dh + 2 * d * 3 * hkv * dh + (h * dh + 2 * 3 * hkv * dh if bias else 0)
    mlp = lb * dh + (lb * dh) * (lb * dh) + lb * dh + (lb * dh) * dh + dh
    return proj + (d * 3 * h + 3 * h) + 2 * mlp


def cache_values(cfg) -> int:
    """Numbers per token and layer a decoding cache keeps: the three branches' keys and values, plus each
    token's share of the compressed keys and values (one pair of ``h_kv d_h`` per ``d`` tokens), rounded down."""
    return 6 * cfg.kv_heads * cfg.d_head + (2 * cfg.kv_heads * cfg.d_head) // cfg.nsa_cmp_stride


def check(cfg) -> None:
    lb, ld, ls = cfg.nsa_cmp_block, cfg.nsa_cmp_stride, cfg.nsa_slc_block
    if ld > lb:
        raise ConfigError("nsa_cmp_stride", ld, f"at most nsa_cmp_block = {lb} (d <= l: blocks leave no gaps)")
    if lb % ld:
        raise ConfigError("nsa_cmp_block", lb, f"a multiple of nsa_cmp_stride = {ld} (the paper's l % d == 0)")
    if ls % ld:
        raise ConfigError("nsa_slc_block", ls, f"a multiple of nsa_cmp_stride = {ld} (the paper's l' % d == 0)")
    if cfg.softcap is not None:
        raise ConfigError("softcap", cfg.softcap, "None with attention='nsa' (the paper's branches have no cap)")
    if cfg.memory == "knn":
        raise ConfigError(
            "memory",
            cfg.memory,
            "not 'knn' with attention='nsa': the Memorizing Transformer's layer retrieves with the keys of the "
            "shared K/V projections and wraps the core call, and NSA's keys are three branches' own",
        )


VARIANTS = (
    Variant(
        "nsa",
        "Yuan et al. 2025 (Native Sparse Attention, DeepSeek-AI, ACL 2025)",
        "Gated sum of three branches with their own keys: compressed blocks, top-n selected blocks "
        "(block-sparse), and a sliding window.",
        build=NativeSparseAttention,
        params=(NSA_CMP_BLOCK, NSA_CMP_STRIDE, NSA_SLC_BLOCK, NSA_SLC_TOP_N, WINDOW, "causal"),
        check=check,
        caps=AttentionCaps(
            accepts=frozenset({ROTARY}),
            refuses_because="compresses and selects blocks of keys, which a per-pair score term would not follow",
            memory_keys=False,
            sinks_reason="mixes three softmaxes (compressed, selected, window) by learned gates, which already "
            "let a head give a branch no weight; the paper adds no sink logit to them",
            causal_modes=frozenset({True}),
            causal_reason="NSA is defined for autoregressive decoding: compressed blocks, selected blocks and "
            "the window all lie in the query's past",
            own_projections=lambda c: c.d_head,
            cache_values=cache_values,
        ),
        n_params=n_params,
    ),
)
