"""Latency and memory against sequence length, measured on the machine the app runs on.

``latency_memory_sweep(cfg, seq_lens, mode)`` returns one record per length:
``seq_len``, ``ms`` (median of several timed runs after a warm-up), ``peak_bytes`` (measured by
``kernels.tools.measure.measure_peak``: ``torch.cuda.max_memory_allocated`` on CUDA; on CPU the running
sum of the allocator events the PyTorch profiler records, so kernels' internal buffers count too),
``backend`` (the names ``kernels.attention`` reported while the warm-up run of that length ran:
``kernels.record_backends``, never a prediction), ``others`` (how many other app requests computed
during the measurement: the timing is inflated when it is not 0), ``timer``, ``dtype``,
``status`` (``ok`` / ``oom`` / ``timeout`` / ``cancelled`` / ``invalid`` / ``error``), ``reason``, ``n_heads`` and
``batch`` (for the size an ``L x L`` score matrix would have), ``attn_ms`` and, when an untimed first run had to
compile, ``compile_s``.

``attn_ms`` is the attention's own time inside the same timed forwards: the time spent in the attention
*cores* of the model's layers (``explorer.analysis.cost.core_timer``), summed over the layers of one forward,
median over the timed runs: the very attention the whole-model time contains, with the model's head sizes,
position modifiers and pattern layout; ``None`` for a forward_backward (a hook sees the forward only) and
for a model without an attention core.

The default lengths (``DEFAULT_LENGTHS``) reach 16384 tokens, where the structured patterns pull away
from full attention on a CPU; full attention stops where its budget says (a predicted time past the
budget, or the memory budget), and that stop is a record of its own (``timeout`` / ``oom``).

The sweep is driven from the caller's side, one GPU call per length (``measure_length``: picklable
arguments, a ``StopToken`` for the stop, the model kept between the lengths of one sweep), so on a
ZeroGPU Space each call is a short GPU burst and nothing unpicklable crosses to the worker.

What the timings exclude: building the model, its first run (lazy initialisation, profiler start-up)
and, on CUDA, each length's first run (Triton compiling the kernels for that shape). These untimed
runs are repeated until one fits the time budget while each gets further through the model than the
one before (``sweep_runs.settle``): a compile that took longer than the budget is reported in the length's
record as ``compile_s`` (and the ``reason``), not as a time-out. Triton keeps compiled kernels in a
lasting ``TRITON_CACHE_DIR`` (``explorer.runtime.device``), so a restart compiles nothing again. Nor,
per length, the block-sparse layout and its execution plan, which are built once per (pattern,
length) and memoised (``models.attention.sparse.pattern_block_mask``, the plan on the
``BlockMask``): the untimed warm-up run of each length pays them. On CUDA the runs execute under
bf16 autocast and are timed with CUDA events; on the CPU in fp32 with ``time.perf_counter``.

It never raises for out-of-memory, time-outs or cancellation. The time budget holds for every
run, the first length's included: a forward pre-hook on every module (and, with gradients, a hook
on every module's input gradient) checks the deadline and the caller's ``should_stop`` and
abandons the run between two modules. Chosen over a worker process because a process would pay
torch's import and the model build again (seconds, more than the budget) and could not share the
memoised layouts; the price is that one module call (one layer's attention) is the granularity.
A length whose predicted time (from the previous lengths' measured scaling) exceeds the budget is
skipped without running; after a time-out or OOM the longer lengths are skipped. A length whose
hidden states alone would not fit in the available memory is skipped as ``oom`` without
allocating anything. Each length's warm-up run is the one profiled for memory, so the profiler's
overhead never enters the timings.

A model that reads several sequences (an encoder-decoder: ``model(src, tgt)``) is timed with one
length per input of its arrangement: ``seq2seq_axis="both"`` sets every input to each sweep length,
an input's name (``"source"`` / ``"target"``) sweeps that input with the others held at
``fixed_len``; each record then carries every input's length (``src_len``, ``tgt_len``).
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import time

import torch

import kernels
from explorer.analysis.cost.core_timer import CoreTimer
from explorer.analysis.cost.sweep_runs import (
    intra_op_threads,
    n_runs,
    predicted_s,
    run_dtype,
    settle,
    timed_ms,
    timer_name,
    work,
)
from explorer.runtime import budget as request_budget
from explorer.runtime.cache import release_memory
from explorer.runtime.configs import as_config
from explorer.runtime.device import default_threads, gpu
from explorer.runtime.device import device as default_device
from explorer.runtime.load import LOAD
from explorer.runtime.pool import POOL, Busy, available_bytes, is_out_of_memory
from explorer.runtime.signals import stop_channel
from explorer.runtime.stopping import Abandoned, Guard
from kernels.tools.measure import measure_peak
from models import ConfigError, ModelConfig, build_model
from models.architectures import arrangement

log = logging.getLogger(__name__)

# 256 .. 16384: on this 2-core CPU, the default model's structured patterns at 8192 run 2-4x faster than full
# attention and at 16384 still fit the default budget, while full attention's predicted time there does not
# (benchmarks/attention_choices.py --sweep measures both and the sweep's wall time).
DEFAULT_LENGTHS = (256, 512, 1024, 2048, 4096, 8192, 16384)
# Timings from concurrent sweeps would disturb each other, and the profiler is process-wide:
# one measurement at a time (a lock, not shared data).
_MEASURE_LOCK = threading.Lock()


def memory_method(dev) -> str:
    if torch.device(dev).type == "cuda":
        return "measured: torch.cuda.max_memory_allocated"
    return "measured: peak of PyTorch profiler allocator events (CPU)"


def _available_bytes(dev: torch.device) -> int:
    if dev.type == "cuda":
        return int(torch.cuda.mem_get_info(dev)[0])
    return available_bytes()


LENGTH_KEYS = {"source": "src_len", "target": "tgt_len"}  # the record field of each input's length


def sweep_axes(cfg) -> tuple:
    """What a sweep of ``cfg`` can vary: ``()`` for one input, else ``("both", <each input>)``."""
    names = arrangement(cfg).inputs
    return ("both", *names) if len(names) > 1 else ()


def input_lengths(cfg, L: int, axis: str = "both", fixed_len: int = 64) -> tuple:
    """The length of each input of ``cfg``'s arrangement at sweep length ``L``: all of them ``L``
    (``axis="both"``), or the input named ``axis`` at ``L`` and the others at ``fixed_len``."""
    return tuple(L if axis in ("both", name) else fixed_len for name in arrangement(cfg).inputs)


def _inputs(cfg: ModelConfig, sizes: tuple, batch: int, dev, seed: int) -> tuple:
    """The model's arguments at these input lengths: ``(tokens,)``, or ``(src, tgt)``."""
    gen = torch.Generator().manual_seed(seed)
    return tuple(torch.randint(0, cfg.vocab_size, (batch, n), generator=gen).to(dev) for n in sizes)


