"""models.long_context.pooled_maps against the model's own dense effective attention pooled the same way,
for every structured pattern, position encodings with and without score modifiers, GQA, sinks,
linear / performer (analytic) and a mechanism with only a dense map."""

import pytest
import torch
import torch.nn.functional as F

from kernels import pool_probs
from models import ConfigError, ModelConfig, build_model
from models.attention import PATTERNS
from models.long_context import pooled_maps

STATS = ("mass", "entropy", "distance", "sink", "local")


def _model(dtype=torch.float64, **kw):
    cfg = ModelConfig(n_layers=2, d_model=32, n_heads=4, max_len=256, **kw)
    return build_model(cfg).eval().to(dtype)


def _check(model, L=150, tol=1e-9, method=None):
    tokens = torch.randint(0, 256, (1, L), generator=torch.Generator().manual_seed(0))
    res = pooled_maps(model, tokens, sink_k=3, window=9)
    with torch.no_grad():
        out = model(tokens, return_attention=True)
    assert len(res.maps) == len(out.attentions) == model.cfg.n_layers and res.layers == [0, 1]
    for pm, probs in zip(res.maps, out.attentions):
        ref = pool_probs(probs.double(), pm.block_q, pm.block_k, sink_k=3, window=9)
        for name in STATS:
            torch.testing.assert_close(getattr(pm, name).double(), getattr(ref, name), atol=tol, rtol=tol, msg=name)
    if model.cfg.causal:
        want = F.cross_entropy(out.logits[0, :-1].double(), tokens[0, 1:], reduction="none")
        torch.testing.assert_close(res.loss[0].double(), want, atol=1e-5, rtol=1e-5)
    else:
        assert res.loss is None
    if method is not None:
        assert res.method == method
    return res


@pytest.mark.parametrize("attention", list(PATTERNS))
def test_every_pattern_with_rope_and_gqa(attention):
    _check(
        _model(attention=attention, position="rope", n_kv_heads=2, window=16, stride=8, block_size=16), method="kernels"
    )


@pytest.mark.parametrize(
    "position,causal,extra",
    [
        ("alibi", False, {}),
        ("t5", True, {}),
        ("shaw", True, {"n_sinks": 2}),
        ("xl", True, {}),
        ("sinusoidal", False, {}),
        ("none", True, {"softcap": 5.0}),
        ("learned", True, {"n_kv_heads": 1}),
    ],
)
@pytest.mark.parametrize("attention", ["full", "sliding_window", "bigbird"])
def test_positions_sinks_and_causality(attention, position, causal, extra):
    _check(_model(attention=attention, position=position, causal=causal, window=16, **extra), method="kernels")


@pytest.mark.parametrize("attention,causal", [("linear", True), ("linear", False), ("performer", True)])
def test_linear_and_performer_analytically(attention, causal):
    _check(
        _model(torch.float32, attention=attention, causal=causal, position="rope" if causal else "sinusoidal"),
        tol=2e-5,
        method="analytic (feature maps)",
    )


def test_dense_effective_map_up_to_its_length():
    res = _check(_model(torch.float32, attention="lsh", position="rope"), tol=2e-5, method="dense effective map")
    assert "lsh" in res.notes[0]
    with pytest.raises(ConfigError, match="at most 100 tokens.*lsh"):
        pooled_maps(_model(torch.float32, attention="lsh"), torch.zeros(1, 101, dtype=torch.long), dense_max_len=100)


def test_per_pair_bias_takes_the_dense_map():
    res = _check(_model(position="deberta"), tol=2e-5, method="dense effective map")
    assert "deberta" in res.notes[0]


def test_long_sequence_keeps_to_the_grid():
    """4096 tokens, 64-token cells: 64 x 64 per head, each query block's masses sum to one."""
    model = _model(torch.float32, attention="sliding_window", window=32)
    res = pooled_maps(model, torch.randint(0, 256, (1, 4096)), max_cells=64)
    for pm in res.maps:
        assert pm.mass.shape == (1, 4, 64, 64) and pm.entropy.shape == (1, 4, 4096)
        torch.testing.assert_close(pm.mass.sum(-1), torch.ones(1, 4, 64))
        assert (pm.local > 0.999).all()  # a 32-key window: every key it reads is inside |j - i| < 64
    assert res.loss.shape == (1, 4095) and torch.isfinite(res.loss).all()


def test_bad_arguments_name_their_field():
    model = _model(torch.float32)
    tokens = torch.zeros(1, 10, dtype=torch.long)
    for field, kw in (
        ("max_cells", {"max_cells": 0}),
        ("max_cells", {"max_cells": 300}),
        ("sink_k", {"sink_k": -1}),
        ("window", {"window": 0}),
    ):
        with pytest.raises(ConfigError, match=field):
            pooled_maps(model, tokens, **kw)
    with pytest.raises(ConfigError, match="tokens"):
        pooled_maps(model, torch.full((1, 5), 300))
    with pytest.raises(ConfigError, match="memory"):
        pooled_maps(_model(torch.float32, memory="xl", mem_len=8, segment_len=8), tokens)
