"""Speed section (CUDA only): TFLOP/s of ours against SDPA (flash, cuDNN) and compiled FlexAttention.

Timing: ``triton.testing.do_bench`` (median): the runs are enqueued back to back between CUDA events
with no host synchronisation between them, and the L2 cache is flushed (a 256 MB buffer is zeroed)
before each run, so neither launch overhead nor a warm L2 flatters a small length.
FLOPs, the FlashAttention convention: forward ``4 B h L^2 d``, halved when causal; backward 2.5x
forward, so forward + backward is 3.5x forward. Block-sparse cells are compared by time (each
provider visits its own tile size), not by FLOP/s.

Shapes (FlashAttention papers): 16k tokens in total (``B = 16384 / L``), ``h d = 2048``, d 64 / 128,
L 512 .. 16k, bf16. Providers: ours (``kernels.triton.flash.launcher``), SDPA forced to the flash backend
and to cuDNN (``torch.nn.attention.sdpa_kernel``), FlexAttention compiled with ``dynamic=False``
and a causal BlockMask (d 128, causal, a few lengths: each shape compiles anew). Then the
block-sparse patterns (benchmarks/kernel_providers.py) at 16k against Flex and dense SDPA,
linear attention, RoPE and the norms against their torch references, the pooled maps, and NSA's selected-block
kernels against the block-sparse PyTorch path they replace on CUDA, Mamba-2's chunked SSD against its PyTorch
form (``benchmarks/gpu_report/ssd.py``), and the gated delta rule's chunked kernels against theirs
(``benchmarks/gpu_report/delta_rule.py``).
"""

from __future__ import annotations

import time

import torch
import torch.nn.functional as F

from .delta_rule import delta_sweep
from .ssd import ssd_sweep
from .writer import md_table

TOKENS, WIDTH = 16384, 2048
BWD_FACTOR = 2.5


def bench_ms(fn, quick: bool) -> float:
    import triton.testing

    return float(
        triton.testing.do_bench(fn, warmup=10 if quick else 25, rep=40 if quick else 100, return_mode="median")
    )


def attn_flops(B, h, L, d, causal, mode) -> float:
    f = 4.0 * B * h * L * L * d / (2 if causal else 1)
    return f * (1.0 + BWD_FACTOR) if mode == "fwd_bwd" else f


def _work(fn, mode, ins, do):
    if mode == "fwd":

        def run():
            with torch.no_grad():
                fn()

        return run

    def run():
        torch.autograd.grad(fn(), ins, do)

    return run


def _sdpa(backend_name):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backend = getattr(SDPBackend, backend_name)

    def make(q, k, v, causal):
        def fn():
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

        return fn

    return make


def _flex():
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    compiled = torch.compile(flex_attention, dynamic=False)

    def make(q, k, v, causal):
        L = q.shape[2]
        bm = create_block_mask(lambda b, h, qi, ki: ki <= qi, None, None, L, L, device=q.device) if causal else None
        return lambda: compiled(q, k, v, block_mask=bm)

    return make


def _ours(q, k, v, causal):
    from kernels.triton.flash.launcher import flash_attention

    return lambda: flash_attention(q, k, v, causal=causal)


def _cell(make, q, k, v, causal, mode, quick) -> dict:
    try:
        do = torch.randn_like(q)
        run = _work(make(q, k, v, causal), mode, [q, k, v], do)
        run()  # compile / warm up outside the timing
        torch.cuda.synchronize()
        return {"ms": bench_ms(run, quick), "status": "ok"}
    except Exception as e:  # noqa: BLE001 - a provider that cannot run this shape is a cell, not a crash
        return {"ms": None, "status": f"error: {type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"}