def _record(L, status, backend, mode, dev, ms=None, peak=None, reason="", others=0, attn_ms=None):
    return {
        "seq_len": int(L),
        "ms": ms,
        "attn_ms": attn_ms,
        "peak_bytes": peak,
        "backend": backend,
        "status": status,
        "reason": reason,
        "mode": mode,
        "device": str(dev),
        "threads": torch.get_num_threads(),
        "memory_method": memory_method(dev),
        "others": int(others),
        "timer": timer_name(dev),
        "dtype": str(run_dtype(dev)).removeprefix("torch."),
    }


def latency_memory_sweep(
    cfg,
    seq_lens=DEFAULT_LENGTHS,
    mode: str = "forward",
    *,
    batch: int = 1,
    repeats: int = 5,
    min_repeats: int = 2,
    time_budget_s: float = 5.0,
    progress=None,
    dev=None,
    threads: int | None = None,
    should_stop=None,
    seq2seq_axis: str = "both",
    fixed_len: int = 64,
) -> list:
    """One record per length (ascending); never raises for OOM, time-out or cancel (module docstring).

    The caller's side of the sweep: one ``measure_length`` GPU call per length, so every GPU call takes
    picklable arguments and lasts one length (ZeroGPU: ``explorer.runtime.device``). ``progress(fraction,
    message)`` is called here before each length when given. ``should_stop()`` is polled here and,
    through a ``StopToken`` (``explorer.runtime.signals``), between modules inside the GPU call: once it
    returns True the current run is abandoned and the remaining lengths are recorded as ``cancelled``.
    Timings use ``threads`` intra-op threads (default: the app's setting, ``EXPLORER_THREADS`` or 1), set
    for the measuring thread only. ``seq2seq_axis`` / ``fixed_len``: the lengths of a model of several
    inputs (module docstring).
    """
    cfg = as_config(cfg)
    axes = sweep_axes(cfg)
    pair = None
    if axes:
        if seq2seq_axis not in axes:
            raise ConfigError("seq2seq_axis", seq2seq_axis, ", ".join(map(repr, axes)))
        if int(fixed_len) < 1:
            raise ConfigError("fixed_len", fixed_len, "a positive integer")
        pair = (seq2seq_axis, int(fixed_len))
    if mode not in ("forward", "forward_backward"):
        raise ConfigError("mode", mode, "'forward' or 'forward_backward'")
    lens = sorted({int(n) for n in seq_lens})
    if not lens or lens[0] < 1:
        raise ConfigError("seq_lens", seq_lens, "positive integers")
    shown = torch.device(dev) if dev is not None else default_device()  # for the records of lengths not run
    stopped = should_stop or (lambda: False)
    records, stop, history = [], None, []
    if not _acquire(_MEASURE_LOCK, stopped):
        return [_record(L, "cancelled", "not run", mode, shown, reason="cancelled before it started") for L in lens]
    opts = dict(
        batch=int(batch),
        repeats=int(repeats),
        min_repeats=int(min_repeats),
        time_budget_s=float(time_budget_s),
        dev=None if dev is None else str(dev),
        threads=int(threads or default_threads()),
        pair=pair,
    )
    try:
        with stop_channel(should_stop) as token:
            for n, L in enumerate(lens):
                if progress is not None:
                    progress(n / len(lens), f"{cfg.attention}: L={L} ({n + 1}/{len(lens)})")
                if stop is None and stopped():
                    stop = ("cancelled", "cancelled")
                if stop is not None:
                    records.append(_record(L, stop[0], "not run", mode, shown, reason=stop[1]))
                    continue
                rec = measure_length(cfg, L, mode, history=tuple(history), stop=token, keep=n + 1 < len(lens), **opts)
                shown = torch.device(rec["device"])
                records.append(rec)
                if rec["status"] == "ok":
                    history.append((L, rec["ms"] / 1000.0))
                elif rec["status"] == "cancelled":
                    stop = ("cancelled", "cancelled")
                elif rec["status"] in ("oom", "timeout"):
                    stop = (rec["status"], f"skipped: a shorter length ({L}) already hit {rec['status']}")
    finally:
        _MEASURE_LOCK.release()
        _forget_model()  # in this process; a ZeroGPU worker let it go with the last length (keep=False)
        release_memory()  # a sweep to 4096 tokens frees hundreds of MB that glibc would otherwise keep
    for rec in records:
        rec.update(n_heads=int(cfg.n_heads), batch=int(batch))
    for rec in records if pair is not None else []:
        for name, n in zip(arrangement(cfg).inputs, input_lengths(cfg, rec["seq_len"], *pair)):
            rec[LENGTH_KEYS.get(name, f"{name}_len")] = n
    if progress is not None:
        progress(1.0, "done")
    return records


