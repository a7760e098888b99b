"""The gated delta rule in Triton, chunked (the WY / UT form), forward and backward.

Recurrence (Yang, Kautz & Hatamizadeh, ICLR 2025, "Gated Delta Networks", eq. 10; the same convention as
``kernels/cpu/delta_rule.py::gated_delta_chunked``), per batch and head, ``q_t, k_t`` of width ``K`` (normalised and
scaled by the caller), ``v_t`` of width ``V``, ``beta_t`` in (0, 1), ``g_t <= 0`` the log decay, state ``S (K, V)``:

    S_t = exp(g_t) S_{t-1};   S_t += k_t (beta_t (v_t - S_t^T k_t))^T;   o_t = S_t^T q_t

Chunked (Yang et al., NeurIPS 2024, "Parallelizing Linear Transformers with the Delta Rule over Sequence Length",
sections 3.2-3.3; the decomposition of FLA's chunked kernels, simplified): in a chunk of ``C`` positions starting
from the state ``S0``, ``G_t = sum_{r <= t} g_r`` in the chunk, ``Gam[t, s] = exp(G_t - G_s)`` (``s <= t``):

1. ``_delta_chunk_prep`` (grid: chunk x B h): ``T = (I + strict_lower(diag(beta) K K^T o Gam))^{-1}`` by forward
   substitution on the ``[C, C]`` tile, ``u0 = T diag(beta) V``, ``w = T diag(beta e^G) K``;
2. ``_delta_state_fwd`` (grid: value block x B h, sequential over chunks): ``U = u0 - w S0`` and
   ``S1 = e^{G_end} S0 + (diag(e^{G_end - G}) K)^T U``, storing ``S0`` and ``U`` of every chunk, the final state;
3. ``_delta_chunk_out`` (grid: chunk x B h): ``O = diag(e^G) Q S0 + (Q K^T o Gam_incl) U``.

Backward (``bwd.py`` gives the formulas): ``_delta_state_bwd``, the reverse walk for each chunk's ``dS1`` and
``dU`` and the initial state's gradient, then ``_delta_chunk_bwd`` per chunk for dq, dk, dv, dbeta, dg. No atomics.

Layout: the launcher pads the length to whole chunks (``k = 0, beta = 0, g = 0``: no update, no decay), the keys to
``KR`` columns (64, 128 or 256: one ``[C, KR]`` tile, so ``K <= 256``, and ``K <= 128`` at chunk 64, where the
backward's tiles would not fit in shared memory) and the values to ``VR``, a multiple
of ``BV`` (walked in blocks: any ``V``), all fp32 and contiguous; autograd through the padding gives the gradients of
the unpadded inputs. fp16 / bf16 inputs are widened, the output cast back, the final state fp32. ``tl.dot`` in tf32x3
(about fp32 accuracy). ``aot_specs`` lists every specialisation for kernels.tools.aot_check.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
import triton

from ..grid_limits import batch_slices
from .bwd import _delta_chunk_bwd, _delta_state_bwd
from .fwd import _delta_chunk_out, _delta_chunk_prep, _delta_state_fwd

CHUNKS = (16, 32, 64)
KEY_WIDTHS = (64, 128, 256)  # KR: the key width rounded up to one of these (few: each is compiled ahead of time)
MAX_KEY_WIDTH = {16: 256, 32: 256, 64: 128}  # the backward's [C, KR] tiles in shared memory: 384 KiB at C 64, KR 256
BV = 16  # value columns per block: any V, registers set by the chunk and KR


def warps(chunk: int) -> int:
    """Warps of every kernel at this chunk."""
    return 8 if chunk >= 32 else 4


def key_width(k: int) -> int | None:
    """The padded key width ``KR`` for ``K`` (None above 256)."""
    return next((kr for kr in KEY_WIDTHS if kr >= k), None)


def unsupported_reason(q, chunk: int = 64) -> str | None:
    """Why these kernels cannot run these arguments (None if they can). For the dispatcher."""
    if chunk not in CHUNKS:
        return f"chunk {chunk} not in {CHUNKS}"
    kr = key_width(q.shape[-1])
    if kr is None or kr > MAX_KEY_WIDTH[chunk]:
        return f"key width {q.shape[-1]} > {MAX_KEY_WIDTH[chunk]} at chunk {chunk}"
    return None


def _meta(chunk, kr):
    return dict(C=chunk, KR=kr, BV=BV, num_warps=warps(chunk))


class _GatedDelta(torch.autograd.Function):
    """On padded fp32 tensors: ``q, k (B, h, LP, KR)``, ``v (B, h, LP, VR)``, ``beta, g (B, h, LP)``,
    ``h0 (B, h, KR, VR)`` or None -> ``o (B, h, LP, VR)``, the final state ``(B, h, KR, VR)``."""

    @staticmethod
    def forward(ctx, q, k, v, beta, g, h0, chunk):
        B, H, LP, KR = k.shape
        VR = v.shape[-1]
        n_c, meta = LP // chunk, _meta(chunk, KR)
        f32 = dict(dtype=torch.float32, device=k.device)
        t = torch.empty(B * H, n_c, chunk, chunk, **f32)  # each chunk's T
        w, u0 = torch.empty_like(k), torch.empty_like(v)
        _delta_chunk_prep[(n_c, B * H)](k, v, beta, g, t, w, u0, LP, VR, **meta)
        u, hs = torch.empty_like(v), torch.empty(B * H, n_c, KR, VR, **f32)  # U and the state each chunk starts from
        hf = torch.empty(B, H, KR, VR, **f32)
        h0p = h0 if h0 is not None else hf  # hf: a placeholder pointer, not read
        grid = (VR // BV, B * H)
        _delta_state_fwd[grid](k, g, w, u0, u, hs, h0p, hf, LP, VR, n_c, int(h0 is not None), **meta)
        o = torch.empty_like(v)
        _delta_chunk_out[(n_c, B * H)](q, k, g, u, hs, o, LP, VR, **meta)
        ctx.save_for_backward(q, k, v, beta, g, t, w, u, hs)
        ctx.chunk, ctx.has_h0 = chunk, h0 is not None
        ctx.set_materialize_grads(False)
        return o, hf

    @staticmethod
    def backward(ctx, do, dhf):
        q, k, v, beta, g, t, w, u, hs = ctx.saved_tensors
        B, H, LP, KR = k.shape
        VR = v.shape[-1]
        n_c, meta = LP // ctx.chunk, _meta(ctx.chunk, KR)
        do = torch.zeros_like(v) if do is None else do.float().contiguous()
        du, ds = torch.empty_like(v), torch.empty_like(hs)
        dh0 = torch.empty(B, H, KR, VR, dtype=torch.float32, device=k.device)
        dhfp = dhf.float().contiguous() if dhf is not None else dh0  # dh0: a placeholder pointer, not read
        grid = (VR // BV, B * H)
        _delta_state_bwd[grid](q, k, g, w, do, du, ds, dhfp, dh0, LP, VR, n_c, int(dhf is not None), **meta)
        dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        dbeta, dg = torch.empty_like(beta), torch.empty_like(g)
        _delta_chunk_bwd[(n_c, B * H)](q, k, v, beta, g, t, u, hs, ds, do, du, dq, dk, dv, dbeta, dg, LP, VR, **meta)
        return dq, dk, dv, dbeta, dg, dh0 if ctx.has_h0 else None, None


def _check(q, k, v, beta, g, chunk, initial_state):
    B, H, L, K = k.shape
    if q.shape != k.shape or v.shape[:3] != (B, H, L):
        raise ValueError(
            f"q {tuple(q.shape)} / k {tuple(k.shape)} / v {tuple(v.shape)}: want (B, h, L, K) twice, (B, h, L, V)"
        )
    if beta.shape != (B, H, L) or g.shape != (B, H, L):
        raise ValueError(f"beta {tuple(beta.shape)} / g {tuple(g.shape)}: want (B, h, L) = {(B, H, L)}")
    if initial_state is not None and initial_state.shape != (B, H, K, v.shape[-1]):
        raise ValueError(f"initial_state {tuple(initial_state.shape)}: want (B, h, K, V) = {(B, H, K, v.shape[-1])}")
    reason = unsupported_reason(q, chunk)
    if reason is not None:
        raise ValueError(f"gated_delta_triton: {reason}")


def gated_delta_triton(q, k, v, beta, g, *, chunk=64, initial_state=None, return_state=False):
    """:func:`kernels.cpu.delta_rule.gated_delta_chunked` in these kernels: ``q, k (B, h, L, K)``, ``v (B, h, L, V)``,
    ``beta, g (B, h, L)``, ``initial_state (B, h, K, V)`` or None -> ``o (B, h, L, V)`` in ``v``'s dtype [, the final
    state (B, h, K, V) fp32]; differentiable in all of them. ``B h > 65535`` runs as several launches."""
    _check(q, k, v, beta, g, chunk, initial_state)
    B, H, L, K = k.shape
    V = v.shape[-1]
    if L == 0:
        S = v.new_zeros(B, H, K, V, dtype=torch.float32) if initial_state is None else initial_state.float()
        return (v.new_zeros(B, H, 0, V), S) if return_state else v.new_zeros(B, H, 0, V)
    kr, vr, pad = key_width(K), triton.cdiv(V, BV) * BV, (-L) % chunk

    def rows(t, cols):  # (B, h, L, W) -> (B, h, LP, cols) fp32, zero padded
        return F.pad(t.float(), (0, cols - t.shape[-1], 0, pad)).contiguous()

    qp, kp, vp = rows(q, kr), rows(k, kr), rows(v, vr)  # (B, h, LP, KR) / (B, h, LP, VR)
    bp, gp = (F.pad(t.float(), (0, pad)).contiguous() for t in (beta, g))  # (B, h, LP)
    h0 = None if initial_state is None else F.pad(initial_state.float(), (0, vr - V, 0, kr - K)).contiguous()
    outs, states = [], []
    for sl in batch_slices(B, H):
        o, hf = _GatedDelta.apply(qp[sl], kp[sl], vp[sl], bp[sl], gp[sl], None if h0 is None else h0[sl], int(chunk))
        outs.append(o)
        states.append(hf)
    o = (outs[0] if len(outs) == 1 else torch.cat(outs, 0))[:, :, :L, :V].to(v.dtype)
    if not return_state:
        return o
    return o, (states[0] if len(states) == 1 else torch.cat(states, 0))[..., :K, :V]


def aot_specs(quick: bool):
    """Specialisations kernels.tools.aot_check compiles: every kernel at every chunk of ``CHUNKS`` and key width of
    ``KEY_WIDTHS`` it accepts (any length and value width, the optional inputs: run-time); fp32."""
    names = ("Qp", "Kp", "Vp", "BETA", "Gp", "Tm", "W", "U0", "UU", "HS", "H0", "HF", "O")
    names += ("DO", "DU", "DS", "DHF", "DH0", "DQ", "DK", "DV", "DBETA", "DG")
    ptrs = {n: "*fp32" for n in names}
    out = []
    for chunk in (64,) if quick else CHUNKS:
        for kr in (128,) if quick else [kr for kr in KEY_WIDTHS if kr <= MAX_KEY_WIDTH[chunk]]:
            consts = {"C": chunk, "KR": kr, "BV": BV}
            for fn in (_delta_chunk_prep, _delta_chunk_out, _delta_chunk_bwd):
                out.append((f"{fn.__name__} fp32 c{chunk} k{kr}", fn, ptrs, consts, warps(chunk), 2))
            for fn in (_delta_state_fwd, _delta_state_bwd):  # their HAS_H0 / HAS_DHF: run-time flags
                out.append((f"{fn.__name__} fp32 c{chunk} k{kr}", fn, ptrs, consts, warps(chunk), 2))
    return out
