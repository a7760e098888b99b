"""Correctness section: every case of cases.py against a float64 reference, outputs and gradients.

The bar is torch's own kernel: for each checked tensor (output, dq, dk, dv, d rel_bias) the error
of ours against the float64 reference (``kernels.attention_ref`` on float64 copies) must be at most
``2 x`` the error of the yardstick in the same dtype, with a floor of ``FLOOR_EPS[dtype]`` epsilon of
that dtype at the reference's largest magnitude: 1 for fp16 / bf16 (binding only when the yardstick
happens to be exact); 8 for fp32, whose kernels use tf32x3 products (about fp32 accuracy, not
correctly rounded) and exp2 in log2 units, ~1e-6 on unit-scale data, while the fp32 yardstick is
the plain torch computation (no SDPA kernel runs softcap or rel_bias) and is sometimes 4x tighter. The yardstick
is ``scaled_dot_product_attention`` (GQA, masks as a boolean ``attn_mask``) where it expresses the
case, else (score modifiers, or SDPA giving non-finite values on empty rows) the plain torch
reference run in the case's dtype; each record names the one used. Errors are maxima of the
absolute difference. Every case runs isolated: an exception is a failed case with its message.
"""

from __future__ import annotations

import time
import traceback
import zlib

import torch
import torch.nn.functional as F

from .cases import AttnCase, OpCase, attention_cases, op_cases
from .writer import md_table

FLOOR_EPS = {torch.float32: 8, torch.float16: 1, torch.bfloat16: 1}  # tolerance floor, in eps(dtype) x max|ref|


def _err(x: torch.Tensor, ref: torch.Tensor) -> float:
    diff = (x.double() - ref.double()).abs()
    return float("nan") if not torch.isfinite(x).all() else float(diff.max()) if diff.numel() else 0.0


def _tol(yard_err: float, ref: torch.Tensor, dtype) -> float:
    scale = float(ref.double().abs().max()) if ref.numel() else 0.0
    floor = FLOOR_EPS[dtype] * torch.finfo(dtype).eps * scale
    return max(2.0 * yard_err, floor) if yard_err == yard_err else floor


def _compare(names, ours, refs, yards, dtype) -> tuple[bool, list]:
    checks, ok = [], True
    for name, a, r, y in zip(names, ours, refs, yards):
        e, ey = _err(a, r), _err(y, r)
        tol = _tol(ey, r, dtype)
        passed = e == e and e <= tol
        ok &= passed
        checks.append({"tensor": name, "err": e, "torch_err": ey, "tol": tol, "ok": passed})
    return ok, checks


def _block_mask(case: AttnCase, device):
    if case.pattern is None:
        return None, None
    import kernels

    if case.pattern == "empty_rows":
        g = torch.Generator().manual_seed(7)
        dense = torch.rand(case.lq, case.lk, generator=g) < 0.3
        dense[3] = False
        dense[case.lq // 2 : case.lq // 2 + 70] = False  # whole empty blocks and partly empty ones
        return kernels.block_mask(dense, 64).to(device), dense.to(device)
    from models import ModelConfig
    from models.attention.sparse import pattern_block_mask

    cfg = ModelConfig(attention=case.pattern, causal=case.causal)
    cfg.validate()
    bm = pattern_block_mask(cfg, case.lq, case.lk - case.lq).to(device)
    return bm, bm.to_dense().to(device)


def _inputs(case: AttnCase, device):
    # Drawn on the device: the large-offset case has 2.4e9 elements per tensor.
    g = torch.Generator(device=device).manual_seed(zlib.crc32(case.name.encode()))

    def mk(heads, L):
        if case.layout == "transposed":  # [B, L, h, d] storage, seen as [B, h, L, d]
            t = torch.randn(case.B, L, heads, case.d, generator=g, device=device).to(case.dtype).transpose(1, 2)
        else:
            t = torch.randn(case.B, heads, L, case.d, generator=g, device=device, dtype=case.dtype)
        return t.requires_grad_()

    q, k, v = mk(case.h, case.lq), mk(case.h_kv, case.lk), mk(case.h_kv, case.lk)
    mods = {}
    if "alibi" in case.mods:
        mods["alibi_slopes"] = torch.tensor([2.0 ** (-8 * (i + 1) / case.h) for i in range(case.h)], device=device)
    if "softcap" in case.mods:
        mods["softcap"] = 2.0
    if "rel_bias" in case.mods:
        mods["rel_bias"] = (0.5 * torch.randn(case.h, 2 * case.lk - 1, generator=g, device=device)).requires_grad_()
    return q, k, v, mods


def _sdpa(q, k, v, causal, allowed):
    lq, lk = q.shape[2], k.shape[2]
    mask = allowed
    if causal:
        rel = torch.arange(lk, device=q.device)[None, :] - (torch.arange(lq, device=q.device)[:, None] + lk - lq)
        mask = (rel <= 0) if mask is None else mask & (rel <= 0)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=q.shape[1] != k.shape[1])


