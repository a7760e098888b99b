"""Forward time and measured memory of every attention choice against sequence length (CPU/GPU).

    python -m benchmarks.attention_choices                         # sliding_window (window 128) vs full, L = 1k..8k
    python -m benchmarks.attention_choices --all --json out.json   # every attention key (LRA-style table vs full)
    python -m benchmarks.attention_choices --sweep                 # the Latency tab's default sweep, 4 attentions

``--sweep`` measures what the Latency tab measures: ``explorer.analysis.cost.sweep.latency_memory_sweep`` of the
default model (4 layers, d_model 128, 4 heads; window 64, blocks of 16) at the tab's default lengths and
time budget, for full attention, sliding_window, longformer and bigbird. It prints the whole forward and
the attention alone inside it (``attn_ms``), each relative to full attention; the speed-up at 8192 tokens
against the 2x the structured patterns should reach there; and each attention's sweep wall time (the
tab's default sweep of a pattern is its wall time plus full attention's, the baseline). ``--lengths`` and
``--budget`` override the tab's lengths and per-run budget (e.g. ``--lengths 8192 --budget 30`` for the
2x check alone on a busy machine).

``--head-to-head N`` is the 2x check made for a shared machine: the four default models at 8192 tokens
(``--lengths`` to change it; several lengths give one table each) run round-robin, N forwards each, and
the table gives each one's fastest forward and fastest attention alone (other work only ever adds time,
so the minimum is the closest to the machine's own speed, and the round-robin exposes every attention to
the same interference), then the medians. ``--threads`` sets the intra-op threads (default: the app's).

Each row builds a one-layer model of the default width (d_model 128, 4 heads, causal unless the
mechanism is bidirectional-only), times the forward pass (median after warm-up) and measures the
peak memory the forward allocated (``kernels.tools.measure``: profiler allocator events on CPU,
``max_memory_allocated`` on CUDA). A length that runs out of memory or exceeds the time budget is
printed as OOM / timeout, and longer lengths of that row are skipped.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time

import torch

from kernels.tools.busy import BusyWatch
from kernels.tools.measure import measure_peak, median_ms
from models import ConfigError, ModelConfig, build_model, choices
from models.attention import ATTENTION


def bench_config(cfg: ModelConfig, L: int, device: str, budget_s: float) -> dict:
    try:
        cfg = cfg.replace(max_len=max(cfg.max_len, L))
        cfg.validate()
    except ConfigError as e:
        return {"status": "invalid", "reason": str(e)}
    model = build_model(cfg).to(device).eval()
    tokens = torch.randint(0, cfg.vocab_size, (1, L), device=device)
    try:
        with torch.no_grad():
            ms = median_ms(lambda: model(tokens), device, warmup=1, repeats=5, budget_s=budget_s)
            _, peak = measure_peak(lambda: model(tokens), device)
    except (torch.OutOfMemoryError, MemoryError) as e:
        return {"status": "oom", "reason": str(e).splitlines()[0]}
    except ConfigError as e:
        return {"status": "invalid", "reason": str(e)}
    status = "timeout" if ms / 1000.0 > budget_s else "ok"
    return {"status": status, "ms": ms, "peak_bytes": peak}


def _base(key: str) -> ModelConfig:
    causal = True in ATTENTION[key].caps.causal_modes  # causal unless the mechanism is bidirectional-only
    return ModelConfig(attention=key, causal=causal, n_layers=1, window=128, position="rope")


LENGTHS = "1024,2048,4096,8192"
SWEEP_KEYS = ("full", "sliding_window", "longformer", "bigbird")
TARGET_L, TARGET_X = 8192, 2.0  # the structured patterns at 8192 tokens: at least 2x faster than full


def sweep_rows(lengths, budget_s: float) -> tuple:
    """``(rows, wall seconds per attention)``: the Latency tab's sweep of the default model per key."""
    from explorer.analysis.cost.sweep import latency_memory_sweep

    rows, walls = [], {}
    for key in SWEEP_KEYS:
        t0 = time.perf_counter()
        recs = latency_memory_sweep(ModelConfig(attention=key), lengths, "forward", time_budget_s=budget_s)
        walls[key] = time.perf_counter() - t0
        rows += [{**r, "attention": key} for r in recs]
    return rows, walls


