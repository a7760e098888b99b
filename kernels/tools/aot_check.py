"""Ahead-of-time compile every Triton kernel specialisation the app can launch, for sm_80 and sm_90.

No GPU is needed: ``triton.compile(ASTSource(...), target=GPUTarget("cuda", cc, 32))`` runs the whole
pipeline down to a cubin with the ptxas bundled in the triton wheel. For each kernel we print the
shared memory (compiled metadata) and registers / spill (stack frame) bytes (``cuobjdump
--dump-resource-usage`` on the cubin) and exit non-zero if anything fails to compile or exceeds
the target's shared memory per block. Run with TRITON_INTERPRET unset:

    python -m kernels.tools.aot_check [--quick | --stamp] [--jobs 2] [--only REGEX] [--cache]

``--quick``: a smoke compile of each kernel once (its fp16 / d64 / block-sparse variant where it has
those), seconds instead of minutes. ``--stamp``: the full check, then, if it passes, the digest of
the compiled sources in ``kernels/tools/aot_stamp.txt`` (``kernels/tools/aot_stamp.py``; the test
suite runs the full check only when that stamp is stale). Run it after changing a kernel and commit
the stamp with the change.

What "every specialisation" means: the constexpr variants and lookup-table tiles each kernel
module lists (flash attention: ``_flash_specs``; the others, NSA's selected-block kernels included:
their ``aot_specs``), compiled with the argument attributes the JIT launcher derives for contiguous
tensors (16-byte aligned pointers, strides multiples of 16). Sizes and run-time flags are marked
``do_not_specialize`` in the kernels, so they add no variants. By default a fresh triton cache is used, so everything
really compiles; slow jobs start first so both workers stay busy to the end.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor, as_completed

from . import aot_stamp

# Before triton is imported (also in the workers): fuse multiply-adds like the JIT default does,
# and say so explicitly so triton does not warn about the unset knob.
os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
# No line tables: ~20% less LLVM / ptxas time; registers, spills and shared memory are unchanged
# (line info only annotates the cubin).
os.environ.setdefault("TRITON_DISABLE_LINE_INFO", "1")

SMEM_LIMIT = {80: 163 * 1024, 90: 227 * 1024}
TORCH_TO_TT = {"float16": "fp16", "bfloat16": "bf16", "float32": "fp32"}
FLOAT_ARGS = {"scale", "softcap", "eps", "log2_base", "sign"}


def _signature(fn, ptrs: dict, consts: dict) -> dict:
    """Triton signature: constexprs, the given pointer types, fp32 for FLOAT_ARGS, i32 otherwise."""
    sig = {}
    for name in fn.arg_names:
        if name in consts:
            sig[name] = "constexpr"
        elif name in ptrs:
            sig[name] = ptrs[name]
        elif name in FLOAT_ARGS:
            sig[name] = "fp32"
        else:
            sig[name] = "i32"
    return sig


def _flash_specs(quick: bool):
    """Every flash-attention variant the launcher (kernels/triton/flash/launcher.py) can pick.

    Per dtype and head dim it accepts: the backward preprocess; forward, dK/dV and dQ kernels,
    each dense (the tile of the lookup in kernels/triton/flash/common.py) and block-sparse (every layout tile of
    ``GPU_LAYOUTS``), each with and without the fused score modifiers (``HAS_MOD``). ``causal``
    and the individual modifiers are run-time scalars, so they add no variants.
    """
    import torch

    from ..triton.flash.bwd import _attn_bwd_dkdv, _attn_bwd_dq, _attn_bwd_preprocess
    from ..triton.flash.common import DENSE_LAYOUT, dense_meta, drb_meta, sparse_meta
    from ..triton.flash.fwd import _attn_fwd
    from ..triton.flash.launcher import DTYPES, GPU_LAYOUTS, HEAD_DIMS, unsupported_reason

    specs = []
    for dtype in (torch.float16,) if quick else DTYPES:
        for d in (64,) if quick else HEAD_DIMS:
            q = torch.empty(1, 1, 1, d, dtype=dtype, device="meta")
            if unsupported_reason(q, q, q) is not None:
                continue  # the launcher refuses it, so the app never launches it
            tt = TORCH_TO_TT[str(dtype).split(".")[1]]
            io = {n: "*" + tt for n in ("Q", "K", "V", "O", "DO", "DQ", "DK", "DV")}
            aux = {n: "*fp32" for n in ("LSE", "DELTA", "SLOPES", "RELB", "SINKS", "DRB")}
            lay = {"LAY": "*i32"}
            # Strides of contiguous [B, h, L, d] tensors (and of views such as a transposed
            # [B, L, h, d]) are multiples of d, hence of 16: the JIT launcher specialises them as
            # such, and so do we (it is what lets loads vectorise).
            strides = {
                "s" + t + a: "i32" for t in ("q", "k", "v", "o", "do", "dk", "dq") for a in ("s", "b", "h", "m", "n")
            }
            ptrs = {**io, **aux, **lay, "TILES": "*i8", **strides}
            specs.append(
                (f"bwd_preprocess {tt} d{d}", _attn_bwd_preprocess, ptrs, {"HEAD_DIM": d, "BLOCK_M": 64}, 4, 2)
            )
            for fn, bwd, kern in (
                (_attn_fwd, False, "fwd"),
                (_attn_bwd_dkdv, True, "dkdv"),
                (_attn_bwd_dq, True, "dq"),
            ):
                for sparse in (False, True):
                    for has_mod in (False, True):
                        if sparse:
                            metas = []
                            for bq, bk in GPU_LAYOUTS:  # every layout tile the launcher runs
                                meta = sparse_meta(d, dtype.itemsize, bq, bk, kern, has_mod)
                                metas.append(
                                    (
                                        {k: meta[k] for k in ("BLOCK_M", "BLOCK_N", "BQ", "BK")},
                                        meta["num_warps"],
                                        meta["num_stages"],
                                    )
                                )
                        else:
                            meta = dense_meta(d, dtype.itemsize, bwd, has_mod)
                            metas = [
                                (
                                    {"BLOCK_M": meta["BLOCK_M"], "BLOCK_N": meta["BLOCK_N"], **DENSE_LAYOUT},
                                    meta["num_warps"],
                                    meta["num_stages"],
                                )
                            ]
                        if quick and (has_mod or not sparse):
                            continue  # quick: the plain block-sparse kernels
                        if fn is _attn_bwd_dq:  # NEED_DRB: d(rel_bias) wanted (modifiers only)
                            metas = [(m, w, st, False) for m, w, st in metas] + [
                                (drb_meta(m), w, st, True) for m, w, st in metas if has_mod
                            ]
                        else:
                            metas = [(m, w, st, None) for m, w, st in metas]
                        for kw, warps, stages, need_drb in metas:
                            consts = {
                                "HEAD_DIM": d,
                                "SPARSE": sparse,
                                "HAS_MOD": has_mod,
                                "IEEE": dtype == torch.float32,
                                **kw,
                            }
                            if need_drb is not None:
                                consts["NEED_DRB"] = need_drb
                            blocks = f"/{kw['BQ']:d}x{kw['BK']:d}" if sparse else ""
                            name = (
                                f"{fn.__name__} {tt} d{d} {'sparse' if sparse else 'dense'}"
                                f"{' mod' if has_mod else ''}{' drb' if need_drb else ''}"
                                f" {kw['BLOCK_M']}x{kw['BLOCK_N']}"
                                f"{blocks}"
                                f" w{warps} s{stages}"
                            )
                            specs.append((name, fn, ptrs, consts, warps, stages))
    return specs


def _small_kernel_specs(quick: bool):
    """RoPE, norms, linear attention, pooled maps, NSA's selected blocks, Mamba-2's SSD and the gated delta rule: each
    Triton module lists its own launchable specialisations."""
    from ..triton import delta_rule, linear_attention, norms, pooled, rope, selected, ssd

    specs = []
    for mod in (rope, norms, linear_attention, pooled, selected, ssd, delta_rule):
        specs.extend(mod.aot_specs(quick))
    return specs


def all_specs(quick: bool):
    """Every specialisation the app can launch: flash attention's, then the small kernels'
    (``(name, jit function, pointer types, constexprs, warps, stages)``). ``quick``: each kernel
    (jit function) once, its first specialisation of the modules' representative subsets."""
    specs = _flash_specs(quick) + _small_kernel_specs(quick)
    if quick:
        first = {}
        for spec in specs:
            first.setdefault(spec[1], spec)
        specs = list(first.values())
    return specs


