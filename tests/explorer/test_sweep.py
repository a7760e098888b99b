"""latency_memory_sweep: records, never exceptions, for OOM, time-outs and invalid lengths."""
import pytest

from explorer import experiments as ex
from explorer.sweep import attention_backend_name
from models import ConfigError, ModelConfig

SMALL = dict(n_layers=2, d_model=32, n_heads=2)
KEYS = {"seq_len", "ms", "peak_bytes", "backend", "status", "reason"}


@pytest.mark.parametrize("mode", ["forward", "forward_backward"])
def test_ok_records_are_measured(mode):
    recs = ex.latency_memory_sweep(ModelConfig(**SMALL), [32, 16], mode, repeats=2, min_repeats=1)
    assert [r["seq_len"] for r in recs] == [16, 32]
    for r in recs:
        assert KEYS <= set(r) and r["status"] == "ok", r
        assert r["ms"] > 0 and r["peak_bytes"] > 0 and r["mode"] == mode
        assert r["backend"] == "sdpa (cpu)"


def test_impossible_length_is_an_oom_record_not_an_exception():
    recs = ex.latency_memory_sweep(ModelConfig(**SMALL), [16, 2 ** 40, 2 ** 41], repeats=1, min_repeats=1)
    assert [r["status"] for r in recs] == ["ok", "oom", "oom"]
    assert recs[1]["ms"] is None and "GiB" in recs[1]["reason"]


def test_over_budget_lengths_time_out_and_the_rest_are_skipped():
    recs = ex.latency_memory_sweep(ModelConfig(**SMALL), [16, 32, 64], time_budget_s=1e-9)
    assert [r["status"] for r in recs] == ["timeout"] * 3
    assert "budget" in recs[0]["reason"] and "skipped" in recs[1]["reason"]


def test_invalid_length_is_reported_with_the_reason():
    cfg = ModelConfig(position="learned", max_len=20, **SMALL)
    recs = ex.latency_memory_sweep(cfg, [16, 32], repeats=1, min_repeats=1)
    assert [r["status"] for r in recs] == ["ok", "invalid"]
    assert "max_len" in recs[1]["reason"]


def test_bad_mode_and_lengths_raise_config_error():
    with pytest.raises(ConfigError):
        ex.latency_memory_sweep(ModelConfig(**SMALL), [16], mode="sideways")
    with pytest.raises(ConfigError):
        ex.latency_memory_sweep(ModelConfig(**SMALL), [0])


@pytest.mark.parametrize("attention,position,expected", [
    ("full", "rope", "sdpa (cpu)"),
    ("sliding_window", "rope", "torch-cpu block-sparse"),
    ("full", "shaw", "torch-cpu block-sparse"),  # relative tables run the block-sparse path
])
def test_backend_name_follows_the_dispatch(attention, position, expected):
    assert attention_backend_name(ModelConfig(attention=attention, position=position), "cpu", 128) == expected


def test_reversible_stacks_are_compared_with_standard_layers():
    """The memory sweep of a reversible stack shows the same model with standard layers beside it."""
    from explorer import ui_handlers as h
    from models import ModelConfig

    assert h.sweep_baseline(ModelConfig(layer="reversible"))[0] == "standard layers"
    assert h.sweep_baseline(ModelConfig(attention="sliding_window"))[0] == "full"
    assert h.sweep_baseline(ModelConfig()) == (None, None)
    fig, reading, rec = h.sweep_outputs(ModelConfig(layer="reversible", n_layers=2), [64], "forward")
    names = [tr.name for tr in fig.data]
    assert any(n and n.startswith("standard layers (baseline)") for n in names)
    assert rec["baseline"] is not None and rec["baseline_name"] == "standard layers"
    assert "forward_backward" in reading
