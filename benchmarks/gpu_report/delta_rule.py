"""The gated delta rule's chunked kernels (``kernels/triton/delta_rule/``) in the report: correctness case, speed cells.

Correctness: ``gated_delta_triton``'s output, final state and the gradients of q, k, v, beta, g and the initial state
against a float64 token-by-token recurrence written here (``S_t = exp(g_t) S_{t-1}; S_t += k_t (beta_t (v_t -
S_t^T k_t))^T; o_t = S_t^T q_t``); yardstick: the plain PyTorch chunked form (``kernels.cpu.delta_rule.
gated_delta_chunked``, the same WY / UT chunks) in fp32. Speed: forward and forward + backward of the kernels against
``gated_delta_chunked`` on the same fp32 inputs, at Gated DeltaNet's head shape (d_k = d_v = 128, chunk 64).
"""

from __future__ import annotations

import time
import zlib

import torch
import torch.nn.functional as F

from .scan_check import scan_check

SPEED_SHAPE = dict(B=2, h=16, K=128, V=128, chunk=64)  # Gated DeltaNet 1.3B's heads (128 wide keys and values)


def delta_recurrence(q, k, v, beta, g, *, initial_state=None, return_state=True):
    """One token at a time (the definition): ``o (B, h, L, V)`` and the final state ``(B, h, K, V)``."""
    B, H, L, K = k.shape
    S = v.new_zeros(B, H, K, v.shape[-1]) if initial_state is None else initial_state
    outs = []
    for t in range(L):
        S = S * g[:, :, t].exp()[..., None, None]  # (B, h, K, V)
        kt = k[:, :, t]
        delta = beta[:, :, t, None] * (v[:, :, t] - (kt[..., None] * S).sum(-2))  # (B, h, V)
        S = S + kt[..., None] * delta[..., None, :]
        outs.append((q[:, :, t, :, None] * S).sum(-2))
    return (torch.stack(outs, 2), S) if return_state else torch.stack(outs, 2)


def delta_inputs(B, H, L, K, V, with_h0, generator, device):
    """Random inputs in the model's ranges (unit keys, queries scaled by K^-1/2, beta in (0, 1), g < 0), each
    requiring grad."""
    rnd = lambda *s: torch.randn(*s, generator=generator).to(device)  # noqa: E731
    q = F.normalize(rnd(B, H, L, K), dim=-1) * K**-0.5
    k = F.normalize(rnd(B, H, L, K), dim=-1)
    beta = torch.sigmoid(rnd(B, H, L))
    g = -F.softplus(rnd(B, H, L)) * 0.5
    ins = [q, k, rnd(B, H, L, V), beta, g] + ([rnd(B, H, K, V)] if with_h0 else [])
    return [t.requires_grad_() for t in ins]


def delta_case(case, device, compare) -> dict:
    """``case.shape = (B, h, L, K, V)``, ``case.extra``: ``chunk`` and ``h0`` (with an initial state)."""
    from kernels.cpu.delta_rule import gated_delta_chunked
    from kernels.triton.delta_rule import gated_delta_triton

    B, H, L, K, V = case.shape
    chunk, with_h0 = case.extra["chunk"], case.extra["h0"]
    gen = torch.Generator().manual_seed(zlib.crc32(case.name.encode()))
    ins = delta_inputs(B, H, L, K, V, with_h0, gen, device)
    do = torch.randn(B, H, L, V, generator=gen).to(device)
    dh = torch.randn(B, H, K, V, generator=gen).to(device)
    names = ["o", "state", "dq", "dk", "dv", "dbeta", "dg"] + (["dh0"] if with_h0 else [])
    ok, checks = scan_check(
        ins,
        with_h0,
        do,
        dh,
        (gated_delta_triton, dict(chunk=chunk)),
        delta_recurrence,
        (gated_delta_chunked, dict(chunk=chunk)),
        names,
        case.dtype,
        compare,
    )
    return {"ok": ok, "checks": checks, "yardstick": "gated_delta_chunked (chunked PyTorch, fp32)"}


def delta_sweep(device, quick, deadline, op_cell, log) -> list[dict]:
    """Forward and forward + backward of ``gated_delta_triton`` (``ours``) and ``gated_delta_chunked`` (``torch``),
    fp32."""
    from kernels.cpu.delta_rule import gated_delta_chunked
    from kernels.triton.delta_rule import gated_delta_triton

    s = SPEED_SHAPE
    recs = []
    for L in (4096,) if quick else (1024, 4096, 16384):
        gen = torch.Generator().manual_seed(L)
        ins = delta_inputs(s["B"], s["h"], L, s["K"], s["V"], False, gen, device)
        provs = {
            "ours": lambda: gated_delta_triton(*ins, chunk=s["chunk"]),
            "torch": lambda: gated_delta_chunked(*ins, chunk=s["chunk"]),
        }
        op = f"gated delta {s['B']}x{s['h']}x{L} K{s['K']} V{s['V']} chunk {s['chunk']} fp32"
        for mode in ("fwd", "fwd_bwd"):
            for prov, fn in provs.items():
                rec = {"op": op, "L": L, "provider": prov, "mode": mode}
                if time.monotonic() > deadline:
                    rec.update(ms=None, status="skipped: time budget")
                else:
                    rec.update(op_cell(fn, ins, mode, quick))
                recs.append(rec)
                ms = rec["ms"]
                log(f"  speed: {mode} {op} {prov}: {rec['status']} {'' if ms is None else f'{ms:.3f} ms'}")
    return recs
