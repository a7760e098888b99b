"""The GPU functions run through the ``spaces`` package's own ZeroGPU code path: its wrapper pickles the
arguments into a worker process forked from this one, runs the function there and pickles the result
back. Only what needs a real ZeroGPU host is replaced: the scheduler's HTTP calls (``client``) and the
CUDA set-up of the worker (``spaces.zero.torch``, which cannot import on a CPU build of torch; the
stand-in is the package's own no-op fallback for a machine without torch)."""

import multiprocessing
import pickle
import sys
import threading
import time
import types

import numpy as np
import pytest
import torch

pytest.importorskip("spaces")

from explorer.analysis import clear_caches  # noqa: E402
from explorer.analysis.common import memo  # noqa: E402
from explorer.analysis.compare import compare_pair  # noqa: E402
from explorer.analysis.cost import sweep  # noqa: E402
from explorer.analysis.maps import attention as maps  # noqa: E402
from explorer.analysis.maps.attention import attention_maps  # noqa: E402
from explorer.runtime.signals import stop_channel  # noqa: E402
from models import ModelConfig  # noqa: E402

SMALL = ModelConfig(n_layers=2, d_model=32, n_heads=2, seed=77)
BIG = ModelConfig(n_layers=12, d_model=512, n_heads=16)


def _gone(pid: int, wait_s: float = 10.0) -> bool:
    """Whether process ``pid`` has ended (exited or a zombie) within ``wait_s``."""
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] in "ZX":
                    return True
        except FileNotFoundError:
            return True
        time.sleep(0.05)
    return False


@pytest.fixture
def zero_gpu(monkeypatch):
    """``wrap(gpu_function, duration)`` -> the function as ``spaces.GPU`` wraps it on a ZeroGPU Space."""
    fake_torch = types.ModuleType("spaces.zero.torch")
    for name in ("enter_mode", "patch", "unpatch", "init", "move"):
        setattr(fake_torch, name, lambda *a, **k: None)
    fake_torch.pack = fake_torch.size = lambda *a, **k: 0
    fake_torch.is_in_bad_fork = lambda: False
    monkeypatch.setitem(sys.modules, "spaces.zero.torch", fake_torch)
    import spaces.zero

    monkeypatch.setattr(spaces.zero, "torch", fake_torch, raising=False)
    from spaces.zero import client, wrappers

    released = []
    monkeypatch.setattr(
        client,
        "schedule",
        lambda **kw: types.SimpleNamespace(allowToken="token", nvidiaIndex=0, nvidiaUUID="GPU-0", idle=True),
    )
    monkeypatch.setattr(client, "release", lambda token, **kw: released.append(kw))
    monkeypatch.setattr(client, "allow", lambda token: None)
    monkeypatch.setattr(client, "get_duration_seconds", lambda duration, size: duration.total_seconds())

    def wrap(decorated):
        return wrappers.regular_function_wrapper(decorated.on_device, decorated.gpu_duration, None)

    wrap.released = released
    yield wrap
    # ZeroGPU keeps its forked workers for the next call. Here they would outlive the test holding copies
    # of every descriptor this process had open at the fork: under pytest-xdist that includes the pipe to
    # Playwright's driver when browser tests ran earlier in the same worker, and the driver, never seeing
    # that pipe close, kept the worker's end of the session waiting for ever.
    for child in multiprocessing.active_children():
        child.kill()  # a worker waiting on its queue does not answer SIGTERM
        child.join(10)
        assert _gone(child.pid), child


def test_attention_maps_in_the_worker_equal_those_computed_here(zero_gpu, monkeypatch):
    clear_caches()
    here = attention_maps(SMALL, "hello zero")
    clear_caches()
    monkeypatch.setattr(maps, "compute_maps", zero_gpu(maps.compute_maps))
    remote = attention_maps(SMALL, "hello zero")
    assert remote.tokens == here.tokens and remote is not here
    np.testing.assert_allclose(remote.attention, here.attention, rtol=1e-5, atol=1e-6)
    assert zero_gpu.released == [{}]  # the GPU was released, not failed
    assert attention_maps(SMALL, "hello zero") is remote and len(zero_gpu.released) == 1  # memoised here


def test_a_compare_click_runs_its_six_analyses_in_one_worker_call(zero_gpu, monkeypatch):
    other = SMALL.replace(attention="sliding_window", window=4)
    clear_caches()
    here = compare_pair(SMALL, other, "six in one")
    clear_caches()
    monkeypatch.setattr(memo, "compute_batch", zero_gpu(memo.compute_batch))
    remote = compare_pair(SMALL, other, "six in one")
    assert len(zero_gpu.released) == 1
    assert remote["gradients"] == here["gradients"] and remote["summaries"] == here["summaries"]
    for a, b in zip(remote["maps"], here["maps"]):
        np.testing.assert_allclose(a.attention, b.attention, rtol=1e-5, atol=1e-6)