def _grads(out, ins, do):
    need = [t for t in ins if t is not None and t.requires_grad]
    return list(torch.autograd.grad(out, need, do))


def run_attention_case(case: AttnCase, device, attn_fn) -> dict:
    from kernels.reference import attention_ref

    q, k, v, mods = _inputs(case, device)
    bm, allowed = _block_mask(case, device)
    ins = [q, k, v, mods.get("rel_bias")]
    names = ["out", "dq", "dk", "dv"] + (["drel_bias"] if "rel_bias" in mods else [])
    out = attn_fn(q, k, v, causal=case.causal, block_mask=bm, **mods)
    do = torch.randn(out.shape, generator=torch.Generator(device=device).manual_seed(1), device=device, dtype=out.dtype)
    ours = [out.detach()] + _grads(out, ins, do)
    if case.determinism:
        out2 = attn_fn(q, k, v, causal=case.causal, block_mask=bm, **mods)
        again = [out2.detach()] + _grads(out2, ins, do)
        same = [bool(torch.equal(a, b)) for a, b in zip(ours, again)]
        return {
            "ok": all(same),
            "checks": [{"tensor": n, "bitwise_equal": s} for n, s in zip(names, same)],
            "yardstick": "the same call twice",
        }
    sel = slice(None)
    if case.check_heads is not None:  # only these heads against the reference (h_kv == h)
        sel = torch.tensor(case.check_heads, device=device)
        ours = [t.index_select(1, sel) for t in ours]
        q, k, v = (t.detach().index_select(1, sel).requires_grad_() for t in (q, k, v))
        do = do.index_select(1, sel)
        ins = [q, k, v, None]
    ref_mods = {
        n: (
            t.detach().double().requires_grad_()
            if isinstance(t, torch.Tensor) and t.requires_grad
            else t.double()
            if isinstance(t, torch.Tensor)
            else t
        )
        for n, t in mods.items()
    }
    r_in = [t.detach().double().requires_grad_() for t in (q, k, v)]
    ref, _ = attention_ref(*r_in, causal=case.causal, mask=allowed, **ref_mods)
    refs = [ref.detach()] + _grads(ref, r_in + [ref_mods.get("rel_bias")], do.double())
    y_in = [t.detach().requires_grad_() for t in (q, k, v)]
    y_mods = {
        n: (t.detach().requires_grad_() if isinstance(t, torch.Tensor) and t.requires_grad else t)
        for n, t in mods.items()
    }
    yardstick = "sdpa"
    yard = None
    if not mods:
        y = _sdpa(*y_in, case.causal, allowed)
        if torch.isfinite(y).all():
            yard = [y.detach()] + _grads(y, y_in, do)
            if not all(torch.isfinite(t).all() for t in yard):
                yard = None
    if yard is None:
        yardstick = f"torch reference in {str(case.dtype).split('.')[1]}"
        y, _ = attention_ref(*y_in, causal=case.causal, mask=allowed, **y_mods)
        yard = [y.detach()] + _grads(y, y_in + [y_mods.get("rel_bias")], do)
    ok, checks = _compare(names, ours, refs, yard, case.dtype)
    return {"ok": ok, "checks": checks, "yardstick": yardstick}


