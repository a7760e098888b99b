"""The schedule's ``:dense`` modifier (models/schedule.py): a layer whose FFN is ``dense_ffn`` of width
``dense_d_ff`` instead of the model's (DeepSeek-V3's first layers, Llama 4's layers between MoE layers).

References are written here: the SwiGLU formula ``W2 (silu(x W) * (x V))`` in float64 on the layer's own
weights, the parameter count summed from the built modules, and the routing statistics' rows."""

import pytest
import torch

from explorer.analysis.views.experts import expert_view
from models import ConfigError, ModelConfig, build_model
from models.schedule import layer_kinds, parse

SMALL = dict(n_layers=4, d_model=32, n_heads=4, max_len=64, vocab_size=64, seed=5)


def _cfg(**kw):
    return ModelConfig(**{**SMALL, **kw}).validate()


def test_parse_reads_dense_alone_and_with_nope():
    kinds = parse("mla:dense,full:nope:dense*2,chunked")
    assert [(k.attention, k.nope, k.dense) for k in kinds] == [
        ("mla", False, True),
        ("full", True, True),
        ("full", True, True),
        ("chunked", False, False),
    ]
    assert [k.token for k in kinds] == ["mla:dense", "full:nope:dense", "full:nope:dense", "chunked"]


def test_dense_layers_run_a_swiglu_of_their_own_width_and_the_others_route():
    cfg = _cfg(ffn="moe", layer_schedule="full:dense,full*3", dense_d_ff=40)
    model = build_model(cfg).double()
    blocks = model.stack.blocks
    dense = blocks[0].ffn
    assert dense.w.weight.shape == (40, 32) and dense.w2.weight.shape == (32, 40)
    assert all(hasattr(b.ffn, "experts") for b in blocks[1:])
    x = torch.randn(2, 7, 32, dtype=torch.float64)
    y, aux = dense(x)
    w, v, w2 = dense.w.weight, dense.v.weight, dense.w2.weight
    a = x @ w.T
    ref = ((a / (1 + torch.exp(-a))) * (x @ v.T)) @ w2.T  # silu(a) = a * sigmoid(a)
    assert torch.allclose(y, ref, atol=1e-12) and aux == {}
    assert cfg.layer_config(0).ffn == "swiglu" and cfg.layer_config(0).d_ff == 40
    assert cfg.layer_config(1).ffn == "moe" and cfg.layer_config(1).d_ff is None


@pytest.mark.parametrize(
    "fields",
    [
        dict(ffn="moe", layer_schedule="full:dense,full*3"),
        dict(ffn="switch", layer_schedule="full:dense*2,sliding_window", window=4, dense_d_ff=24),
        dict(ffn="moe", layer_schedule="full,full:dense", dense_ffn="gelu", dense_d_ff=50),
        dict(ffn="gelu", layer_schedule="full:dense,full", d_ff=16),
    ],
)
def test_parameter_estimate_counts_each_layers_own_ffn(fields):
    cfg = _cfg(**fields)
    model = build_model(cfg)
    assert cfg.approx_params() == sum(p.numel() for p in model.parameters())


def test_forward_and_backward_reach_the_dense_layer():
    cfg = _cfg(ffn="moe", layer_schedule="full:dense,full*3")
    model = build_model(cfg)
    tokens = torch.randint(0, 64, (2, 9))
    out = model(tokens)
    (out.logits.sum() + out.aux_loss).backward()
    grads = [p.grad for p in model.stack.blocks[0].ffn.parameters()]
    assert all(g is not None and g.abs().sum() > 0 for g in grads)


def test_a_dense_layer_changes_the_output_against_the_uniform_moe():
    """The same seed without ':dense': layer 0 then routes, so the logits differ (the modifier is not a no-op)."""
    tokens = torch.randint(0, 64, (1, 9))
    dense = build_model(_cfg(ffn="moe", layer_schedule="full:dense,full*3"))(tokens).logits
    uniform = build_model(_cfg(ffn="moe", layer_schedule="full*4"))(tokens).logits
    assert (dense - uniform).abs().max() > 1e-3


def test_the_experts_view_shows_only_the_routed_layers():
    cfg = _cfg(ffn="moe", layer_schedule="full,full:dense")
    out = build_model(cfg)(torch.randint(0, 64, (1, 11)))
    view = expert_view(cfg, out.layers)
    assert view.layers == [0, 2] and view.counts.shape[0] == 2
    assert [k.dense for k in layer_kinds(cfg)] == [False, True, False, True]
    assert all(int(c.sum()) == 11 * cfg.top_k for c in view.counts)  # every token's top-k choices counted


@pytest.mark.parametrize(
    "fields, field, words",
    [
        (dict(dense_d_ff=8), "dense_d_ff", "':dense' layer"),
        (dict(dense_ffn="gelu"), "dense_ffn", "':dense' layer"),
        (dict(layer_schedule="full:dense,full", layer="macaron"), "layer_schedule", "standard"),
        (dict(layer_schedule="full:dense,full", ffn="none"), "layer_schedule", "ffn='none'"),
        (dict(layer_schedule="full:dense:dense"), "layer_schedule", "at most once"),
    ],
)
def test_refusals_name_the_field_and_the_reason(fields, field, words):
    with pytest.raises(ConfigError) as e:
        _cfg(**fields)
    assert e.value.field == field and words in str(e.value)


def test_dense_ffn_takes_only_dense_keys():
    with pytest.raises(ConfigError) as e:
        _cfg(layer_schedule="full:dense,full", dense_ffn="moe")
    assert e.value.field == "dense_ffn" and "swiglu" in str(e.value)


def test_round_trip_keeps_the_dense_fields():
    cfg = _cfg(ffn="moe", layer_schedule="full:dense,full*3", dense_d_ff=40, dense_ffn="geglu")
    again = ModelConfig.from_dict(cfg.to_dict())
    assert again == cfg and again.layer_config(0).ffn == "geglu"