def _resource_usage(cubin: bytes) -> tuple[int, int]:
    """(registers, spill bytes) from cuobjdump; (-1, -1) if the tool is unavailable."""
    import triton

    tool = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        try:
            out = subprocess.run(
                [tool, "--dump-resource-usage", f.name], capture_output=True, text=True, timeout=60
            ).stdout
        except (OSError, subprocess.SubprocessError):
            return -1, -1
    regs = re.search(r"REG:(\d+)", out)
    spill = re.search(r"STACK:(\d+)", out)
    return (int(regs.group(1)) if regs else -1), (int(spill.group(1)) if spill else -1)


def compile_job(job):
    """Compile one job ``(name, (module, function), ptrs, consts, warps, stages, cc)`` in this process ->
    ``(name, cc, shared memory, registers, spill bytes, seconds, CPU seconds, error or None)``."""
    name, fn_ref, ptrs, consts, warps, stages, cc = job
    import importlib

    import triton

    mod, attr = fn_ref  # JIT functions are imported in the worker (they do not pickle)
    fn = getattr(importlib.import_module(mod), attr)
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    t0 = time.perf_counter()
    c0 = _cpu_seconds()
    try:
        sig = _signature(fn, ptrs, consts)
        # Pointers from torch are 16-byte aligned and strides multiples of 16: tell the compiler,
        # as the JIT launcher does.
        attrs = {(i,): [["tt.divisibility", 16]] for i, n in enumerate(fn.arg_names) if n in ptrs}
        src = ASTSource(fn=fn, signature=sig, constexprs=consts, attrs=attrs)
        k = triton.compile(src, target=GPUTarget("cuda", cc, 32), options={"num_warps": warps, "num_stages": stages})
        regs, stack = _resource_usage(k.asm["cubin"])
        return (name, cc, k.metadata.shared, regs, stack, time.perf_counter() - t0, _cpu_seconds() - c0, None)
    except Exception as e:  # report every failure, keep compiling the rest
        return (name, cc, -1, -1, -1, time.perf_counter() - t0, _cpu_seconds() - c0, f"{type(e).__name__}: {e}"[:400])