def head_to_head(L: int, rounds: int) -> dict:
    """``{key: ([forward ms], [attention-alone ms])}`` of the default model at ``L``, one entry per round: the
    keys' forwards run round-robin ``rounds`` times after one warm-up each."""
    from explorer.analysis.cost.core_timer import CoreTimer

    models = {key: build_model(ModelConfig(attention=key)).eval() for key in SWEEP_KEYS}
    tokens = torch.randint(0, 256, (1, L), generator=torch.Generator().manual_seed(0))
    times = {key: ([], []) for key in SWEEP_KEYS}
    with torch.no_grad():
        for model in models.values():
            model(tokens)  # one-time costs: lazy initialisation, the block-sparse layout and its plan
        for _ in range(rounds):
            for key, model in models.items():
                with CoreTimer(model, "cpu") as timer:
                    timer.reset()
                    t0 = time.perf_counter()
                    model(tokens)
                    whole = time.perf_counter() - t0
                    alone = timer.seconds()
                times[key][0].append(1000 * whole)
                times[key][1].append(1000 * alone)
    return times


def _print_head_to_head(times: dict, L: int, rounds: int):
    best = {key: (min(whole), min(alone)) for key, (whole, alone) in times.items()}
    mid = {key: (statistics.median(whole), statistics.median(alone)) for key, (whole, alone) in times.items()}
    f, fm = best["full"], mid["full"]
    print(
        f"Head to head at L={L}: default model, forward, {torch.get_num_threads()} thread(s), fastest of {rounds} "
        "round-robin runs each"
    )
    print(f"{'attention':16s}{'forward ms':>12s}{'x full':>8s}{'attention ms':>14s}{'x full':>8s}")
    for key, (whole, alone) in best.items():
        print(f"{key:16s}{whole:12.0f}{f[0] / whole:8.2f}{alone:14.0f}{f[1] / alone:8.2f}")
    print(
        "medians of the same runs: "
        + ", ".join(
            f"{key} {whole:.0f} ms (x{fm[0] / whole:.2f}) | {alone:.0f} ms (x{fm[1] / alone:.2f})"
            for key, (whole, alone) in mid.items()
        )
    )
    for key in SWEEP_KEYS[1:]:
        fwd, alone = f[0] / best[key][0], f[1] / best[key][1]
        print(
            f"{key} at L={L}: forward {fwd:.2f}x, attention alone {alone:.2f}x faster than full "
            f"(at least {TARGET_X:g}x: {'yes' if min(fwd, alone) >= TARGET_X else 'NO'})"
        )


