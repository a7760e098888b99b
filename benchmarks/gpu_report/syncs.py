"""Syncs section: no host synchronisation in the launch path; CPU microseconds per call.

Each operation is called once to warm up (compiles, builds and memoises the block-mask plan), then
forward + backward runs under ``torch.cuda.set_sync_debug_mode("error")``, which raises on any
operation that waits for the GPU (``.item()``, a device-to-host copy, ``nonzero``...). The CPU cost
of a call is the host time of 200 back-to-back forward calls on a tiny shape (the GPU work is
shorter than the launch, so the time is the launcher's), against SDPA on the same shape.
"""

from __future__ import annotations

import time

import torch
import torch.nn.functional as F

from .writer import md_table

N_CALLS = 200


def _ops(device):
    import kernels
    from kernels.linear_attention import linear_attention
    from kernels.norms import layer_norm
    from kernels.rope import apply_rope
    from kernels.triton.flash.launcher import flash_attention

    g = torch.Generator().manual_seed(0)
    mk = lambda *s: torch.randn(*s, generator=g).to(device, torch.bfloat16).requires_grad_()  # noqa: E731
    q, k, v = mk(1, 8, 1024, 64), mk(1, 8, 1024, 64), mk(1, 8, 1024, 64)
    lay = torch.arange(1024)
    bm = kernels.block_mask(((lay[:, None] - lay[None, :]).abs() < 200) & (lay[None, :] <= lay[:, None]), 64).to(device)
    slopes = torch.linspace(0.1, 1.0, 8, device=device)
    relb = torch.zeros(8, 2047, device=device, requires_grad=True)
    x, w, b = mk(4096, 1024), mk(1024), mk(1024)
    pos = torch.arange(1024, device=device)
    fq, fk, fv = (t.detach().float().abs().requires_grad_() for t in (q, k, v))
    return {
        "flash dense causal": (lambda: flash_attention(q, k, v, causal=True), [q, k, v]),
        "flash block-sparse": (lambda: flash_attention(q, k, v, block_mask=bm), [q, k, v]),
        "flash alibi+rel_bias+softcap": (
            lambda: flash_attention(q, k, v, causal=True, alibi_slopes=slopes, rel_bias=relb, softcap=5.0),
            [q, k, v, relb],
        ),
        "linear attention causal": (lambda: linear_attention(fq, fk, fv, causal=True), [fq, fk, fv]),
        "rope": (lambda: apply_rope(q, pos), [q]),
        "layer_norm": (lambda: layer_norm(x, w, b), [x, w, b]),
    }


def check_syncs(device) -> list[dict]:
    out = []
    for name, (fn, ins) in _ops(device).items():
        y = fn()  # warm-up: compile, plan
        torch.autograd.grad(y, ins, torch.ones_like(y))
        torch.cuda.synchronize()
        rec = {"op": name, "syncs": 0, "error": None}
        torch.cuda.set_sync_debug_mode("error")
        try:
            y = fn()
            torch.autograd.grad(y, ins, torch.ones_like(y))
        except RuntimeError as e:
            rec.update(syncs=1, error=str(e).splitlines()[0][:300])
        finally:
            torch.cuda.set_sync_debug_mode(0)
        torch.cuda.synchronize()
        out.append(rec)
    return out


def cpu_us_per_call(device) -> list[dict]:
    from kernels.triton.flash.launcher import flash_attention

    q = torch.randn(1, 2, 128, 64, device=device, dtype=torch.bfloat16)
    rows = []
    for name, fn in (
        ("ours (flash_attention, causal)", lambda: flash_attention(q, q, q, causal=True)),
        ("sdpa (causal)", lambda: F.scaled_dot_product_attention(q, q, q, is_causal=True)),
    ):
        with torch.no_grad():
            for _ in range(10):
                fn()
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(N_CALLS):
                fn()
            host = time.perf_counter() - t0
            torch.cuda.synchronize()
        rows.append({"call": name, "cpu_us_per_call": round(1e6 * host / N_CALLS, 1), "shape": "1x2x128x64 bf16"})
    return rows


def run(device) -> tuple[dict, str]:
    if torch.device(device).type != "cuda":
        return (
            {"status": "skipped", "reason": "needs CUDA (torch.cuda.set_sync_debug_mode)"},
            "skipped on CPU: the sync check and the launch cost need CUDA",
        )
    checks = check_syncs(device)
    cpu = cpu_us_per_call(device)
    total = sum(c["syncs"] for c in checks)
    md = (
        f"host syncs in the launch path: **{total}** (set_sync_debug_mode('error'), forward + backward)\n\n"
        + md_table(["op", "syncs", "error"], [[c["op"], c["syncs"], c["error"] or ""] for c in checks])
        + "\n\n"
        + md_table(["call", "CPU us / call", "shape"], [[r["call"], r["cpu_us_per_call"], r["shape"]] for r in cpu])
    )
    return {"status": "ok", "checks": checks, "total_syncs": total, "cpu_per_call": cpu}, md
