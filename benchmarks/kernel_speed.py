"""Attention kernel benchmark: ms and TFLOP/s against sequence length, per pattern and provider.

    python -m benchmarks.kernel_speed                                   # every pattern / provider, fwd and fwd+bwd
    python -m benchmarks.kernel_speed --mode fwd --json /tmp/bench.json # forward only, records as JSON
    python -m benchmarks.kernel_speed --lengths 1024,4096 --patterns sliding_window --providers ours,flex

Patterns (all causal; ``benchmarks/kernel_providers.py``): ``full``; ``sliding_window`` (window 256);
``bigbird`` (the catalogue's BigBird: window 256, 2 global tokens, 2 random 64-blocks per query
block, seed 0); ``longformer`` (window 256, 2 global tokens). Providers:
  ours  ``kernels.attention`` with the pattern's ``BlockMask`` (for ``full`` the dense causal call
        the models make); the backend that ran is reported (``kernels.attention_backend``).
  sdpa  ``scaled_dot_product_attention(is_causal=True)`` (flash backend forced on CUDA): dense causal.
        For the sparse patterns it is the dense baseline the pattern is compared with, not the pattern.
  flex  ``torch.compile(flex_attention, dynamic=False)`` with ``create_block_mask`` of the same pattern
        (BLOCK_SIZE 128). FlexAttention has no CPU backward: those cells are "n/a".
  ref   ``kernels.attention_ref``, dense; "skipped" when one fp32 score matrix exceeds ``--ref-max-gb``.
Shape: on CPU B=1, h=8, d=64 (``--batch/--heads/--dim``); on CUDA the FlashAttention papers' shape,
``--tokens 16384`` in total (B = 16384 / L), h = 16, d = 128, so the figures compare with published
ones. fp32 on CPU, bf16 on CUDA (``--dtype``). On CUDA ``sdpa`` is forced to the flash backend
(``torch.nn.attention.sdpa_kernel``) and says so.

Timing: masks, layouts and compilation are set up outside the timing; one
warm-up run (two for compiled providers, the first compiles). On CPU the median of ``--repeats``
runs, taken round-robin over the providers of one pattern and length so a slow spell of a shared
machine cannot favour one of them (``kernels.tools.measure.interleaved_ms``, ``time.perf_counter``). On
CUDA ``triton.testing.do_bench`` (median of runs enqueued back to back between CUDA events, no host
synchronisation between them, L2 flushed before each), so a short length measures the kernel and
not the launch. The table title says which timer ran. The full GPU report (correctness, syncs,
targets): ``python -m benchmarks.gpu_report``. A cell whose
first run exceeds ``--budget`` seconds is "timeout", out of memory is "oom"; longer lengths of that
pattern / provider / mode are then "skipped". FLOPs: see ``benchmarks/kernel_providers.py``
(block-sparse providers count the tiles they visit; backward = 2.5x forward). ``flex`` and ``ref``
outputs (and in ``fwd_bwd`` the gradients of q, k, v too) are checked against ours: ``max_diff``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import torch

from benchmarks.kernel_providers import BWD_FACTOR, PATTERNS, PROVIDERS, Unavailable, prepare
from kernels.tools.busy import BusyWatch
from kernels.tools.measure import interleaved_ms, synchronizer, timer_name

CPU_LENGTHS = "1024,2048,4096,8192,16384"
GPU_LENGTHS = "1024,2048,4096,8192,16384,32768"
MODES = {"fwd": ("fwd",), "fwd_bwd": ("fwd_bwd",), "both": ("fwd", "fwd_bwd")}


def _is_oom(e: BaseException) -> bool:
    if isinstance(e, (torch.OutOfMemoryError, MemoryError)):
        return True
    msg = str(e).lower()
    return isinstance(e, RuntimeError) and ("out of memory" in msg or "can't allocate memory" in msg)


def _first_line(e: BaseException) -> str:
    lines = [s for s in str(e).strip().splitlines() if s.strip()]
    return f"{type(e).__name__}: {lines[0][:160] if lines else ''}"


def _work(fn, mode, q, k, v):
    """The timed closure: forward without autograd, or forward + backward of all of q, k, v."""
    if mode == "fwd":

        def run():
            with torch.no_grad():
                return fn(q, k, v)

        return run
    qg, kg, vg = (t.detach().clone().requires_grad_(True) for t in (q, k, v))
    grad = torch.randn(q.shape, generator=torch.Generator().manual_seed(1)).to(q.device, q.dtype)

    def run():
        out = fn(qg, kg, vg)
        return (out, *torch.autograd.grad(out, (qg, kg, vg), grad))  # compared across providers

    return run


def first_run(prep, mode, q, k, v, budget_s):
    """``(status, run, out)`` of one cell's untimed set-up: compile (compiled providers) and one
    warm-up run, which also decides "timeout". Raises :class:`Unavailable` when a compile fails."""
    run = _work(prep.fn, mode, q, k, v)
    sync = synchronizer(q.device)
    if prep.compiles:
        try:
            run()  # compiles; not timed
        except Exception as e:  # noqa: BLE001 - any compiler failure means the provider cannot run here
            if _is_oom(e):
                raise
            raise Unavailable(_first_line(e)) from e
    t0 = time.perf_counter()
    out = run()
    sync()
    if time.perf_counter() - t0 > budget_s:
        return "timeout", None, out
    return "ok", run, out


def sweep(args, log=print):
    """Run every (pattern, L, provider, mode) cell; returns the list of records."""
    device, dtype = torch.device(args.device), getattr(torch, args.dtype)
    h, d = args.heads, args.dim
    modes = MODES[args.mode]
    stopped = {}  # (pattern, provider, mode) -> why longer lengths are skipped
    unavailable = {}  # provider -> reason
    records = []
    for pattern in args.patterns:
        for L in args.lengths:
            B = max(1, args.tokens // L) if args.tokens else args.batch
            gen = torch.Generator().manual_seed(0)
            q, k, v = (torch.randn(B, h, L, d, generator=gen).to(device, dtype) for _ in range(3))
            ours_out = {}  # mode -> ours' output (and gradients), what the others are checked against
            timed = []  # (record, run): cells that passed their first run, timed together below
            cells = []
            for provider in args.providers:
                prep, prep_status = None, None
                if provider not in unavailable and all((pattern, provider, m) in stopped for m in modes):
                    prep_status = "skipped"
                elif provider not in unavailable:
                    try:
                        prep = prepare(provider, pattern, q, args.ref_max_gb * 2**30)
                    except Unavailable as e:
                        unavailable[provider] = str(e)
                    except Exception as e:  # noqa: BLE001 - a failing set-up is a table cell, not a crash
                        prep_status = "oom" if _is_oom(e) else f"error: {_first_line(e)}"
                for mode in modes:
                    rec = {
                        "pattern": pattern,
                        "provider": provider,
                        "backend": prep.backend if prep else None,
                        "mode": mode,
                        "L": L,
                        "ms": None,
                        "tflops": None,
                        "status": None,
                        "B": B,
                        "h": h,
                        "d": d,
                        "device": device.type,
                        "dtype": args.dtype,
                        "flops": None,
                        "max_diff": None,
                    }
                    key = (pattern, provider, mode)
                    if provider in unavailable:
                        rec["status"] = f"unavailable: {unavailable[provider]}"
                    elif key in stopped:
                        rec["status"], rec["reason"] = "skipped", stopped[key]
                    elif prep is None:
                        rec["status"] = prep_status
                    elif prep.status is not None:
                        rec["status"] = prep.status
                    elif mode == "fwd_bwd" and not prep.backward:
                        rec["status"] = "n/a"
                    else:
                        rec["flops"] = prep.flops_fwd * (1.0 if mode == "fwd" else 1.0 + BWD_FACTOR)
                        try:
                            rec["status"], run, out = first_run(prep, mode, q, k, v, args.budget)
                            out = out if isinstance(out, tuple) else (out,)
                            if provider == "ours" and mode not in ours_out:
                                ours_out[mode] = [t.detach() for t in out]
                            elif mode in ours_out and prep.same_pattern and provider != "ours":
                                rec["max_diff"] = max(
                                    float((a.detach().float() - b.float()).abs().max())
                                    for a, b in zip(out, ours_out[mode])
                                )
                            del out
                            if run is not None:
                                timed.append((rec, run))
                        except Unavailable as e:
                            unavailable[provider] = str(e)
                            rec["status"] = f"unavailable: {e}"
                        except Exception as e:  # noqa: BLE001 - OOM or a failing kernel is a table cell
                            rec["status"] = "oom" if _is_oom(e) else f"error: {_first_line(e)}"
                    if rec["status"] in ("timeout", "oom"):
                        stopped[key] = f"{rec['status']} at L={L}"
                    cells.append(rec)
            try:
                for (rec, _), ms in zip(timed, _time_cells([r for _, r in timed], device, args)):
                    rec["ms"], rec["tflops"] = ms, rec["flops"] / (ms / 1e3) / 1e12
            except Exception as e:  # noqa: BLE001 - a run that passed once and then fails is a cell
                for rec, _ in timed:
                    if rec["ms"] is None:
                        rec["status"] = "oom" if _is_oom(e) else f"error: {_first_line(e)}"
            del timed
            for rec in cells:
                records.append(rec)
                log(f"[{rec['mode']}] {pattern} L={L} {rec['provider']}: {_cell(rec)}", file=sys.stderr, flush=True)
                _warn_diff(rec, log)
    return records


def _time_cells(runs, device, args) -> list:
    """Median ms per closure: back to back with L2 flushes on CUDA (do_bench), round-robin on CPU."""
    if device.type == "cuda":
        from benchmarks.gpu_report.speed import bench_ms

        return [bench_ms(run, quick=args.repeats < 5) for run in runs]
    return interleaved_ms(runs, device, args.repeats, args.budget)


def _warn_diff(rec, log):
    tol = 1e-3 if rec["dtype"] == "float32" else 3e-2
    if rec["max_diff"] is not None and rec["max_diff"] > tol:
        log(
            f"WARNING: {rec['provider']} differs from ours on {rec['pattern']} L={rec['L']} by {rec['max_diff']:.2e}",
            file=sys.stderr,
            flush=True,
        )


def _fmt_ms(ms: float) -> str:
    return f"{ms:.0f}" if ms >= 100 else f"{ms:.1f}" if ms >= 10 else f"{ms:.2f}"


def _cell(rec) -> str:
    if rec["status"] == "ok":
        return f"{_fmt_ms(rec['ms'])} ({rec['tflops']:.3f})"
    return rec["status"].split(":")[0]


def format_table(records, mode) -> str:
    """One readable table: a row per (pattern, provider), a column per L, cells "ms (TFLOP/s)"."""
    recs = [r for r in records if r["mode"] == mode]
    if not recs:
        return ""
    lengths = sorted({r["L"] for r in recs})
    rows = {}
    for r in recs:
        row = rows.setdefault((r["pattern"], r["provider"]), {"backend": None})
        row["backend"] = row["backend"] or r["backend"]
        row[r["L"]] = _cell(r)
    r0 = recs[0]
    head = ["pattern", "provider", "backend"] + [f"L={L}" for L in lengths]
    body = [[p, pr, row["backend"] or "-"] + [row.get(L, "") for L in lengths] for (p, pr), row in rows.items()]
    widths = [max(len(str(x[i])) for x in [head] + body) for i in range(len(head))]

    def line(cells):
        return "  ".join(str(c).ljust(w) if i < 3 else str(c).rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))

    batch = f"B={r0['B']}" if len({r["B"] for r in recs}) == 1 else "B=tokens/L"
    timer = "do_bench (CUDA events, back to back, L2 flushed)" if r0["device"] == "cuda" else timer_name(r0["device"])
    title = (
        f"== {mode}: ms (TFLOP/s), {batch} h={r0['h']} d={r0['d']} {r0['dtype']} on {r0['device']} "
        f"({torch.get_num_threads()} threads), timed with {timer} =="
    )
    out = [title, line(head)] + [line(b) for b in body]
    notes = sorted({r["status"] for r in recs if r["status"].startswith(("unavailable", "error"))})
    out += [f"  note: {n}" for n in notes]
    if any(r["provider"] == "sdpa" and r["pattern"] != "full" for r in recs):
        out.append("  note: sdpa rows of sparse patterns run dense causal attention: the baseline, not the pattern")
    return "\n".join(out)


def _ratio(other, ours) -> str:
    if other is None or other["status"] != "ok":
        return f"n/a ({other['status'].split(':')[0] if other else 'not run'})"
    r = other["ms"] / ours["ms"]
    return f"{r:.1f}x faster" if r >= 1 else f"{1 / r:.1f}x slower"


def summary_lines(records, mode) -> list:
    """Per pattern, at the largest L where ours ran: ours against SDPA causal and against flex."""
    lines = []
    for pattern in dict.fromkeys(r["pattern"] for r in records):
        ok = [
            r
            for r in records
            if r["mode"] == mode and r["pattern"] == pattern and r["provider"] == "ours" and r["status"] == "ok"
        ]
        if not ok:
            continue
        ours = max(ok, key=lambda r: r["L"])
        at = {
            r["provider"]: r for r in records if r["mode"] == mode and r["pattern"] == pattern and r["L"] == ours["L"]
        }
        lines.append(
            f"{pattern} ({mode}, L={ours['L']}): ours vs SDPA causal: {_ratio(at.get('sdpa'), ours)}; "
            f"ours vs flex: {_ratio(at.get('flex'), ours)}"
        )
    return lines


def _csv(kind, valid=None):
    def parse(s):
        items = [kind(x) for x in s.split(",") if x.strip()]
        bad = [x for x in items if valid is not None and x not in valid]
        if bad or not items:
            raise argparse.ArgumentTypeError(f"{bad or s!r}: expected a comma list of {list(valid or [])}")
        return items

    return parse


def parse_args(argv=None):
    ap = argparse.ArgumentParser(
        prog="python -m benchmarks.kernel_speed",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    cuda = torch.cuda.is_available()
    ap.add_argument("--lengths", type=_csv(int), default=None, help=f"CPU default {CPU_LENGTHS}; GPU {GPU_LENGTHS}")
    ap.add_argument("--patterns", type=_csv(str, PATTERNS), default=list(PATTERNS))
    ap.add_argument("--providers", type=_csv(str, PROVIDERS), default=list(PROVIDERS))
    ap.add_argument("--mode", choices=list(MODES), default="both")
    ap.add_argument("--repeats", type=int, default=5, help="timed runs per cell (median)")
    ap.add_argument("--budget", type=float, default=30.0, help="seconds per cell before 'timeout'")
    ap.add_argument("--ref-max-gb", type=float, default=1.0, help="skip ref above this fp32 score-matrix size")
    ap.add_argument("--device", default="cuda" if cuda else "cpu")
    ap.add_argument("--dtype", choices=["float32", "bfloat16", "float16"], default=None)
    ap.add_argument("--batch", type=int, default=1, help="batch when --tokens is 0")
    ap.add_argument(
        "--tokens",
        type=int,
        default=None,
        help="tokens per batch (B = tokens / L); CUDA default 16384, CPU default 0 (use --batch)",
    )
    ap.add_argument("--heads", type=int, default=None, help="CPU default 8; CUDA 16 (h d = 2048)")
    ap.add_argument("--dim", type=int, default=None, help="CPU default 64; CUDA 128")
    ap.add_argument("--json", help="write the records (list of dicts) to this file")
    args = ap.parse_args(argv)
    on_gpu = torch.device(args.device).type == "cuda"
    args.lengths = args.lengths or _csv(int)(GPU_LENGTHS if on_gpu else CPU_LENGTHS)
    args.dtype = args.dtype or ("bfloat16" if on_gpu else "float32")
    args.tokens = (16384 if on_gpu else 0) if args.tokens is None else args.tokens
    args.heads = args.heads or (16 if on_gpu else 8)
    args.dim = args.dim or (128 if on_gpu else 64)
    return args


def main(argv=None):
    args = parse_args(argv)
    print(
        f"benchmarks.kernel_speed: torch {torch.__version__}, {args.device}, {torch.get_num_threads()} threads "
        "(how busy the machine was: the last line)",
        flush=True,
    )
    with BusyWatch() as watch:
        records = sweep(args)
    for mode in MODES[args.mode]:
        print()
        print(format_table(records, mode))
        for line in summary_lines(records, mode):
            print(line)
    print(watch.note())
    if args.json:
        with open(args.json, "w") as f:
            json.dump(records, f, indent=1)
        print(f"\nwrote {len(records)} records to {args.json}")
    return records


if __name__ == "__main__":
    main()
