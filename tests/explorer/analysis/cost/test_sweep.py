"""latency_memory_sweep: records, never exceptions, for OOM, time-outs, cancels and invalid lengths."""

import threading
import time

import pytest

import kernels
from explorer.analysis import latency_memory_sweep, model_summary
from explorer.app.tabs.latency import sweep_baseline, sweep_outputs
from explorer.runtime.load import LOAD
from models import ConfigError, ModelConfig

SMALL = dict(n_layers=2, d_model=32, n_heads=2)
KEYS = {"seq_len", "ms", "peak_bytes", "backend", "status", "reason"}


@pytest.mark.parametrize("mode", ["forward", "forward_backward"])
def test_ok_records_are_measured(mode):
    recs = latency_memory_sweep(ModelConfig(**SMALL), [32, 16], mode, repeats=2, min_repeats=1)
    assert [r["seq_len"] for r in recs] == [16, 32]
    for r in recs:
        assert KEYS <= set(r) and r["status"] == "ok", r
        assert r["ms"] > 0 and r["peak_bytes"] > 0 and r["mode"] == mode
        assert r["backend"] == "sdpa (cpu)"


def test_impossible_length_is_an_oom_record_not_an_exception():
    recs = latency_memory_sweep(ModelConfig(**SMALL), [16, 2**40, 2**41], repeats=1, min_repeats=1)
    assert [r["status"] for r in recs] == ["ok", "oom", "oom"]
    assert recs[1]["ms"] is None and "GiB" in recs[1]["reason"]


def test_over_budget_lengths_time_out_and_the_rest_are_skipped():
    recs = latency_memory_sweep(ModelConfig(**SMALL), [16, 32, 64], time_budget_s=1e-9)
    assert [r["status"] for r in recs] == ["timeout"] * 3
    assert "budget" in recs[0]["reason"] and "skipped" in recs[1]["reason"]


def test_invalid_length_is_reported_with_the_reason():
    cfg = ModelConfig(position="learned", max_len=20, **SMALL)
    recs = latency_memory_sweep(cfg, [16, 32], repeats=1, min_repeats=1)
    assert [r["status"] for r in recs] == ["ok", "invalid"]
    assert "max_len" in recs[1]["reason"]


def test_bad_mode_and_lengths_raise_config_error():
    with pytest.raises(ConfigError):
        latency_memory_sweep(ModelConfig(**SMALL), [16], mode="sideways")
    with pytest.raises(ConfigError):
        latency_memory_sweep(ModelConfig(**SMALL), [0])


@pytest.mark.parametrize(
    "attention,position,expected",
    [
        ("full", "rope", "sdpa (cpu)"),
        ("sliding_window", "rope", "torch-cpu block-sparse"),
        ("full", "shaw", "torch-cpu block-sparse"),  # relative tables run the block-sparse path
    ],
)
def test_the_record_names_the_backend_that_ran(attention, position, expected):
    cfg = ModelConfig(attention=attention, position=position, **SMALL)
    with kernels.record_backends() as ran:  # the independent witness: a plain forward of the same model
        import torch

        from models import build_model

        with torch.no_grad():
            build_model(cfg).eval()(torch.zeros(1, 128, dtype=torch.long))
    rec = latency_memory_sweep(cfg, [128], repeats=1, min_repeats=1)[0]
    assert rec["backend"] == expected == " + ".join(dict.fromkeys(ran))
    assert model_summary(cfg, seq_len=128)["backend"] == expected  # the model card records the same
    assert rec["timer"] == "perf_counter" and rec["dtype"] == "float32"


def test_a_mechanism_without_kernels_attention_says_so():
    rec = latency_memory_sweep(ModelConfig(attention="linear", **SMALL), [32], repeats=1, min_repeats=1)[0]
    assert rec["status"] == "ok" and "no kernels.attention call" in rec["backend"]


BIG = ModelConfig(n_layers=12, d_model=512, n_heads=16)


@pytest.fixture
def roomy(monkeypatch):
    """Lift the per-request memory budget and the server's pool, so the time budget / the stop is what
    ends a run."""
    monkeypatch.setenv("EXPLORER_REQUEST_BUDGET", "64G")
    monkeypatch.setenv("EXPLORER_SERVER_MEMORY", "64G")


def test_the_budget_holds_for_the_first_length(roomy):
    """One 8192-token forward_backward of a 12-layer model takes far longer than 0.5 s on a CPU:
    the run is abandoned between modules instead of holding the sweep for minutes. (The memory
    budget is lifted so that the time budget is what stops it.)"""
    t0 = time.perf_counter()
    rec = latency_memory_sweep(BIG, [8192], "forward_backward", time_budget_s=0.5)[0]
    took = time.perf_counter() - t0
    assert rec["status"] == "timeout" and "budget" in rec["reason"]
    assert took < 15, took  # model build + one abandoned module, not the whole run