def run_op_case(case: OpCase, device) -> dict:
    from kernels.cpu.linear_attention import (
        linear_attention_dense,
        linear_attention_ref,
    )
    from kernels.cpu.rope import apply_rope_ref
    from kernels.linear_attention import linear_attention
    from kernels.norms import layer_norm, rms_norm
    from kernels.rope import apply_rope

    g = torch.Generator().manual_seed(zlib.crc32(case.name.encode()))
    rnd = lambda *s: torch.randn(*s, generator=g).to(device)  # noqa: E731
    dt = case.dtype
    if case.op == "norm_offset":  # only the last rows (past 2^31 elements) are checked
        x = rnd(1, case.shape[1]).to(dt).expand(case.shape).contiguous()
        x[-2:] = rnd(2, case.shape[1]).to(dt)
        w, b = rnd(case.shape[1]).to(dt), rnd(case.shape[1]).to(dt)
        with torch.no_grad():
            y = layer_norm(x, w, b, force_triton=True)[-2:]
        xs = x[-2:]
        ref = F.layer_norm(xs.double(), xs.shape[-1:], w.double(), b.double(), 1e-5)
        yard = F.layer_norm(xs, xs.shape[-1:], w, b, 1e-5)
        ok, checks = _compare(["out (last rows)"], [y], [ref], [yard], dt)
        return {"ok": ok, "checks": checks, "yardstick": "F.layer_norm"}
    if case.op == "pooled":
        return _pooled_case(case, device, rnd)
    if case.op == "nsa_selected":
        return _nsa_selected_case(case, device, rnd)
    if case.op == "ssd":
        from .ssd import ssd_case

        return ssd_case(case, device, _compare)
    if case.op == "gated_delta":
        from .delta_rule import delta_case

        return delta_case(case, device, _compare)
    if case.op == "rope":
        x = rnd(*case.shape).to(dt).requires_grad_()
        pos = torch.arange(case.shape[-2], device=device)
        fn = lambda t: apply_rope(t, pos, force_triton=True)  # noqa: E731
        ref_fn = lambda t: apply_rope_ref(t, pos)  # noqa: E731
        ins, yard_name = [x], "apply_rope_ref (torch)"
    elif case.op in ("layer_norm", "rms_norm"):
        n = case.shape[-1]
        x, w = rnd(*case.shape).to(dt).requires_grad_(), rnd(n).to(dt).requires_grad_()
        if case.op == "layer_norm":
            b = rnd(n).to(dt).requires_grad_()
            ins = [x, w, b]
            fn = lambda x, w, b: layer_norm(x, w, b, force_triton=True)  # noqa: E731
            ref_fn = lambda x, w, b: F.layer_norm(x, (n,), w, b, 1e-5)  # noqa: E731
        else:
            ins = [x, w]
            fn = lambda x, w: rms_norm(x, w, force_triton=True)  # noqa: E731
            ref_fn = lambda x, w: F.rms_norm(x, (n,), w, 1e-5)  # noqa: E731
        yard_name = f"F.{case.op}"
    else:  # linear attention: phi(q), phi(k) positive features
        B, h, h_kv, L, m, d = case.shape
        causal = case.extra["causal"]
        ins = [
            rnd(B, h, L, m).abs().to(dt).requires_grad_(),
            rnd(B, h_kv, L, m).abs().to(dt).requires_grad_(),
            rnd(B, h_kv, L, d).to(dt).requires_grad_(),
        ]
        fn = lambda q, k, v: linear_attention(q, k, v, causal=causal, force_triton=True)  # noqa: E731
        yard_fn = lambda q, k, v: linear_attention_ref(q, k, v, causal=causal)  # noqa: E731
        # linear_attention_ref computes in float32 whatever its inputs: the reference is the definition
        ref_fn = lambda q, k, v: linear_attention_dense(q, k, v, causal=causal)  # noqa: E731
        yard_name = "linear_attention_ref (torch, fp32)"
    out = fn(*ins)
    do = torch.randn(out.shape, generator=g).to(device, out.dtype)
    ours = [out.detach()] + list(torch.autograd.grad(out, ins, do))
    r_in = [t.detach().double().requires_grad_() for t in ins]
    r = ref_fn(*r_in)
    refs = [r.detach()] + list(torch.autograd.grad(r, r_in, do.double()))
    y_in = [t.detach().requires_grad_() for t in ins]
    y = (yard_fn if case.op == "linear_attention" else ref_fn)(*y_in)
    yard = [y.detach()] + list(torch.autograd.grad(y, y_in, do))
    names = ["out"] + [f"d{i}" for i in range(len(ins))]
    ok, checks = _compare(names, ours, refs, yard, dt)
    return {"ok": ok, "checks": checks, "yardstick": yard_name}


