"""Ahead-of-time compile every Triton kernel specialisation the app can launch, for sm_80 and sm_90.

No GPU is needed: ``triton.compile(ASTSource(...), target=GPUTarget("cuda", cc, 32))`` runs the whole
pipeline down to a cubin with the ptxas bundled in the triton wheel. For each kernel we print the
shared memory (compiled metadata) and registers / spills (``cuobjdump --dump-resource-usage`` on
the cubin) and exit non-zero if anything fails to compile or exceeds the target's shared memory
per block. Run with TRITON_INTERPRET unset:

    python -m kernels.aot_check [--quick] [--jobs 2]
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor

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
    import torch
    from .flash_attention import DTYPES, HEAD_DIMS, unsupported_reason
    from .flash_bwd import _attn_bwd_dkdv, _attn_bwd_dq, _attn_bwd_preprocess
    from .flash_common import BWD_DENSE_CONFIGS, FWD_DENSE_CONFIGS, SPARSE_CONFIGS, prune_configs
    from .flash_fwd import _attn_fwd

    specs = []
    dtypes = (torch.float16,) if quick else DTYPES
    dims = (64,) if quick else HEAD_DIMS
    for dtype in dtypes:
        for d in dims:
            q = torch.empty(1, 1, 1, d, dtype=dtype, device="meta")
            if unsupported_reason(q, q, q) is not None:
                continue  # the launcher refuses it, so the app never launches it
            tt = TORCH_TO_TT[str(dtype).split(".")[1]]
            io = {n: "*" + tt for n in ("Q", "K", "V", "O", "DO", "DQ", "DK", "DV")}
            aux = {n: "*fp32" for n in ("LSE", "DELTA", "SLOPES", "RELB", "DRB")}
            lay = {n: "*i32" for n in ("KV_CNT", "KV_IDX", "KV_TILE", "Q_CNT", "Q_IDX", "Q_TILE")}
            ptrs = {**io, **aux, **lay, "TILES": "*i8"}
            esize = dtype.itemsize
            if not quick:
                specs.append((f"bwd_preprocess {tt} d{d}", _attn_bwd_preprocess, ptrs,
                          {"HEAD_DIM": d, "BLOCK_M": 64}, 4, 2))
            for sparse in (False, True):
                for fn, configs, bwd in ((_attn_fwd, FWD_DENSE_CONFIGS, False),
                                         (_attn_bwd_dkdv, BWD_DENSE_CONFIGS, True),
                                         (_attn_bwd_dq, BWD_DENSE_CONFIGS, True)):
                    configs = prune_configs(SPARSE_CONFIGS if sparse else configs, d, esize, bwd)
                    if quick and not (sparse and fn is not _attn_bwd_dkdv):
                        continue  # quick: the block-sparse forward and dq kernels
                    if quick:
                        configs = configs[:1]
                    for cfg in configs:
                        consts = {"HEAD_DIM": d, "SPARSE": sparse, "IEEE": dtype == torch.float32,
                                  **cfg.kwargs}
                        name = (f"{fn.__name__} {tt} d{d} {'sparse' if sparse else 'dense'} "
                                f"{cfg.kwargs['BLOCK_M']}x{cfg.kwargs['BLOCK_N']} "
                                f"w{cfg.num_warps} s{cfg.num_stages}")
                        specs.append((name, fn, ptrs, consts, cfg.num_warps, cfg.num_stages))
    return specs


def _small_kernel_specs(quick: bool):
    """RoPE, norms and linear attention: each module lists its own launchable specialisations."""
    from . import linear_attention, norms, rope
    specs = []
    for mod in (rope, norms, linear_attention):
        # quick: one specialisation of each small kernel module
        specs.extend(mod.aot_specs(quick)[:1] if quick else mod.aot_specs(quick))
    return specs


def _resource_usage(cubin: bytes) -> tuple[int, int]:
    """(registers, spill bytes) from cuobjdump; (-1, -1) if the tool is unavailable."""
    import triton
    tool = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        try:
            out = subprocess.run([tool, "--dump-resource-usage", f.name], capture_output=True,
                                 text=True, timeout=60).stdout
        except (OSError, subprocess.SubprocessError):
            return -1, -1
    regs = re.search(r"REG:(\d+)", out)
    spill = re.search(r"STACK:(\d+)", out)
    return (int(regs.group(1)) if regs else -1), (int(spill.group(1)) if spill else -1)


def _compile(job):
    name, fn_ref, ptrs, consts, warps, stages, cc = job
    import importlib
    import triton
    mod, attr = fn_ref  # JIT functions are imported in the worker (they do not pickle)
    fn = getattr(importlib.import_module(mod), attr)
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    t0 = time.perf_counter()
    try:
        sig = _signature(fn, ptrs, consts)
        # Pointers from torch are 16-byte aligned: tell the compiler, as the JIT launcher does.
        attrs = {(i,): [["tt.divisibility", 16]] for i, n in enumerate(fn.arg_names) if n in ptrs}
        src = ASTSource(fn=fn, signature=sig, constexprs=consts, attrs=attrs)
        k = triton.compile(src, target=GPUTarget("cuda", cc, 32),
                           options={"num_warps": warps, "num_stages": stages})
        regs, stack = _resource_usage(k.asm["cubin"])
        return name, cc, k.metadata.shared, regs, stack, time.perf_counter() - t0, None
    except Exception as e:  # report every failure, keep compiling the rest
        return name, cc, -1, -1, -1, time.perf_counter() - t0, f"{type(e).__name__}: {e}"[:400]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="compile a representative subset")
    ap.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1))
    args = ap.parse_args(argv)
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        print("aot_check: unset TRITON_INTERPRET (ASTSource needs real JIT functions)")
        return 2
    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    specs = _flash_specs(args.quick) + _small_kernel_specs(args.quick)
    jobs = [(name, (fn.fn.__module__, fn.fn.__name__), ptrs, consts, w, st, cc)
            for cc in SMEM_LIMIT for name, fn, ptrs, consts, w, st in specs]
    t0 = time.perf_counter()
    failed = 0
    print(f"{'kernel':58s} {'sm':>3s} {'smem':>8s} {'regs':>5s} {'stack':>5s} {'sec':>6s}")
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        for name, cc, smem, regs, stack, sec, err in pool.map(_compile, jobs):
            status = ""
            if err is not None:
                status = f"FAILED {err}"
            elif smem > SMEM_LIMIT[cc]:
                status = f"FAILED shared memory {smem} > {SMEM_LIMIT[cc]}"
            failed += bool(status)
            print(f"{name:58s} {cc:3d} {smem:8d} {regs:5d} {stack:5d} {sec:6.1f} {status}", flush=True)
    print(f"{len(jobs)} compilations, {failed} failed, {time.perf_counter() - t0:.0f} s "
          f"with {args.jobs} processes")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