def _length_duration(cfg, L, mode, *, time_budget_s: float = 5.0, **_kw) -> int:
    """Seconds of GPU one length may need: the untimed first runs (a compile, a few seconds), the
    memory-profiled warm-up and the timed runs (each stopped at the budget), and the model build."""
    return int(math.ceil(20 + 4 * float(time_budget_s)))


@gpu(duration=_length_duration)
def measure_length(
    cfg: ModelConfig,
    L: int,
    mode: str,
    *,
    batch: int,
    repeats: int,
    min_repeats: int,
    time_budget_s: float,
    history: tuple,
    stop,
    dev: str | None,
    threads: int,
    pair,
    keep: bool,
) -> dict:
    """The record of one length (a GPU call: every argument and the result are picklable). ``history``:
    the ``(length, seconds)`` measured before, for the prediction that skips a length; ``stop``: a
    ``StopToken``; ``keep``: keep the model for the next length of the same sweep (else let it go)."""
    dev = torch.device(dev) if dev is not None else default_device()
    if stop():
        return _record(L, "cancelled", "not run", mode, dev, reason="cancelled")
    try:
        with intra_op_threads(threads):
            model, first = _sweep_model(cfg, dev)
            guard = Guard(stop)
            with guard.installed(model, backward=mode != "forward"):
                return _measure_one(
                    model,
                    cfg,
                    int(L),
                    mode,
                    dev,
                    batch,
                    repeats,
                    min_repeats,
                    time_budget_s,
                    list(history),
                    guard,
                    first=first,
                    pair=pair,
                )
    finally:
        if not keep:
            _forget_model()