def _pooled_case(case: OpCase, device, rnd) -> dict:
    """Pooled maps from the Triton kernels (interpreted on CPU) against the float64 reference's
    probabilities pooled the same way; yardstick: the torch block-sparse path in the input dtype."""
    from kernels.block_mask import block_mask
    from kernels.cpu.pooled import pooled_block_sparse
    from kernels.pooled_dense import pool_probs, pooled_block
    from kernels.reference import attention_ref
    from kernels.triton.pooled import pooled_triton

    B, h, h_kv, L, d = case.shape
    dt, ex = case.dtype, case.extra
    q, k = rnd(B, h, L, d).to(dt), rnd(B, h_kv, L, d).to(dt)
    causal = bool(ex.get("causal", False))
    bm = None
    if ex.get("pattern") == "sliding_window":
        i, j = torch.arange(L)[:, None], torch.arange(L)[None, :]
        bm = block_mask(((i - j).abs() < 64) | (j < 4), 64).to(device)
    mods = {}
    if "alibi" in ex.get("mods", ()):
        mods["alibi_slopes"] = torch.linspace(0.02, 0.5, h, device=device)
    if "softcap" in ex.get("mods", ()):
        mods["softcap"] = 20.0
    block = pooled_block(L, 256)
    kw = dict(causal=causal, scale=d**-0.5, sink_k=4, window=64, **mods)
    ours = pooled_triton(q, k, block_mask=bm, block_q=block, block_k=block, **kw)
    m64 = {n: t.double() if isinstance(t, torch.Tensor) else t for n, t in mods.items()}
    _, p = attention_ref(q.double(), k.double(), k.double(), causal=causal, block_mask=bm, **m64)
    ref = pool_probs(p, block, block, sink_k=4, window=64)
    yard = pooled_block_sparse(q, k, bm, block_q=block, block_k=block, **kw)
    names = ["mass", "entropy", "distance", "sink", "local"]
    ok, checks = _compare(
        names,
        [getattr(ours, n) for n in names],
        [getattr(ref, n) for n in names],
        [getattr(yard, n) for n in names],
        dt,
    )
    return {"ok": ok, "checks": checks, "yardstick": "pooled_block_sparse (torch, input dtype)"}