def _cpu_seconds() -> float:
    """CPU time of this process and its finished children (ptxas): load-independent cost."""
    import resource

    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def _cost(job) -> int:
    """Rough relative compile cost, to start the slowest jobs first (keeps both workers busy)."""
    name, _, _, consts, warps, _, cc = job
    flash = name.startswith("_attn_") and "preprocess" not in name
    return (
        (2 if flash else 1) * 1000
        + consts.get("HEAD_DIM", consts.get("MP", 0))
        + 100 * ("mod" in name)
        + 50 * ("fp32" in name)
        + (cc == 90)
    )


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true", help="a smoke compile: each kernel once per target")
    mode.add_argument(
        "--stamp", action="store_true", help="the full check; when it passes, record it in kernels/tools/aot_stamp.txt"
    )
    ap.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1))
    ap.add_argument("--only", default="", help="compile only kernels whose name matches this regex")
    ap.add_argument(
        "--cache",
        action="store_true",
        help="reuse triton's cache (default: a fresh one, so everything really compiles)",
    )
    args = ap.parse_args(argv)
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        print("aot_check: unset TRITON_INTERPRET (ASTSource needs real JIT functions)")
        return 2
    if args.stamp and args.only:
        print("aot_check: --stamp records a full pass; drop --only")
        return 2
    started_from = aot_stamp.digest()  # what a passing --stamp run records (edits during the run do not count)
    tmp = None
    if not args.cache:
        tmp = tempfile.TemporaryDirectory(prefix="aot_check_")
        os.environ["TRITON_CACHE_DIR"] = tmp.name
    specs = all_specs(args.quick)
    jobs = [
        (name, (fn.fn.__module__, fn.fn.__name__), ptrs, consts, w, st, cc)
        for cc in SMEM_LIMIT
        for name, fn, ptrs, consts, w, st in specs
        if re.search(args.only, name)
    ]
    jobs.sort(key=_cost, reverse=True)
    print(f"mode: {'quick' if args.quick else 'full'}{' (filtered)' if args.only else ''}", flush=True)
    t0 = time.perf_counter()
    rows = []
    cpu_total = 0.0
    header = f"{'kernel':58s} {'sm':>3s} {'smem':>8s} {'regs':>5s} {'spill':>5s} {'sec':>6s}"
    print(header, flush=True)
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        futures = [pool.submit(compile_job, job) for job in jobs]
        for fut in as_completed(futures):
            name, cc, smem, regs, stack, sec, cpu, err = fut.result()
            cpu_total += cpu
            status = ""
            if err is not None:
                status = f"FAILED {err}"
            elif smem > SMEM_LIMIT[cc]:
                status = f"FAILED shared memory {smem} > {SMEM_LIMIT[cc]}"
            rows.append((name, cc, smem, regs, stack, sec, status))
            print(f"{name:58s} {cc:3d} {smem:8d} {regs:5d} {stack:5d} {sec:6.1f} {status}", flush=True)
    wall = time.perf_counter() - t0
    failed = sum(bool(r[-1]) for r in rows)
    print("\nsorted by kernel (spill = stack frame bytes from cuobjdump, 0 = no spills):")
    print(header)
    for name, cc, smem, regs, stack, sec, status in sorted(rows):
        print(f"{name:58s} {cc:3d} {smem:8d} {regs:5d} {stack:5d} {sec:6.1f} {status}")
    spilling = sum(r[4] > 0 for r in rows)
    print(
        f"{len(jobs)} compilations, {failed} failed, {spilling} with spills, {wall:.0f} s wall "
        f"with {args.jobs} processes; {cpu_total:.0f} CPU s in the compilations "
        f"(~{cpu_total / max(1, args.jobs):.0f} s wall on {args.jobs} idle cores)"
    )
    if tmp is not None:
        tmp.cleanup()
    if args.stamp and not failed:
        aot_stamp.write(started_from)
        print(f"stamp written: {aot_stamp.STAMP}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