# The model of the sweep running now (its config and device): built by its first length, reused by the next
# ones. A cache of one entry, private to the measuring (``_MEASURE_LOCK``): a backward writes its ``.grad``.
_MODEL: dict = {}


def _sweep_model(cfg, dev) -> tuple:
    """``(model, first)``: ``first`` when it was built now, so its first run pays one-time costs."""
    key = (cfg, str(dev))
    if key not in _MODEL:
        _MODEL.clear()
        _MODEL[key] = build_model(cfg).to(dev).eval()
        return _MODEL[key], True
    return _MODEL[key], False


def _forget_model() -> None:
    _MODEL.clear()


def _acquire(lock, stopped, poll_s: float = 0.1) -> bool:
    """Wait for ``lock`` unless the caller cancels meanwhile (False: not acquired)."""
    while not lock.acquire(timeout=poll_s):
        if stopped():
            return False
    return True


def backend_label(ran: list, cfg: ModelConfig, dev) -> str:
    """The distinct names ``kernels.attention`` reported, in call order; a mechanism that never
    calls it (linear / low-rank / LSH attention compute their own products) says so."""
    names = list(dict.fromkeys(ran))
    if not names:
        return f"torch-{torch.device(dev).type} ({cfg.attention}: own PyTorch code, no kernels.attention call)"
    return " + ".join(names)


def _measure_one(
    model, cfg, L, mode, dev, batch, repeats, min_repeats, budget, history, guard, first: bool, pair=None
) -> dict:
    sizes = input_lengths(cfg, L, *(pair or ()))
    longest = max(sizes)
    try:  # the per-request memory budget, predicted from the shapes before anything is allocated
        predicted = request_budget.check(cfg, mode, longest, batch)
    except ConfigError as exc:
        return _record(L, "oom", "not run", mode, dev, reason=f"skipped: {exc}")
    need = batch * L * cfg.d_model * 4 * 2  # the embeddings and one hidden state: a lower bound
    avail = _available_bytes(dev)
    if need > avail:
        return _record(
            L,
            "oom",
            "not run",
            mode,
            dev,
            reason=f"skipped: the hidden states alone need {need / 2**30:.1f} GiB, {avail / 2**30:.1f} GiB available",
        )
    pred = predicted_s(history, L)
    if pred is not None and pred > budget:
        return _record(
            L,
            "timeout",
            "not run",
            mode,
            dev,
            reason=f"skipped: predicted {pred:.1f} s per run > budget {budget:.1f} s",
        )
    try:  # the length's predicted bytes held in the server's pool while it runs
        with POOL.reserve(predicted, f"length {L} of the sweep"), LOAD.window() as seen:
            rec = _run_length(model, cfg, L, mode, dev, batch, repeats, min_repeats, budget, guard, first, pair)
    except Busy as exc:
        return _record(L, "oom", "not run", mode, dev, reason=f"skipped: {exc}")
    rec["others"] = seen["others"]  # other requests that computed while this length was measured
    return rec


