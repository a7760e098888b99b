"""Latency and memory against sequence length, measured on the machine the app runs on.

``latency_memory_sweep(cfg, seq_lens, mode)`` returns one record per length:
``seq_len``, ``ms`` (median of several timed runs after a warm-up, ``kernels.measure.median_ms``),
``peak_bytes`` (measured by ``kernels.measure.measure_peak``: ``torch.cuda.max_memory_allocated``
on CUDA; on CPU the running sum of the allocator events the PyTorch profiler records, so kernels'
internal buffers count too), ``backend`` (what ran),
``status`` (``ok`` / ``oom`` / ``timeout`` / ``invalid`` / ``error``) and ``reason``.

It never raises for out-of-memory or time-outs. A run cannot be interrupted safely, so the time
budget works by prediction and by observation: a length whose predicted time (from the previous
lengths' measured scaling) exceeds the budget is skipped as ``timeout``, a run that takes longer
than the budget marks its length ``timeout``, and in both cases the longer lengths are skipped.
A length whose hidden states alone would not fit in the available memory is skipped as ``oom``
without allocating anything (so a sweep cannot take the machine down). Each length's warm-up run
is the one profiled for memory, so the profiler's overhead never enters the timings.
"""
from __future__ import annotations

import contextlib
import logging
import math
import threading
import time

import torch

from models import ConfigError, ModelConfig
from models.attention import RULES, pattern_block_mask
from models.positions import POSITION

import kernels
from kernels.measure import measure_peak, median_ms

from .configs import as_config
from .device import default_threads, gpu
from .device import device as default_device
from .seeding import GLOBAL_RNG, build

log = logging.getLogger(__name__)

DEFAULT_LENGTHS = (128, 256, 512, 1024, 2048, 4096)
# Timings from concurrent sweeps would disturb each other, and the profiler is process-wide:
# one measurement at a time (a lock, not shared data).
_MEASURE_LOCK = threading.Lock()
_OOM_WORDS = ("out of memory", "can't allocate memory", "not enough memory", "cannot allocate memory")


def memory_method(dev) -> str:
    if torch.device(dev).type == "cuda":
        return "measured: torch.cuda.max_memory_allocated"
    return "measured: peak of PyTorch profiler allocator events (CPU)"


def attention_backend_name(cfg: ModelConfig, dev, L: int) -> str:
    """The attention backend a forward of ``cfg`` at length ``L`` runs (see ``kernels.attention_backend``)."""
    dev = torch.device(dev)
    if cfg.attention not in RULES:
        return f"torch-{dev.type} {cfg.attention}"
    with GLOBAL_RNG:  # a learned table draws from the global RNG: never during another thread's build
        pos = POSITION[cfg.position].build(cfg)
    dh = cfg.d_head
    q = torch.zeros(1, cfg.n_heads, 2, dh)
    k = torch.zeros(1, cfg.kv_heads, 2, dh)
    with torch.no_grad():
        _, _, mods = pos.modify(q, k, 0, scale=1.0 / math.sqrt(dh))
    bm = None if cfg.attention == "full" else pattern_block_mask(cfg, L)
    return kernels.attention_backend(dev, block_mask=bm, rel_k=mods.get("rel_k"), rel_v=mods.get("rel_v"),
                                     softcap=cfg.softcap)


def _available_bytes(dev: torch.device) -> int:
    if dev.type == "cuda":
        return int(torch.cuda.mem_get_info(dev)[0])
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 1 << 62  # unknown: rely on catching the allocator's error


def _is_oom(exc: BaseException) -> bool:
    if isinstance(exc, MemoryError) or type(exc).__name__ == "OutOfMemoryError":
        return True
    return isinstance(exc, RuntimeError) and any(w in str(exc).lower() for w in _OOM_WORDS)


def _work(model, tokens, mode: str):
    if mode == "forward":
        def run():
            with torch.no_grad():
                model(tokens)
    else:
        def run():
            out = model(tokens)
            loss = out.logits.float().logsumexp(-1).mean() + out.aux_loss
            loss.backward()
            model.zero_grad(set_to_none=True)
    return run


def _record(L, status, backend, mode, dev, ms=None, peak=None, reason=""):
    return {"seq_len": int(L), "ms": ms, "peak_bytes": peak, "backend": backend, "status": status,
            "reason": reason, "mode": mode, "device": str(dev), "threads": torch.get_num_threads(),
            "memory_method": memory_method(dev)}


