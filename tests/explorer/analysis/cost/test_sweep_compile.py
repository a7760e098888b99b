"""A cold start: the first run of a model pays a one-time cost longer than the time budget (on a GPU, Triton
compiling the kernels inside one module's call). The sweep reports it as ``compile`` in that length's
record and then times the length for real, instead of reporting a time-out and skipping every longer
length; a model that is slow on every run is still a time-out."""

import time

import pytest

from explorer.analysis import latency_memory_sweep
from explorer.analysis.cost import sweep as sweep_module
from models import ModelConfig, build_model
from models.blocks import Attention

SMALL = ModelConfig(n_layers=2, d_model=32, n_heads=2)
BUDGET = 0.5


def _slow_model(monkeypatch, delays: dict, every_call: bool = False):
    """``build_model`` whose attention modules ``{layer: seconds}`` sleep on their first call (every call
    with ``every_call``): a kernel compiling inside one module, as the sweep's guard sees it."""

    def build(cfg):
        model = build_model(cfg)
        attention = [m for m in model.modules() if isinstance(m, Attention)]
        for index, seconds in delays.items():
            state = {"calls": 0}

            def pre_hook(_module, _args, state=state, seconds=seconds):
                state["calls"] += 1
                if every_call or state["calls"] == 1:
                    time.sleep(seconds)

            attention[index].register_forward_pre_hook(pre_hook)
        return model

    monkeypatch.setattr(sweep_module, "build_model", build)


@pytest.mark.parametrize("delays", [{0: 1.2}, {0: 0.8, 1: 0.8}], ids=["one kernel", "two kernels"])
def test_a_slow_first_call_is_reported_as_compile_then_timed(monkeypatch, delays):
    _slow_model(monkeypatch, delays)
    recs = latency_memory_sweep(SMALL, [16, 32], "forward", time_budget_s=BUDGET, repeats=2, min_repeats=1)
    assert [r["status"] for r in recs] == ["ok", "ok"], recs
    first = recs[0]
    assert first["compile_s"] >= max(delays.values()) and "compile" in first["reason"]
    assert first["ms"] < 1000 * BUDGET  # the timed runs do not include the compile
    assert "compile_s" not in recs[1]  # paid once


def test_a_model_slow_on_every_call_is_still_a_timeout(monkeypatch):
    _slow_model(monkeypatch, {0: 0.7}, every_call=True)
    t0 = time.perf_counter()
    recs = latency_memory_sweep(SMALL, [16, 32], "forward", time_budget_s=BUDGET, repeats=2, min_repeats=1)
    assert [r["status"] for r in recs] == ["timeout", "timeout"]
    assert "skipped" in recs[1]["reason"]
    assert time.perf_counter() - t0 < 10  # two untimed attempts, not the whole compile budget


def test_the_compile_budget_bounds_the_untimed_runs(monkeypatch):
    monkeypatch.setenv("EXPLORER_COMPILE_BUDGET", "1")
    _slow_model(monkeypatch, {0: 0.7, 1: 0.7})  # two one-time costs, 1.4 s > the 1 s compile budget
    rec = latency_memory_sweep(SMALL, [16], "forward", time_budget_s=BUDGET, repeats=2, min_repeats=1)[0]
    assert rec["status"] == "timeout"