def test_a_sweep_length_runs_in_the_worker_and_a_lambda_cannot_cross(zero_gpu):
    measure = zero_gpu(sweep.measure_length)
    with stop_channel(lambda: False) as token:
        rec = measure(
            SMALL,
            32,
            "forward",
            batch=1,
            repeats=2,
            min_repeats=1,
            time_budget_s=5.0,
            history=(),
            stop=token,
            dev=None,
            threads=1,
            pair=None,
            keep=False,
        )
    assert rec["status"] == "ok" and rec["ms"] > 0 and rec["seq_len"] == 32
    with pytest.raises(pickle.PicklingError):  # what the old sweep did: its should_stop was a lambda
        measure(
            SMALL,
            32,
            "forward",
            batch=1,
            repeats=2,
            min_repeats=1,
            time_budget_s=5.0,
            history=(),
            stop=lambda: False,
            dev=None,
            threads=1,
            pair=None,
            keep=False,
        )


def test_a_stop_pressed_in_the_server_ends_the_run_in_the_worker(zero_gpu, monkeypatch):
    monkeypatch.setenv("EXPLORER_REQUEST_BUDGET", "64G")
    monkeypatch.setenv("EXPLORER_SERVER_MEMORY", "64G")
    measure = zero_gpu(sweep.measure_length)
    pressed = threading.Event()
    threading.Timer(0.5, pressed.set).start()
    t0 = time.perf_counter()
    with stop_channel(pressed.is_set) as token:
        rec = measure(
            BIG,
            2048,
            "forward_backward",
            batch=1,
            repeats=5,
            min_repeats=2,
            time_budget_s=60.0,
            history=(),
            stop=token,
            dev=None,
            threads=1,
            pair=None,
            keep=False,
        )
    assert rec["status"] == "cancelled", rec
    assert time.perf_counter() - t0 < 15


def test_training_bursts_in_the_worker_give_the_uninterrupted_run(zero_gpu, monkeypatch):
    from explorer.training import bursts
    from explorer.training import trainer as tr

    cfg = ModelConfig(n_layers=2, d_model=32, n_heads=2, max_len=64, dropout=0.1)
    run = tr.RunConfig(task="copy", steps=6, every=2, batch_size=4, seq_len=16)

    def digest(snaps):
        return [(s.step, s.train_loss, s.heldout_loss, s.attention.tobytes()) for s in snaps]

    whole = digest(tr.train(cfg, run))
    monkeypatch.setattr(bursts, "train_burst", zero_gpu(bursts.train_burst))
    trainer = tr.Trainer(cfg, run)
    assert digest(bursts.run_in_bursts(trainer)) == whole
    assert trainer.done and len(zero_gpu.released) == 3  # three bursts, each released its GPU


def test_a_long_context_side_runs_in_the_worker_with_progress_and_errors_as_values(zero_gpu, monkeypatch):
    from explorer.analysis.long_context import view as lc
    from explorer.runtime.signals import StopToken
    from models import ConfigError, build_model

    cfg = SMALL.replace(attention="sliding_window", window=8)
    model = build_model(cfg).eval()
    tokens = torch.randint(0, cfg.vocab_size, (1, 96))
    here = lc.compute_side(model, tokens)
    remote_fn = zero_gpu(lc.compute_side)
    monkeypatch.setattr(lc, "compute_side", remote_fn)
    seen = []
    side = lc._side("as trained", cfg, model, tokens, None, seen.append)
    assert len(zero_gpu.released) == 1 and side.model is model  # the zoom reads the caller's own model
    np.testing.assert_allclose(side.mass, here["mass"], rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(side.loss, here["loss"], rtol=1e-5, atol=1e-6)
    assert side.backend == here["backend"] == "torch-cpu block-sparse" and here["device"] == "cpu"
    assert seen and seen == sorted(seen) and set(seen) <= {0.0, 0.5}  # per layer, from the worker's page
    bad = remote_fn(build_model(SMALL.replace(memory="xl", segment_len=16)).eval(), tokens, StopToken(-1))
    assert isinstance(bad["error"][0], str) and bad["error"][0] == "memory"  # a plain value, not an exception
    with pytest.raises(ConfigError, match="memory"):
        lc._side("x", cfg, build_model(SMALL.replace(memory="xl", segment_len=16)).eval(), tokens, None, None)
