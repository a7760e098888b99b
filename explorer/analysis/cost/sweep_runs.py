"""How a sweep runs and times one length: the closure timed, the untimed runs that pay one-time costs,
the timed runs and their median, the prediction that skips a length, the threads and dtype used.

Split from ``explorer.analysis.cost.sweep`` (which drives the lengths, the budgets and the records); the
module docstring there says what the timings include and exclude.
"""

from __future__ import annotations

import contextlib
import math
import time

import torch

from explorer.analysis.cost.core_timer import CoreTimer
from explorer.runtime import settings
from explorer.runtime.stopping import Abandoned, Guard


def work(model, tokens, mode: str, dev):
    """The closure timed: a forward (no grad) or a forward + backward, bf16 autocast on CUDA.
    ``tokens`` is the tuple of the model's arguments."""
    dev = torch.device(dev)
    cast = (lambda: torch.autocast("cuda", dtype=torch.bfloat16)) if dev.type == "cuda" else contextlib.nullcontext
    if mode == "forward":

        def run():
            with torch.no_grad(), cast():
                model(*tokens)
    else:

        def run():
            try:
                with cast():
                    out = model(*tokens)
                    loss = out.logits.float().logsumexp(-1).mean() + out.aux_loss
                loss.backward()
            finally:  # an abandoned backward leaves partial grads: clear them either way
                model.zero_grad(set_to_none=True)

    return run


@contextlib.contextmanager
def intra_op_threads(n: int):
    previous = torch.get_num_threads()
    torch.set_num_threads(max(1, int(n)))
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def run_dtype(dev) -> torch.dtype:
    return torch.bfloat16 if torch.device(dev).type == "cuda" else torch.float32


def timer_name(dev) -> str:
    return "CUDA events" if torch.device(dev).type == "cuda" else "perf_counter"


def timed_ms(run, dev, n: int, budget: float, guard: Guard, cores: CoreTimer | None = None) -> tuple:
    """``(ms, attn_ms)``: median ms of ``n`` runs (stops once their total exceeds ``budget``; at least one
    run) and the median of their attention cores' summed time (None without ``cores``).
    CUDA: events recorded on the stream around each run; CPU: wall time."""
    times, attn, spent = [], [], 0.0
    cuda = torch.device(dev).type == "cuda"
    for _ in range(n):
        if cores is not None:
            cores.reset()
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            run()
            end.record()
            end.synchronize()
            dt = start.elapsed_time(end) / 1000.0
        else:
            t0 = time.perf_counter()
            run()
            dt = time.perf_counter() - t0
        times.append(dt)
        if cores is not None:
            attn.append(cores.seconds())
        spent += dt
        if spent > budget:
            break
        guard.check()
    times.sort()
    attn.sort()
    return 1000.0 * times[len(times) // 2], (1000.0 * attn[len(attn) // 2] if attn else None)


def predicted_s(history: list, L: int) -> float | None:
    """Time at ``L`` extrapolated from the measured scaling of the last two lengths (slope in [1, 2])."""
    if not history:
        return None
    (l1, t1) = history[-1]
    slope = 2.0
    if len(history) >= 2:
        (l0, t0) = history[-2]
        if t0 > 0 and t1 > 0 and l1 > l0:
            slope = min(2.0, max(1.0, math.log(t1 / t0) / math.log(l1 / l0)))
    return t1 * (L / l1) ** slope


def n_runs(warm_s: float, repeats: int, min_repeats: int, budget: float) -> int:
    """Timed runs: at least ``min_repeats``, more (up to ``repeats``) while the runs, predicted from the
    warm-up's duration, stay within ``min(1 s, budget / 4)``; ``median_ms`` stops at ``budget``."""
    if warm_s <= 0:
        return repeats
    return max(1, min(repeats, max(min_repeats, math.ceil(min(1.0, budget / 4) / warm_s))))


MAX_SETTLE_RUNS = 8


def settle(run, sync, guard: Guard, budget: float) -> float | None:
    """Untimed runs until one fits the budget: the seconds the slower ones took (their one-time work:
    a Triton compile, lazy initialisation), or None when the first one fitted.

    A compile happens inside one module's call, which the guard cannot interrupt; the run is abandoned
    at the next module, and the following run passes that module at full speed. So a run is repeated
    while each attempt gets further through the model's modules than the one before (one-time work is
    behind it), within ``settings.compile_budget()`` seconds and ``MAX_SETTLE_RUNS`` runs; a run that
    gets no further is a real time-out (``Abandoned``, the guard's reason ``timeout``). How far a run got
    is the count of module forwards ``guard`` (installed on the model ``run`` calls) let through."""
    reached, spent, start = -1, 0.0, time.perf_counter()
    limit = settings.compile_budget()
    for _ in range(MAX_SETTLE_RUNS):
        before = guard.entered
        t0 = time.perf_counter()
        try:
            with guard.run_until(budget):
                run()
            sync()
        except Abandoned:
            if guard.why == "cancelled":
                raise
        took = time.perf_counter() - t0
        entered = guard.entered - before
        if took <= budget:
            return spent or None
        spent += took
        if entered <= reached or time.perf_counter() - start > limit:
            guard.why = "timeout"
            raise Abandoned("timeout")
        reached = entered
    guard.why = "timeout"
    raise Abandoned("timeout")