def dense_sweep(device, quick, deadline, log) -> list[dict]:
    lengths = (1024, 4096, 16384) if quick else (512, 1024, 2048, 4096, 8192, 16384)
    flex_lengths = (16384,) if quick else (4096, 16384)
    providers = {"ours": _ours, "sdpa-flash": _sdpa("FLASH_ATTENTION"), "sdpa-cudnn": _sdpa("CUDNN_ATTENTION")}
    flex = None
    recs = []
    for d in (64, 128):
        for causal in (False, True):
            for L in lengths:
                B, h = TOKENS // L, WIDTH // d
                g = torch.Generator(device=device).manual_seed(L + d)
                q, k, v = (
                    torch.randn(B, h, L, d, device=device, dtype=torch.bfloat16, generator=g).requires_grad_()
                    for _ in range(3)
                )
                names = dict(providers)
                if d == 128 and causal and L in flex_lengths:
                    flex = flex or _flex()
                    names["flex (compiled)"] = flex
                for mode in ("fwd", "fwd_bwd"):
                    for name, make in names.items():
                        rec = {"provider": name, "d": d, "causal": causal, "L": L, "B": B, "h": h, "mode": mode}
                        if time.monotonic() > deadline:
                            rec.update(ms=None, status="skipped: time budget")
                        else:
                            rec.update(_cell(make, q, k, v, causal, mode, quick))
                        rec["tflops"] = (
                            attn_flops(B, h, L, d, causal, mode) / (rec["ms"] / 1e3) / 1e12 if rec["ms"] else None
                        )
                        recs.append(rec)
                        ms, tflops = rec["ms"], rec["tflops"]
                        log(
                            f"  speed: {mode} d{d} causal={causal} L={L} {name}: {rec['status']} "
                            f"{'' if ms is None else f'{ms:.3f} ms {tflops:.0f} TFLOP/s'}"
                        )
                del q, k, v
    return recs


def sparse_sweep(device, quick, deadline, log) -> list[dict]:
    from benchmarks.kernel_providers import prepare

    recs = []
    B, h, d = 1, 16, 128
    for L in (16384,) if quick else (4096, 16384):
        g = torch.Generator(device=device).manual_seed(L)
        q, k, v = (
            torch.randn(B, h, L, d, device=device, dtype=torch.bfloat16, generator=g).requires_grad_() for _ in range(3)
        )
        for pattern in ("sliding_window", "bigbird", "longformer"):
            makers = {}
            for prov in ("ours", "flex"):
                try:
                    prep = prepare(prov, pattern, q)
                    makers[prov] = (lambda fn: lambda q, k, v, causal: lambda: fn(q, k, v))(prep.fn)
                except Exception as e:  # noqa: BLE001
                    makers[prov] = e
            makers["sdpa-flash dense causal"] = _sdpa("FLASH_ATTENTION")
            for mode in ("fwd", "fwd_bwd"):
                for name, make in makers.items():
                    rec = {"pattern": pattern, "provider": name, "L": L, "B": B, "h": h, "d": d, "mode": mode}
                    if isinstance(make, Exception):
                        rec.update(ms=None, status=f"error: {make}")
                    elif time.monotonic() > deadline:
                        rec.update(ms=None, status="skipped: time budget")
                    else:
                        rec.update(_cell(make, q, k, v, True, mode, quick))
                    recs.append(rec)
                    ms = rec["ms"]
                    log(
                        f"  speed: {mode} {pattern} L={L} {name}: {rec['status']} "
                        f"{'' if ms is None else f'{ms:.3f} ms'}"
                    )
        del q, k, v
    return recs