def _run_length(model, cfg, L, mode, dev, batch, repeats, min_repeats, budget, guard, first, pair=None) -> dict:
    backend, peak = "not run", None
    try:
        run = work(model, _inputs(cfg, input_lengths(cfg, L, *(pair or ())), batch, dev, L), mode, dev)
        sync = (lambda: torch.cuda.synchronize(dev)) if dev.type == "cuda" else (lambda: None)
        compile_s = None
        if first or dev.type == "cuda":  # one-time costs: lazy init and, on CUDA, Triton compiling this shape
            compile_s = settle(run, sync, guard, budget)
        if first:
            measure_peak(lambda: None, dev)  # the profiler's start-up, outside the profiled warm-up
        sync()
        t0 = time.perf_counter()
        with kernels.record_backends() as ran, guard.run_until(budget):
            _, peak = measure_peak(run, dev)  # warm-up of this length: pays the layout / plan, measured for memory
        backend = backend_label(ran, cfg, dev)
        sync()
        warm = time.perf_counter() - t0
        if warm > budget:
            return _record(
                L,
                "timeout",
                backend,
                mode,
                dev,
                peak=int(peak),
                reason=f"one run took {warm:.2f} s > budget {budget:.2f} s",
            )
        timer = CoreTimer(model, dev) if mode == "forward" else None
        with guard.run_until(budget), timer or contextlib.nullcontext():
            ms, attn_ms = timed_ms(run, dev, n_runs(warm, repeats, min_repeats, budget), budget, guard, timer or None)
    except Abandoned:
        if guard.why == "cancelled":
            return _record(L, "cancelled", backend, mode, dev, reason="cancelled during the run")
        return _record(
            L,
            "timeout",
            backend,
            mode,
            dev,
            peak=None if peak is None else int(peak),
            reason=f"abandoned: a run exceeded the budget of {budget:.2f} s",
        )
    except ConfigError as exc:
        return _record(L, "invalid", backend, mode, dev, reason=str(exc))
    except (RuntimeError, MemoryError) as exc:
        if isinstance(exc.__cause__, Abandoned) or isinstance(exc.__context__, Abandoned):
            return _record(
                L,
                "timeout" if guard.why == "timeout" else "cancelled",
                backend,
                mode,
                dev,
                reason=f"abandoned ({guard.why})",
            )
        if is_out_of_memory(exc):
            if dev.type == "cuda":
                torch.cuda.empty_cache()
            return _record(L, "oom", backend, mode, dev, reason=str(exc).splitlines()[0][:200])
        log.exception("sweep run failed at L=%d", L)
        return _record(L, "error", backend, mode, dev, reason=f"{type(exc).__name__}: {str(exc)[:200]}")
    except Exception as exc:  # a bug in a variant must not take the app down: report it
        log.exception("sweep run failed at L=%d", L)
        return _record(L, "error", backend, mode, dev, reason=f"{type(exc).__name__}: {str(exc)[:200]}")
    rec = _record(L, "ok", backend, mode, dev, ms=ms, peak=int(peak), attn_ms=attn_ms)
    if compile_s is not None:
        rec["compile_s"] = round(compile_s, 3)
        rec["reason"] = f"compile: the untimed first run took {compile_s:.2f} s (not in the timings)"
    return rec