def test_cancel_stops_between_modules_and_frees_the_lock(roomy):
    stop = threading.Event()
    threading.Timer(0.3, stop.set).start()
    t0 = time.perf_counter()
    recs = latency_memory_sweep(BIG, [2048, 4096], "forward_backward", time_budget_s=60, should_stop=stop.is_set)
    assert time.perf_counter() - t0 < 10
    assert [r["status"] for r in recs] == ["cancelled", "cancelled"]
    # the measurement slot is free: the next sweep runs at once
    assert latency_memory_sweep(ModelConfig(**SMALL), [16], repeats=1, min_repeats=1)[0]["status"] == "ok"


def test_timings_say_when_other_requests_ran():
    quiet = latency_memory_sweep(ModelConfig(**SMALL), [16], repeats=1, min_repeats=1)[0]
    assert quiet["others"] == 0
    release = threading.Event()

    def other_request():
        with LOAD.busy():
            release.wait(10)

    t = threading.Thread(target=other_request)
    t.start()
    try:
        busy = latency_memory_sweep(ModelConfig(**SMALL), [16], repeats=1, min_repeats=1)[0]
    finally:
        release.set()
        t.join()
    assert busy["others"] == 1


def test_reversible_stacks_are_compared_with_standard_layers():
    """The memory sweep of a reversible stack shows the same model with standard layers beside it."""
    from models import ModelConfig

    assert sweep_baseline(ModelConfig(layer="reversible"))[0] == "standard layers"
    assert sweep_baseline(ModelConfig(attention="sliding_window"))[0] == "full"
    assert sweep_baseline(ModelConfig()) == (None, None)
    fig, reading, rec = sweep_outputs(ModelConfig(layer="reversible", n_layers=2), [64], "forward")
    names = [tr.name for tr in fig.data]
    assert any(n and n.startswith("standard layers (baseline)") for n in names)
    assert rec["baseline"] is not None and rec["baseline_name"] == "standard layers"
    assert "forward_backward" in reading


def test_nested_busy_counts_one_request():
    with LOAD.busy(), LOAD.busy():
        assert LOAD.snapshot()[0] == 1
        rec = latency_memory_sweep(ModelConfig(**SMALL), [16], repeats=1, min_repeats=1)[0]
    assert rec["others"] == 0 and LOAD.snapshot()[0] == 0


def test_the_default_lengths_reach_16384_for_a_sparse_pattern_and_full_stops_marked():
    """The default sweep reaches 16384 tokens on the CPU for a structured pattern; full attention, whose time
    grows like L², stops at its time budget, and the stop is a record drawn on the figure. The budget here
    is 3x the sparse pattern's own time at 16384 measured just before (so the test holds on a loaded
    machine): full attention's quadratic cost is many times that."""
    from explorer.analysis.cost.sweep import DEFAULT_LENGTHS
    from explorer.figures.latency import sweep_figure
    from explorer.figures.readings import sweep_reading
    from explorer.runtime.limits import SWEEP_BUDGET_S, parse_lengths

    assert max(DEFAULT_LENGTHS) == 16384 and parse_lengths(",".join(map(str, DEFAULT_LENGTHS))) == list(DEFAULT_LENGTHS)
    sparse = latency_memory_sweep(
        ModelConfig(attention="sliding_window", **SMALL),
        DEFAULT_LENGTHS,
        repeats=1,
        min_repeats=1,
        time_budget_s=SWEEP_BUDGET_S,
    )
    assert [r["status"] for r in sparse] == ["ok"] * len(DEFAULT_LENGTHS)
    assert all(r["backend"] == "torch-cpu block-sparse" for r in sparse)
    budget = 3 * sparse[-1]["ms"] / 1000
    full = latency_memory_sweep(ModelConfig(**SMALL), DEFAULT_LENGTHS, repeats=1, min_repeats=1, time_budget_s=budget)
    statuses = [r["status"] for r in full]
    assert statuses[-1] == "timeout" and statuses[0] == "ok", statuses
    first_stop = statuses.index("timeout")
    assert statuses[first_stop:] == ["timeout"] * (len(statuses) - first_stop)  # the longer lengths skipped
    fig = sweep_figure(sparse, full, "sliding_window")
    marks = [t for t in fig.data if t.name == "full (baseline): TIMEOUT" and t.xaxis == "x"]
    assert marks and 16384 in list(marks[0].x)
    reading = sweep_reading(sparse, full, "sliding_window")
    assert f"full stopped at L={full[first_stop]['seq_len']} (timeout" in reading


def test_full_attention_alone_points_to_a_structured_pattern():
    _, reading, rec = sweep_outputs(ModelConfig(**SMALL), [32], "forward")
    assert rec["baseline"] is None and "choose sliding_window, longformer or bigbird" in reading
    _, reading, _ = sweep_outputs(ModelConfig(attention="sliding_window", **SMALL), [32], "forward")
    assert "choose sliding_window" not in reading and "`sdpa (cpu)` (full)" in reading
