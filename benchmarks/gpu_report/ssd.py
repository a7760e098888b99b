"""Mamba-2's chunked SSD (``kernels/triton/ssd/``) in the report: its correctness case and its speed cells.

Correctness: ``ssd_triton``'s output, final state and the gradients of x, dt, a, b, c and the initial state against
a float64 step-by-step recurrence written here (``h_t = exp(dt_t a) h_{t-1} + dt_t x_t b_t^T``, ``y_t = h_t c_t``);
yardstick: the plain PyTorch chunked form (``ssd_ref``, ``ssd_minimal``'s segment sums) in fp32. Speed: forward and
forward + backward of the kernels against ``ssd_ref`` on the same fp32 inputs, at Mamba-2's head shape (P 64,
N 128, chunk 64).
"""

from __future__ import annotations

import time
import zlib

import torch

from .scan_check import scan_check

SPEED_SHAPE = dict(B=2, h=32, g=1, P=64, N=128, chunk=64)  # Mamba-2 2.7B's heads (64 wide, state 128)


def ssd_recurrence(x, dt, a, b, c, *, initial_state=None, return_state=True):
    """One step at a time (the definition): ``y [B, h, L, P]`` and the final state ``[B, h, P, N]``."""
    B, H, L, P = x.shape
    rep = H // b.shape[1]
    h = x.new_zeros(B, H, P, b.shape[-1]) if initial_state is None else initial_state
    ys = []
    for t in range(L):
        bt, ct = b[:, :, t].repeat_interleave(rep, 1), c[:, :, t].repeat_interleave(rep, 1)  # (B, h, N)
        h = (
            torch.exp(dt[:, :, t] * a)[..., None, None] * h
            + (dt[:, :, t, None] * x[:, :, t])[..., None] * bt[:, :, None, :]
        )
        ys.append((h * ct[:, :, None, :]).sum(-1))
    return (torch.stack(ys, 2), h) if return_state else torch.stack(ys, 2)


def ssd_inputs(B, H, G, L, P, N, with_h0, generator, device):
    """Random inputs in Mamba-2's ranges (dt = softplus(.) > 0, a < 0), each requiring grad."""
    rnd = lambda *s: torch.randn(*s, generator=generator).to(device)  # noqa: E731
    dt = torch.nn.functional.softplus(rnd(B, H, L) - 1.0)
    a = -(torch.rand(H, generator=generator).to(device) * 2 + 0.1)
    ins = [rnd(B, H, L, P), dt, a, rnd(B, G, L, N), rnd(B, G, L, N)] + ([rnd(B, H, P, N)] if with_h0 else [])
    return [t.requires_grad_() for t in ins]


def ssd_case(case, device, compare) -> dict:
    """``case.shape = (B, h, g, L, P, N)``, ``case.extra``: ``chunk`` and ``h0`` (with an initial state)."""
    from kernels.triton.ssd import ssd_ref, ssd_triton

    B, H, G, L, P, N = case.shape
    chunk, with_h0 = case.extra["chunk"], case.extra["h0"]
    g = torch.Generator().manual_seed(zlib.crc32(case.name.encode()))
    ins = ssd_inputs(B, H, G, L, P, N, with_h0, g, device)
    dy = torch.randn(B, H, L, P, generator=g).to(device)
    dh = torch.randn(B, H, P, N, generator=g).to(device)
    names = ["y", "state", "dx", "ddt", "da", "db", "dc"] + (["dh0"] if with_h0 else [])
    ok, checks = scan_check(
        ins,
        with_h0,
        dy,
        dh,
        (ssd_triton, dict(chunk=chunk)),
        ssd_recurrence,
        (ssd_ref, dict(chunk=chunk)),
        names,
        case.dtype,
        compare,
    )
    return {"ok": ok, "checks": checks, "yardstick": "ssd_ref (chunked PyTorch, fp32)"}


def ssd_sweep(device, quick, deadline, op_cell, log) -> list[dict]:
    """Forward and forward + backward of ``ssd_triton`` (``ours``) and ``ssd_ref`` (``torch``), fp32."""
    from kernels.triton.ssd import ssd_ref, ssd_triton

    s = SPEED_SHAPE
    recs = []
    for L in (4096,) if quick else (1024, 4096, 16384):
        g = torch.Generator().manual_seed(L)
        ins = ssd_inputs(s["B"], s["h"], s["g"], L, s["P"], s["N"], False, g, device)
        provs = {
            "ours": lambda: ssd_triton(*ins, chunk=s["chunk"]),
            "torch": lambda: ssd_ref(*ins, chunk=s["chunk"]),
        }
        op = f"ssd {s['B']}x{s['h']}x{L} P{s['P']} N{s['N']} g{s['g']} chunk {s['chunk']} fp32"
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
