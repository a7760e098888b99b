"""The attention's own time: what the hooks on the attention cores add up is the time spent inside them,
and nothing else of the forward."""

import time

import pytest
import torch

from explorer.analysis.cost.core_timer import CoreTimer
from explorer.analysis.cost.sweep import latency_memory_sweep
from models import ModelConfig, build_model
from models.blocks import Attention

SMALL = dict(n_layers=3, d_model=32, n_heads=2)
CORE_S, FFN_S = 0.05, 0.2  # FFN_S exceeds any load-induced slack of the three cores


def test_the_timer_counts_the_cores_and_nothing_else():
    model = build_model(ModelConfig(**SMALL)).eval()
    tokens = torch.zeros(1, 16, dtype=torch.long)
    with torch.no_grad():
        model(tokens)  # the first forward's one-time costs, outside the measurement
    attn = [m for m in model.modules() if isinstance(m, Attention)]
    assert len(attn) == SMALL["n_layers"]
    # known delays: inside each core (a post-hook registered before the timer's) and in each FFN (outside)
    for m in attn:
        m.core.register_forward_hook(lambda *_a: time.sleep(CORE_S))
    ffns = [m for name, m in model.named_modules() if name.endswith(".ffn")]
    assert ffns
    for m in ffns:
        m.register_forward_pre_hook(lambda *_a: time.sleep(FFN_S))
    with CoreTimer(model, "cpu") as timer, torch.no_grad():
        timer.reset()
        t0 = time.perf_counter()
        model(tokens)
        whole = time.perf_counter() - t0
        got = timer.seconds()
    n = SMALL["n_layers"]
    assert n * CORE_S <= got < n * CORE_S + FFN_S  # the cores' delays, none of the FFNs'
    assert whole >= got + len(ffns) * FFN_S
    for m in attn:  # the timer's hooks are gone
        assert len(m.core._forward_pre_hooks) == 0


def test_a_forward_sweep_records_the_attention_alone_and_a_backward_does_not():
    fwd = latency_memory_sweep(ModelConfig(**SMALL), [64, 128], "forward", repeats=2, min_repeats=1)
    for r in fwd:
        assert r["status"] == "ok" and 0 < r["attn_ms"] < r["ms"]
    bwd = latency_memory_sweep(ModelConfig(**SMALL), [64], "forward_backward", repeats=1, min_repeats=1)
    assert bwd[0]["status"] == "ok" and bwd[0]["attn_ms"] is None


@pytest.mark.parametrize("attention", ["sliding_window", "linear"])
def test_every_mechanism_has_a_core_to_time(attention):
    model = build_model(ModelConfig(attention=attention, **SMALL))
    assert len(CoreTimer(model, "cpu").cores) == SMALL["n_layers"]