def ops_sweep(device, quick, deadline, log) -> list[dict]:
    from kernels.cpu.linear_attention import linear_attention_ref
    from kernels.cpu.rope import apply_rope_ref
    from kernels.linear_attention import linear_attention
    from kernels.norms import layer_norm, rms_norm
    from kernels.rope import apply_rope

    g = torch.Generator(device=device).manual_seed(0)

    def mk(*s, dt=torch.bfloat16):
        return torch.randn(*s, device=device, dtype=dt, generator=g).requires_grad_()

    x, w, b = mk(16384, 4096), mk(4096), mk(4096)
    r = mk(4, 16, 4096, 128)
    pos = torch.arange(4096, device=device)
    lq, lk, lv = (mk(1, 16, 16384, 64, dt=torch.float32) for _ in range(3))
    lq, lk = (t.detach().abs().requires_grad_() for t in (lq, lk))
    pairs = {
        "layer_norm 16384x4096 bf16": (lambda: layer_norm(x, w, b), lambda: F.layer_norm(x, (4096,), w, b), [x, w, b]),
        "rms_norm 16384x4096 bf16": (lambda: rms_norm(x, w), lambda: F.rms_norm(x, (4096,), w, 1e-5), [x, w]),
        "rope 4x16x4096x128 bf16": (lambda: apply_rope(r, pos), lambda: apply_rope_ref(r, pos), [r]),
        "linear attention causal 1x16x16384x64 fp32": (
            lambda: linear_attention(lq, lk, lv, causal=True),
            lambda: linear_attention_ref(lq, lk, lv, causal=True),
            [lq, lk, lv],
        ),
    }
    recs = []
    for name, (ours, ref, ins) in pairs.items():
        for mode in ("fwd", "fwd_bwd"):
            for prov, fn in (("ours", ours), ("torch", ref)):
                rec = {"op": name, "provider": prov, "mode": mode}
                if time.monotonic() > deadline:
                    rec.update(ms=None, status="skipped: time budget")
                else:
                    rec.update(_op_cell(fn, ins, mode, quick))
                recs.append(rec)
                ms = rec["ms"]
                log(f"  speed: {mode} {name} {prov}: {rec['status']} {'' if ms is None else f'{ms:.3f} ms'}")
    return recs


POOLED_L, POOLED_HEADS = 16384, 16


def pooled_sweep(device, quick, deadline, log) -> list[dict]:
    """Pooled attention maps (kernels.pooled_attention: the forward's lse + the pooled pass) of 16 heads
    at 16k tokens, d 64 bf16, dense causal and a 64-key sliding window, beside one forward of
    ``flash_attention`` on the same inputs (the pooled maps cost about two forward passes)."""
    from kernels.block_mask import block_mask_from_rows
    from kernels.pooled import pooled_attention
    from kernels.triton.flash.launcher import flash_attention

    g = torch.Generator(device=device).manual_seed(0)
    L, h = POOLED_L, POOLED_HEADS
    q, k, v = (torch.randn(1, h, L, 64, device=device, dtype=torch.bfloat16, generator=g) for _ in range(3))

    def window(a, b):
        i, j = torch.arange(a, b, device=device)[:, None], torch.arange(L, device=device)[None, :]
        return ((i - j).abs() < 64) & (j <= i)

    layouts = {"full causal": None, "sliding_window(64) causal": block_mask_from_rows(window, L, L, 64, device)}
    recs = []
    for pattern, bm in layouts.items():
        kw = {"block_mask": bm} if bm is not None else {"causal": True}
        for prov, fn in (
            ("ours", lambda: pooled_attention(q, k, **kw)),
            ("flash forward", lambda: flash_attention(q, k, v, **kw)),
        ):
            rec = {"op": f"pooled maps {pattern} 1x{h}x{L}x64 bf16", "pattern": pattern, "L": L, "provider": prov}
            if time.monotonic() > deadline:
                rec.update(ms=None, status="skipped: time budget")
            else:
                try:
                    with torch.no_grad():
                        fn()
                        torch.cuda.synchronize()
                        rec.update(ms=bench_ms(fn, quick), status="ok")
                except Exception as e:  # noqa: BLE001
                    rec.update(ms=None, status=f"error: {type(e).__name__}: {str(e)[:160]}")
            recs.append(rec)
            ms = rec["ms"]
            log(f"  speed: {rec['op']} {prov}: {rec['status']} {'' if ms is None else f'{ms:.2f} ms'}")
    return recs


NSA_SHAPE = dict(B=1, h=16, h_kv=1, d=64, block=64, top_n=16)  # the paper's GQA group of 16, l' = 64, n = 16