def _print_sweep(rows, lengths, walls):
    full = {r["seq_len"]: r for r in rows if r["attention"] == "full" and r["status"] == "ok"}
    first = next((r for r in rows if r["status"] == "ok"), {})
    print(
        f"Latency tab sweep, default model, forward, {first.get('threads', '?')} thread(s), {first.get('device', '?')}"
    )
    print(f"{'attention':16s}" + "".join(f"{'L=' + str(L):>27s}" for L in lengths) + f"{'sweep s':>9s}")
    for key in SWEEP_KEYS:
        cells = []
        for L in lengths:
            r = next(r for r in rows if r["attention"] == key and r["seq_len"] == L)
            if r["status"] != "ok":
                cells.append(f"{r['status'].upper():>27s}")
                continue
            f = full.get(L)
            rel = f" x{f['ms'] / r['ms']:.1f}" if f and key != "full" else ""
            rel_a = f" x{f['attn_ms'] / r['attn_ms']:.1f}" if f and key != "full" and r.get("attn_ms") else ""
            cells.append(f"{r['ms']:7.0f}{rel:>6s} |{r.get('attn_ms') or 0:7.0f}{rel_a:>6s}")
        print(f"{key:16s}" + "".join(cells) + f"{walls[key]:9.1f}")
    print(
        "cell: whole forward ms (xN: full's time / this one's) | the attention alone inside it, ms (xN likewise); "
        "a word: that length's status (full stops at its time budget)"
    )
    f = full.get(TARGET_L)
    for key in SWEEP_KEYS[1:]:
        r = next((r for r in rows if r["attention"] == key and r["seq_len"] == TARGET_L and r["status"] == "ok"), None)
        if r is None or f is None:
            print(f"{key} at L={TARGET_L}: not compared ({'full' if f is None else key} not measured there)")
            continue
        fwd, alone = f["ms"] / r["ms"], f["attn_ms"] / r["attn_ms"]
        ok = "yes" if min(fwd, alone) >= TARGET_X else "NO"
        print(
            f"{key} at L={TARGET_L}: forward {fwd:.2f}x, attention alone {alone:.2f}x faster than full "
            f"(at least {TARGET_X:g}x: {ok})"
        )
    for key in SWEEP_KEYS[1:]:
        print(f"Latency tab default sweep of {key} (with its full baseline): {walls[key] + walls['full']:.1f} s")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--all", action="store_true", help="every attention key, not just sliding_window vs full")
    ap.add_argument("--lengths", default=LENGTHS)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument(
        "--budget",
        type=float,
        default=None,
        help="seconds per measurement before 'timeout' (default 20; with --sweep the tab's budget)",
    )
    ap.add_argument("--json", help="write the table to this file")
    ap.add_argument(
        "--sweep",
        action="store_true",
        help="the Latency tab's sweep: full, sliding_window, longformer, bigbird, whole forward and attention alone",
    )
    ap.add_argument(
        "--head-to-head",
        type=int,
        metavar="N",
        help="the 2x check on a shared machine: full, "
        "sliding_window, longformer, bigbird round-robin N times at 8192 (or each of --lengths), "
        "fastest and median each",
    )
    ap.add_argument(
        "--threads",
        type=int,
        default=None,
        help="with --head-to-head: intra-op threads (default: the app's, EXPLORER_THREADS)",
    )
    args = ap.parse_args(argv)
    if args.head_to_head:
        from explorer.runtime.device import configure_threads

        configure_threads()  # the app's intra-op threads (EXPLORER_THREADS, default 1), as the sweep uses
        if args.threads:
            torch.set_num_threads(args.threads)
        for L in [TARGET_L] if args.lengths == LENGTHS else [int(x) for x in args.lengths.split(",")]:
            with BusyWatch() as watch:
                times = head_to_head(L, args.head_to_head)
            _print_head_to_head(times, L, args.head_to_head)
            print(watch.note())
        return
    if args.sweep:
        from explorer.analysis.cost.sweep import DEFAULT_LENGTHS
        from explorer.runtime.limits import SWEEP_BUDGET_S

        lengths = DEFAULT_LENGTHS if args.lengths == LENGTHS else [int(x) for x in args.lengths.split(",")]
        with BusyWatch() as watch:
            rows, walls = sweep_rows(lengths, SWEEP_BUDGET_S if args.budget is None else args.budget)
        _print_sweep(rows, lengths, walls)
        print(watch.note())
        if args.json:
            with open(args.json, "w") as f:
                json.dump(rows, f, indent=1)
        return
    lengths = [int(x) for x in args.lengths.split(",")]
    keys = choices()["attention"] if args.all else ["full", "sliding_window"]
    rows = []
    with BusyWatch() as watch:
        for key in keys:
            stopped = None
            for L in lengths:
                rec = (
                    {"status": stopped, "reason": "a shorter length already failed"}
                    if stopped
                    else bench_config(_base(key), L, args.device, 20.0 if args.budget is None else args.budget)
                )
                rec.update(attention=key, seq_len=L, device=args.device)
                rows.append(rec)
                if rec["status"] in ("oom", "timeout"):
                    stopped = rec["status"]
    _print(rows, lengths)
    print(watch.note())
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


def _print(rows, lengths):
    full = {r["seq_len"]: r for r in rows if r["attention"] == "full" and r["status"] == "ok"}
    print(f"{'attention':16s}" + "".join(f"{'L=' + str(L):>26s}" for L in lengths) + f"{'slope':>8s}")
    for key in dict.fromkeys(r["attention"] for r in rows):
        cells, pts = [], []
        for L in lengths:
            r = next(r for r in rows if r["attention"] == key and r["seq_len"] == L)
            if r["status"] != "ok":
                cells.append(f"{r['status']:>26s}")
                continue
            rel = f" x{r['ms'] / full[L]['ms']:.2f}" if L in full else ""
            cells.append(f"{r['ms']:9.1f} ms{rel:>7s} {r['peak_bytes'] / 2**20:6.0f}MiB")
            pts.append((L, r["ms"]))
        slope = ""
        if len(pts) >= 2:
            (l0, t0), (l1, t1) = pts[0], pts[-1]
            slope = f"{math.log(t1 / t0) / math.log(l1 / l0):.2f}"
        print(f"{key:16s}" + "".join(cells) + f"{slope:>8s}")
    print(
        "ms: median forward time; xN: relative to full; MiB: measured peak allocated by the forward; "
        "slope: log-log growth of time (1 = linear, 2 = quadratic)"
    )


if __name__ == "__main__":
    main()
