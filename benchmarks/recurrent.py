"""Recurrent mixers on this CPU: the chunked scans against the plain recurrence and full attention, and the
pooled implicit maps of a 16-head model at 16k tokens.

    python -m benchmarks.recurrent [--length 16384] [--threads 1,2] [--json out.json]

``kernels`` (per thread count, one process, so the ratios compare runs under the same load): at ``L`` tokens,
one sequence of 16 heads, the forward of
- Mamba-2's SSD (``kernels.ssd``, head width P = 32, state N = 16, one group, chunk 64) and the gated delta rule
  (``kernels.gated_delta_rule``, d_k = d_v = 32, chunk 64): the chunked algorithm;
- the same recurrences token by token (``ssd_step`` / ``gated_delta_step``: what decoding runs; on the CPU the
  plain recurrence of the tests, in float32), timed on the first ``--recurrence-tokens`` tokens and scaled
  to ``L`` (it is linear in ``L``; the scaling is said on the line);
- causal full attention of the same heads and width (``kernels.attention``: SDPA here), quadratic in ``L``.

``pooled``: ``models.long_context.pooled_maps`` of a model of the app's default size (4 layers x 4 heads = 16
heads, d_model 128) built as Mamba-2, as Gated DeltaNet, and as a 3:1 Gated DeltaNet : full hybrid, at ``L``
tokens on one thread (the model's forward included), 256 x 256 cells per head. Target (the issue's): within
2 s, the sliding-window target of the long-context view. Weights are the build's random ones: the cost does not
depend on them. Times are medians of ``--repeats`` runs after a warm-up; the machine's other load is printed
(``kernels.tools.busy.BusyWatch``), a target missed on a busy machine reads "NO (busy)".
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from kernels import attention
from kernels.delta_rule import gated_delta_rule, gated_delta_step
from kernels.ssd import ssd, ssd_step
from kernels.tools.busy import BusyWatch

HEADS, WIDTH, STATE, CHUNK = 16, 32, 16, 64
POOLED_TARGET_S = 2.0


def _median(fn, repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _ssd_inputs(L: int, g: torch.Generator) -> tuple:
    x = torch.randn(1, HEADS, L, WIDTH, generator=g)
    dt = torch.nn.functional.softplus(torch.randn(1, HEADS, L, generator=g) - 2)
    a = -torch.rand(HEADS, generator=g) * 4 - 0.5
    b, c = torch.randn(1, 1, L, STATE, generator=g), torch.randn(1, 1, L, STATE, generator=g)
    return x, dt, a, b, c


def _delta_inputs(L: int, g: torch.Generator) -> tuple:
    q = torch.nn.functional.normalize(torch.randn(1, HEADS, L, WIDTH, generator=g), dim=-1) / WIDTH**0.5
    k = torch.nn.functional.normalize(torch.randn(1, HEADS, L, WIDTH, generator=g), dim=-1)
    v = torch.randn(1, HEADS, L, WIDTH, generator=g)
    beta = torch.rand(1, HEADS, L, generator=g)
    gate = -torch.rand(1, HEADS, L, generator=g) * 0.1
    return q, k, v, beta, gate


def _ssd_steps(inputs, n: int) -> None:
    x, dt, a, b, c = inputs
    state = torch.zeros(1, HEADS, WIDTH, STATE)
    for t in range(n):
        _, state = ssd_step(x[:, :, t], dt[:, :, t], a, b[:, :, t], c[:, :, t], state)


def _delta_steps(inputs, n: int) -> None:
    q, k, v, beta, gate = inputs
    state = torch.zeros(1, HEADS, WIDTH, WIDTH)
    for t in range(n):
        _, state = gated_delta_step(q[:, :, t], k[:, :, t], v[:, :, t], beta[:, :, t], gate[:, :, t], state)


def kernel_rows(L: int, threads: int, repeats: int, steps: int) -> list:
    torch.set_num_threads(threads)
    g = torch.Generator().manual_seed(0)
    rows = []
    with torch.no_grad():
        full_q = torch.randn(1, HEADS, L, WIDTH, generator=g)
        full = _median(lambda: attention(full_q, full_q, full_q, causal=True), repeats)
        for name, inputs, chunked, stepped in (
            ("mamba2 (SSD)", _ssd_inputs(L, g), lambda i: ssd(*i, chunk=CHUNK), _ssd_steps),
            ("gated delta rule", _delta_inputs(L, g), lambda i: gated_delta_rule(*i, chunk=CHUNK), _delta_steps),
        ):
            fast = _median(lambda: chunked(inputs), repeats)
            n = min(steps, L)
            loop = _median(lambda: stepped(inputs, n), 1) * L / n
            rows.append(
                dict(
                    mixer=name,
                    threads=threads,
                    length=L,
                    chunked_s=fast,
                    recurrence_s=loop,
                    recurrence_scaled_from=n,
                    full_attention_s=full,
                    vs_recurrence=loop / fast,
                    vs_full=full / fast,
                )
            )
    return rows


POOLED_MODELS = {
    "mamba2": dict(attention="mamba2", ffn="none", position="none"),
    "gated_deltanet": dict(attention="gated_deltanet", position="none"),
    "hybrid 3:1": dict(attention="gated_deltanet", layer_schedule="gated_deltanet*3,full", position="rope"),
}


def pooled_rows(L: int, repeats: int) -> list:
    from models import ModelConfig, build_model
    from models.long_context import pooled_maps

    torch.set_num_threads(1)
    tokens = torch.randint(0, 256, (1, L), generator=torch.Generator().manual_seed(1))
    rows = []
    for name, kw in POOLED_MODELS.items():
        cfg = ModelConfig(n_layers=4, d_model=128, n_heads=4, max_len=L, norm="rmsnorm", **kw)
        model = build_model(cfg).eval()
        with BusyWatch() as watch:
            seconds = _median(lambda: pooled_maps(model, tokens), repeats)
        ok = seconds <= POOLED_TARGET_S
        rows.append(
            dict(
                model=name,
                length=L,
                seconds=seconds,
                target_s=POOLED_TARGET_S,
                met="yes" if ok else ("NO (busy)" if watch.busy else "NO"),
                machine=watch.note(),
            )
        )
    return rows


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--length", type=int, default=16384)
    p.add_argument("--threads", default="1,2")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--recurrence-tokens", type=int, default=2048)
    p.add_argument("--skip-pooled", action="store_true")
    p.add_argument("--json")
    args = p.parse_args(argv)
    result = {"kernels": [], "pooled": []}
    print(f"kernels at L={args.length}, {HEADS} heads of {WIDTH} (forward, median of {args.repeats})")
    print(
        "| mixer | threads | chunked (s) | recurrence (s) | full attention (s) | recurrence / chunked "
        "| full / chunked |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for threads in (int(t) for t in args.threads.split(",")):
        for r in kernel_rows(args.length, threads, args.repeats, args.recurrence_tokens):
            result["kernels"].append(r)
            print(
                f"| {r['mixer']} | {threads} | {r['chunked_s']:.3f} | {r['recurrence_s']:.2f} (from "
                f"{r['recurrence_scaled_from']} tokens) | {r['full_attention_s']:.3f} | {r['vs_recurrence']:.1f}x | "
                f"{r['vs_full']:.1f}x |"
            )
    if not args.skip_pooled:
        print(f"\npooled implicit maps, 4 layers x 4 heads, L={args.length}, one thread (target {POOLED_TARGET_S} s)")
        for r in pooled_rows(args.length, args.repeats):
            result["pooled"].append(r)
            print(f"{r['model']}: {r['seconds']:.2f} s, within target: {r['met']} ({r['machine']})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return result


if __name__ == "__main__":
    main()