@gpu
def latency_memory_sweep(cfg, seq_lens=DEFAULT_LENGTHS, mode: str = "forward", *, batch: int = 1,
                         repeats: int = 5, min_repeats: int = 2, time_budget_s: float = 5.0,
                         progress=None, dev=None, threads: int | None = None) -> list:
    """One record per length (ascending); never raises for OOM or time-out (see module docstring).

    ``progress(fraction, message)`` is called before each length when given. Timings use
    ``threads`` intra-op threads (default: the app's setting, ``EXPLORER_THREADS`` or 1), set for
    the calling thread only and restored afterwards.
    """
    cfg = as_config(cfg)
    if mode not in ("forward", "forward_backward"):
        raise ConfigError("mode", mode, "'forward' or 'forward_backward'")
    dev = torch.device(dev) if dev is not None else default_device()
    lens = sorted({int(n) for n in seq_lens})
    if not lens or lens[0] < 1:
        raise ConfigError("seq_lens", seq_lens, "positive integers")
    model = build(cfg).to(dev).eval()  # private to this sweep: backward writes its .grad
    records, stop, history = [], None, []
    with _MEASURE_LOCK, _threads(threads or default_threads()):
        for n, L in enumerate(lens):
            if progress is not None:
                progress(n / len(lens), f"{cfg.attention}: L={L} ({n + 1}/{len(lens)})")
            backend = _safe_backend(cfg, dev, L)
            if stop is not None:
                records.append(_record(L, stop[0], backend, mode, dev, reason=stop[1]))
                continue
            rec = _measure_one(model, cfg, L, mode, dev, backend, batch, repeats, min_repeats,
                               time_budget_s, history, first=n == 0)
            records.append(rec)
            if rec["status"] == "ok":
                history.append((L, rec["ms"] / 1000.0))
            elif rec["status"] in ("oom", "timeout"):
                stop = (rec["status"], f"skipped: a shorter length ({L}) already hit {rec['status']}")
    if progress is not None:
        progress(1.0, "done")
    return records


@contextlib.contextmanager
def _threads(n: int):
    previous = torch.get_num_threads()
    torch.set_num_threads(max(1, int(n)))
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def _safe_backend(cfg, dev, L) -> str:
    try:
        return attention_backend_name(cfg, dev, L)
    except Exception as exc:  # naming must never break a sweep
        log.warning("backend name for %s at L=%d failed: %s", cfg.attention, L, exc)
        return f"torch-{dev.type}"


def _predicted_s(history: list, L: int) -> float | None:
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


def _n_runs(warm_s: float, repeats: int, min_repeats: int, budget: float) -> int:
    """Timed runs: at least ``min_repeats``, more (up to ``repeats``) while the runs, predicted from the
    warm-up's duration, stay within ``min(1 s, budget / 4)``; ``median_ms`` stops at ``budget``."""
    if warm_s <= 0:
        return repeats
    return max(1, min(repeats, max(min_repeats, math.ceil(min(1.0, budget / 4) / warm_s))))


def _measure_one(model, cfg, L, mode, dev, backend, batch, repeats, min_repeats, budget, history,
                 first: bool) -> dict:
    need = batch * L * cfg.d_model * 4 * 2  # the embeddings and one hidden state: a lower bound
    avail = _available_bytes(dev)
    if need > avail:
        return _record(L, "oom", backend, mode, dev,
                       reason=f"skipped: the hidden states alone need {need / 2**30:.1f} GiB, "
                              f"{avail / 2**30:.1f} GiB available")
    pred = _predicted_s(history, L)
    if pred is not None and pred > budget:
        return _record(L, "timeout", backend, mode, dev,
                       reason=f"skipped: predicted {pred:.1f} s per run > budget {budget:.1f} s")
    try:
        tokens = torch.randint(0, cfg.vocab_size, (batch, L), generator=torch.Generator().manual_seed(L)).to(dev)
        run = _work(model, tokens, mode)
        sync = (lambda: torch.cuda.synchronize(dev)) if dev.type == "cuda" else (lambda: None)
        if first:  # the process's first run of this model pays one-time costs (lazy init, profiler start-up)
            run()
            measure_peak(lambda: None, dev)
        sync()
        t0 = time.perf_counter()
        _, peak = measure_peak(run, dev)  # warm-up of this length, measured for memory, never timed
        sync()
        warm = time.perf_counter() - t0
        if warm > budget:
            return _record(L, "timeout", backend, mode, dev, peak=int(peak),
                           reason=f"one run took {warm:.2f} s > budget {budget:.2f} s")
        ms = median_ms(run, dev, warmup=0, repeats=_n_runs(warm, repeats, min_repeats, budget), budget_s=budget)
        return _record(L, "ok", backend, mode, dev, ms=ms, peak=int(peak))
    except ConfigError as exc:
        return _record(L, "invalid", backend, mode, dev, reason=str(exc))
    except (RuntimeError, MemoryError) as exc:
        if _is_oom(exc):
            if dev.type == "cuda":
                torch.cuda.empty_cache()
            return _record(L, "oom", backend, mode, dev, reason=str(exc).splitlines()[0][:200])
        log.exception("sweep run failed at L=%d", L)
        return _record(L, "error", backend, mode, dev, reason=f"{type(exc).__name__}: {str(exc)[:200]}")
    except Exception as exc:  # a bug in a variant must not take the app down: report it
        log.exception("sweep run failed at L=%d", L)
        return _record(L, "error", backend, mode, dev, reason=f"{type(exc).__name__}: {str(exc)[:200]}")
