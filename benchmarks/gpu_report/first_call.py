"""``python -m benchmarks.gpu_report.first_call``: first-call time of the app's kernel variants in this
process (run by compile_times.py in a subprocess with a chosen TRITON_CACHE_DIR); prints JSON.

The variants are what the app launches by default (head dim 32, the default preset): bf16 (the
latency sweep's autocast) dense causal, block-sparse (a 64 x 64 sliding-window layout) and dense with
ALiBi + rel_bias (the modifier kernels), and fp32 (maps, training) dense causal; each call is
forward + backward. A call's first time minus its second is the compile (or cache load) time.
"""

from __future__ import annotations

import json
import time

import torch


def variants(device):
    import kernels
    from kernels.triton.flash.launcher import flash_attention

    L = 256
    lay = torch.arange(L)
    bm = kernels.block_mask(((lay[:, None] - lay[None, :]).abs() < 64) & (lay[None, :] <= lay[:, None]), 64).to(device)
    out = {}
    slopes = torch.linspace(0.1, 1, 4, device=device)
    relb = torch.zeros(4, 2 * L - 1, device=device, requires_grad=True)
    for dt, sparse, mods in (
        (torch.bfloat16, False, False),
        (torch.bfloat16, True, False),
        (torch.bfloat16, False, True),
        (torch.float32, False, False),
    ):
        kw = {"block_mask": bm} if sparse else {"causal": True}
        if mods:
            kw.update(alibi_slopes=slopes, rel_bias=relb)
        name = f"{str(dt).split('.')[1]} d32 {'sparse' if sparse else 'dense'}{' mod' if mods else ''} fwd+bwd"
        out[name] = (dt, kw, flash_attention)
    return out


def main() -> None:
    device = torch.device("cuda")
    res = {}
    for name, (dt, kw, fn) in variants(device).items():
        q = torch.randn(1, 4, 256, 32, device=device, dtype=dt, requires_grad=True)
        times = []
        for _ in range(2):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            y = fn(q, q, q, **kw)
            torch.autograd.grad(y, [q], torch.ones_like(y))
            torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
        res[name] = {"first_s": times[0], "second_s": times[1]}
    print(json.dumps(res))


if __name__ == "__main__":
    main()