def nsa_selection(B, h_kv, L, blk, n, generator, device) -> torch.Tensor:
    """An NSA-like selection ``(B, h_kv, L, n_s)``: block 0, the own and the previous block, then random earlier
    blocks up to ``n`` per position (nothing after the own block)."""
    n_s = -(-L // blk)
    t = torch.arange(L)
    own = t // blk
    score = torch.rand(B, h_kv, L, n_s, generator=generator)
    score[..., 0] = 3.0
    score[..., t, own] = 3.0
    score[..., t, (own - 1).clamp(min=0)] = 3.0
    score = score.masked_fill(torch.arange(n_s) > own[:, None], -1.0)
    rank = score.argsort(-1, descending=True).argsort(-1)
    return ((rank < n) & (score >= 0)).to(device)


def _nsa_selected_case(case: OpCase, device, rnd) -> dict:
    """NSA's selected blocks (``kernels.selected_attention`` on the Triton kernels) against a float64 dense
    softmax over the allowed tokens (``i <= t`` in a selected block of the head's K/V head); yardstick: the
    block-sparse PyTorch path (``selected_torch``) in fp32."""
    from kernels.selected import selected_attention, selected_torch

    B, h, h_kv, L, d, blk, n = case.shape
    g = torch.Generator().manual_seed(zlib.crc32(case.name.encode()))
    sel = nsa_selection(B, h_kv, L, blk, n, g, device)
    ins = [rnd(B, h, L, d).requires_grad_(), rnd(B, h_kv, L, d).requires_grad_(), rnd(B, h_kv, L, d).requires_grad_()]
    out = selected_attention(*ins, sel, blk, max_blocks=n, force_triton=True)
    do = torch.randn(out.shape, generator=g).to(device)
    ours = [out.detach()] + list(torch.autograd.grad(out, ins, do))
    r_in = [t.detach().double().requires_grad_() for t in ins]
    G, t = h // h_kv, torch.arange(L, device=device)
    allowed = (sel[..., t // blk] & (t[None, :] <= t[:, None])).repeat_interleave(G, 1)  # (B, h, L, L)
    kk, vv = (x.repeat_interleave(G, 1) for x in r_in[1:])
    s = (r_in[0] @ kk.transpose(-1, -2) / d**0.5).masked_fill(~allowed, float("-inf"))
    r = torch.softmax(s, -1) @ vv
    refs = [r.detach()] + list(torch.autograd.grad(r, r_in, do.double()))
    y_in = [t.detach().requires_grad_() for t in ins]
    y = selected_torch(*y_in, sel, blk)
    yard = [y.detach()] + list(torch.autograd.grad(y, y_in, do))
    ok, checks = _compare(["out", "dq", "dk", "dv"], ours, refs, yard, case.dtype)
    return {"ok": ok, "checks": checks, "yardstick": "selected_torch (block-sparse PyTorch, fp32)"}


def run_case(case, device, attn_fn) -> dict:
    """One isolated case -> record with ``status`` "passed" / "FAILED" / "skipped"."""
    rec = {"name": case.name}
    if case.skip:
        return {**rec, "status": "skipped", "reason": case.skip}
    t0 = time.perf_counter()
    try:
        res = run_attention_case(case, device, attn_fn) if isinstance(case, AttnCase) else run_op_case(case, device)
        rec.update(res)
        rec["status"] = "passed" if res["ok"] else "FAILED"
    except Exception as e:  # noqa: BLE001 - one broken case is a failed record, the report goes on
        rec.update(
            status="FAILED",
            error=f"{type(e).__name__}: {str(e)[:500]}",
            where=traceback.format_exc().strip().splitlines()[-3:],
        )
    finally:
        if torch.device(device).type == "cuda":
            torch.cuda.empty_cache()
    rec["seconds"] = round(time.perf_counter() - t0, 3)
    return rec


def _fmt(x):
    return f"{x:.2e}" if isinstance(x, float) else str(x)


def _worst(rec) -> str:
    checks = rec.get("checks") or []
    if rec.get("error"):
        return rec["error"][:120]
    if checks and "err" in checks[0]:
        worst = max(checks, key=lambda c: (c["err"] / c["tol"]) if c["tol"] and c["err"] == c["err"] else 1e9)
        return f"{worst['tensor']}: {_fmt(worst['err'])} (torch {_fmt(worst['torch_err'])}, tol {_fmt(worst['tol'])})"
    if checks:
        return (
            "bitwise equal"
            if rec["ok"]
            else "differs: " + ", ".join(c["tensor"] for c in checks if not c["bitwise_equal"])
        )
    return rec.get("reason", "")


def run(device, attn_fn=None, cases=None, log=print) -> tuple[dict, str]:
    """All cases (or ``cases``) -> (section data, Markdown)."""
    from kernels.triton.flash.launcher import flash_attention

    attn_fn = attn_fn or flash_attention
    gpu = torch.device(device).type == "cuda"
    cases = cases if cases is not None else attention_cases(gpu) + op_cases(gpu)
    t0 = time.perf_counter()
    records = []
    for case in cases:
        rec = run_case(case, device, attn_fn)
        records.append(rec)
        log(f"  correctness: {rec['status']:7s} {case.name} ({rec.get('seconds', 0)} s) {_worst(rec)}")
    counts = {s: sum(r["status"] == s for r in records) for s in ("passed", "FAILED", "skipped")}
    data = {
        "cases": records,
        "counts": counts,
        "seconds": time.perf_counter() - t0,
        "tolerance": "max(2 x torch's error, k eps(dtype) x max|ref|) against a float64 reference, "
        "k = 8 for fp32, 1 for fp16 / bf16",
    }
    rows = [[r["status"], r["name"], r.get("yardstick", "-"), _worst(r)] for r in records]
    md = (
        f"{counts['passed']} passed, {counts['FAILED']} failed, {counts['skipped']} skipped; "
        f"tolerance: {data['tolerance']}.\n\n"
        + md_table(["status", "case", "yardstick", "worst tensor: err (torch err, tol)"], rows)
    )
    return data, md