def nsa_sweep(device, quick, deadline, log) -> list[dict]:
    """NSA's selected branch (``kernels.selected_attention``, fp32): the Triton kernels against the block-sparse
    PyTorch path they replace on CUDA (``selected_torch``) and dense causal SDPA (flash is fp16 / bf16 only, so
    SDPA's fp32 choice) on the same inputs, forward and forward + backward, at a few lengths; an NSA-like
    selection (block 0, the two local blocks, random others up to ``n``)."""
    from kernels.selected import selected_attention, selected_torch

    from .correctness import nsa_selection

    c = NSA_SHAPE
    recs = []
    for L in (4096,) if quick else (1024, 4096, 16384):
        g = torch.Generator(device=device).manual_seed(L)
        q = torch.randn(c["B"], c["h"], L, c["d"], device=device, generator=g).requires_grad_()
        k, v = (torch.randn(c["B"], c["h_kv"], L, c["d"], device=device, generator=g).requires_grad_() for _ in "kv")
        sel = nsa_selection(c["B"], c["h_kv"], L, c["block"], c["top_n"], torch.Generator().manual_seed(L), device)
        provs = {
            "ours": lambda: selected_attention(q, k, v, sel, c["block"], max_blocks=c["top_n"]),
            "torch block-sparse": lambda: selected_torch(q, k, v, sel, c["block"]),
            "sdpa dense causal": lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True),
        }
        for mode in ("fwd", "fwd_bwd"):
            for prov, fn in provs.items():
                if prov == "torch block-sparse" and L > 4096:
                    continue  # not timed past 4k: the report has a time budget, the comparison is made at 4k
                rec = {"op": f"nsa selected 1x16/1x{L}x64 l'=64 n=16 fp32", "L": L, "provider": prov, "mode": mode}
                if time.monotonic() > deadline:
                    rec.update(ms=None, status="skipped: time budget")
                else:
                    rec.update(_op_cell(fn, [q, k, v], mode, quick))
                recs.append(rec)
                ms = rec["ms"]
                log(f"  speed: {mode} {rec['op']} {prov}: {rec['status']} {'' if ms is None else f'{ms:.3f} ms'}")
    return recs


def _op_cell(fn, ins, mode, quick) -> dict:
    try:
        with torch.no_grad():
            do = torch.randn_like(fn())
        run = _work(fn, mode, ins, do)
        run()
        torch.cuda.synchronize()
        return {"ms": bench_ms(run, quick), "status": "ok"}
    except Exception as e:  # noqa: BLE001
        return {"ms": None, "status": f"error: {type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"}


def _ms(x):
    return "-" if x is None else f"{x:.3f}"


def markdown(dense, sparse, ops) -> str:
    out = [
        "FLOPs: FlashAttention convention, forward 4 B h L^2 d (halved when causal), backward 2.5x forward "
        "(forward + backward = 3.5x forward). Timed with triton.testing.do_bench (median, back-to-back runs "
        "between CUDA events, L2 flushed before each run). bf16; 16k tokens, h d = 2048.",
        "",
    ]
    provs = list(dict.fromkeys(r["provider"] for r in dense))
    rows = {}
    for r in dense:
        key = (r["mode"], r["d"], r["causal"], r["L"])
        rows.setdefault(key, {})[r["provider"]] = r
    body = []
    for (mode, d, causal, L), cells in rows.items():
        sf = cells.get("sdpa-flash", {}).get("ms")
        ours = cells.get("ours", {}).get("ms")
        ratio = f"{sf / ours:.2f}" if sf and ours else "-"
        body.append(
            [mode, d, causal, L]
            + [
                f"{cells[p]['tflops']:.0f}"
                if p in cells and cells[p]["tflops"]
                else (cells[p]["status"].split(":")[0] if p in cells else "")
                for p in provs
            ]
            + [ratio]
        )
    out.append(md_table(["mode", "d", "causal", "L"] + [f"{p} TFLOP/s" for p in provs] + ["ours / sdpa-flash"], body))
    if sparse:
        out += ["", "Block-sparse patterns, causal, B=1 h=16 d=128 bf16 (ms; ratios are time ratios):", ""]
        srows = {}
        for r in sparse:
            srows.setdefault((r["mode"], r["pattern"], r["L"]), {})[r["provider"]] = r["ms"]
        body = []
        for (mode, pattern, L), c in srows.items():
            ours, fl, sd = c.get("ours"), c.get("flex"), c.get("sdpa-flash dense causal")
            body.append(
                [
                    mode,
                    pattern,
                    L,
                    _ms(ours),
                    _ms(fl),
                    _ms(sd),
                    f"{fl / ours:.2f}" if fl and ours else "-",
                    f"{sd / ours:.2f}" if sd and ours else "-",
                ]
            )
        out.append(
            md_table(
                ["mode", "pattern", "L", "ours ms", "flex ms", "dense sdpa ms", "flex / ours", "dense / ours"], body
            )
        )
    if ops:
        out += ["", "Other kernels against their torch references (ms):", ""]
        orows = {}
        for r in ops:
            orows.setdefault((r["mode"], r["op"]), {})[r["provider"]] = r["ms"]
        out.append(
            md_table(
                ["mode", "op", "ours ms", "torch ms", "torch / ours"],
                [
                    [
                        m,
                        op,
                        _ms(c.get("ours")),
                        _ms(c.get("torch")),
                        f"{c['torch'] / c['ours']:.2f}" if c.get("ours") and c.get("torch") else "-",
                    ]
                    for (m, op), c in orows.items()
                ],
            )
        )
    return "\n".join(out)


def run(device, quick=False, deadline=float("inf"), log=print) -> tuple[dict, str]:
    if torch.device(device).type != "cuda":
        return (
            {"status": "skipped", "reason": "CPU run: the speed section needs CUDA"},
            "skipped on CPU (Triton interpreter): timings need CUDA",
        )
    t0 = time.perf_counter()
    dense = dense_sweep(device, quick, deadline, log)
    sparse = sparse_sweep(device, quick, deadline, log)
    ops = ops_sweep(device, quick, deadline, log)
    pooled = pooled_sweep(device, quick, deadline, log)
    nsa = nsa_sweep(device, quick, deadline, log)
    ssd = ssd_sweep(device, quick, deadline, _op_cell, log)
    delta = delta_sweep(device, quick, deadline, _op_cell, log)
    data = {
        "status": "ok",
        "dense": dense,
        "sparse": sparse,
        "ops": ops,
        "pooled": pooled,
        "nsa_selected": nsa,
        "ssd": ssd,
        "gated_delta": delta,
        "seconds": time.perf_counter() - t0,
        "flop_convention": "fwd 4 B h L^2 d, /2 causal; fwd+bwd = 3.5 x fwd (bwd = 2.5 x fwd)",
        "timer": "triton.testing.do_bench median, L2 flushed",
    }
    md = (
        markdown(dense, sparse, ops)
        + "\n\nPooled attention maps (256 x 256 cells per head, with per-query stats; ms):\n\n"
        + md_table(["op", "provider", "ms"], [[r["op"], r["provider"], _ms(r["ms"])] for r in pooled])
        + "\n\nNSA selected blocks (kernels.selected_attention, fp32; ms):\n\n"
        + md_table(["mode", "op", "provider", "ms"], [[r["mode"], r["op"], r["provider"], _ms(r["ms"])] for r in nsa])
        + "\n\nMamba-2 SSD, chunked (kernels/triton/ssd/, fp32; ms; torch: ssd_ref, the same chunks in PyTorch):\n\n"
        + md_table(["mode", "op", "provider", "ms"], [[r["mode"], r["op"], r["provider"], _ms(r["ms"])] for r in ssd])
        + "\n\nGated delta rule, chunked (kernels/triton/delta_rule/, fp32; ms; torch: gated_delta_chunked, the same"
        + " chunks in PyTorch):\n\n"
        + md_table(["mode", "op", "provider", "ms"], [[r["mode"], r["op"], r["provider"], _ms(r["ms"])] for r in delta])
    )
    return data, md
