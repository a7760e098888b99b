"""Parallel hybrid layers (Falcon-H1, TII 2025): the layer formula in float64 from the block's own parts, two
properties that need no reference (a mixer equal to the attention doubles its write; a silent mixer is the
standard model), the mixer's own record and map, the parameter count, a training step, and the refusals."""

from functools import partial

import pytest
import torch
from stacks import draw_tokens, model_from, stack_context

from models import ConfigError, ModelConfig, build_model
from models.layers.parallel import mixer_config

BASE = dict(n_layers=2, d_model=32, n_heads=4, max_len=64, layer="parallel_hybrid")
_model = partial(model_from, BASE)
_tokens = partial(draw_tokens, n=20)


@pytest.mark.parametrize("mixer,placement", [("mamba2", "pre"), ("linear", "pre"), ("linear", "post")])
def test_each_layer_adds_attention_and_mixer_of_one_normed_input(mixer, placement):
    """Pre: x + Attn(N(x)) + Mixer(N(x)), then x + FFN(N(x)); post: N(x + Attn(x) + Mixer(x)), N(x + FFN(x))."""
    model = _model(parallel_mixer=mixer, norm_placement=placement, ffn="swiglu").double().eval()
    t = _tokens()
    ctx = stack_context(model, t)
    x = model.embed(t)
    for b in model.stack.blocks:
        info = ctx.begin_layer(x)
        if placement == "pre":
            h = b.res_attn.norm(x)
            x = x + b.attn(h, ctx, info) + b.mixer(h, ctx, ctx.begin_layer(x))
            x = x + b.ffn(b.res_ffn.norm(x))[0]
        else:
            x = b.res_attn.norm(x + b.attn(x, ctx, info) + b.mixer(x, ctx, ctx.begin_layer(x)))
            x = b.res_ffn.norm(x + b.ffn(x)[0])
    want = model.head(model.final_norm(x))
    got = model(t).logits
    assert got.dtype == torch.float64
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


def test_a_mixer_with_the_attentions_weights_doubles_its_write():
    """With parallel_mixer='full' and the mixer's weights copied from the attention, each layer writes 2 Attn(N(x))."""
    model = _model(parallel_mixer="full", n_layers=1).double().eval()
    b = model.stack.blocks[0]
    b.mixer.load_state_dict(b.attn.state_dict())
    t = _tokens()
    ctx = stack_context(model, t)
    x = model.embed(t)
    x = x + 2 * b.attn(b.res_attn.norm(x), ctx, ctx.begin_layer(x))
    x = x + b.ffn(b.res_ffn.norm(x))[0]
    torch.testing.assert_close(model(t).logits, model.head(model.final_norm(x)), rtol=1e-12, atol=1e-12)


def test_a_silent_mixer_gives_the_standard_models_logits():
    """Zero out_proj in the mixer: the same weights in a standard model give the same logits."""
    par = _model(parallel_mixer="linear").eval()
    std = build_model(ModelConfig(**{**BASE, "layer": "standard"})).eval()
    state = {k: v for k, v in par.state_dict().items() if ".mixer." not in k}
    std.load_state_dict(state)
    t = _tokens()
    differs = (par(t).logits - std(t).logits).abs().max()
    assert differs > 1e-3  # the mixer matters while it writes
    with torch.no_grad():
        for b in par.stack.blocks:
            b.mixer.out_proj.weight.zero_()
    torch.testing.assert_close(par(t).logits, std(t).logits, rtol=0, atol=1e-6)


def test_the_mixers_record_and_map_sit_beside_the_attentions():
    model = _model(parallel_mixer="linear")
    out = model(_tokens(B=1), return_attention=True)
    assert len(out.layers) == BASE["n_layers"] and len(out.attentions) == BASE["n_layers"]
    for i, info in enumerate(out.layers):
        mix = info.parallel
        assert mix.index == info.index == i and mix.input is info.input
        assert mix.attention.shape == info.attention.shape == (1, 4, 20, 20)
        assert not torch.allclose(mix.attention, info.attention)  # linear attention's map, not softmax's
        torch.testing.assert_close(info.attention.sum(-1), torch.ones(1, 4, 20))
    assert (
        model.stack.attention(1) is model.stack.blocks[1].attn and model.stack.mixer(1) is model.stack.blocks[1].mixer
    )


def test_mamba2_beside_attention_reports_its_implicit_map():
    model = _model()  # parallel_mixer defaults to mamba2
    assert model.cfg.parallel_mixer == "mamba2"
    out = model(_tokens(B=1), return_attention=True)
    info = out.layers[0]
    mix = info.parallel.attention  # (1, h_ssm, L, L): the SSM's implicit attention, causal, rows not normalised
    assert mix.shape[-2:] == (20, 20) and torch.equal(mix.triu(1), torch.zeros_like(mix))
    assert not torch.allclose(mix.sum(-1), torch.ones_like(mix.sum(-1)))
    torch.testing.assert_close(info.attention.sum(-1), torch.ones(1, 4, 20))


def test_the_parameter_count_is_counted_before_building():
    for fields in (
        {"parallel_mixer": "linear"},
        {"parallel_mixer": "full", "n_kv_heads": 2},
        {"ffn": "none", "ssm_heads": 8, "ssm_head_dim": 16, "attn_bias": "all"},
    ):
        cfg = ModelConfig(**{**BASE, **fields})
        assert cfg.approx_params() == sum(p.numel() for p in build_model(cfg).parameters()), fields


def test_one_training_step_moves_both_branches_and_lowers_the_loss():
    model = _model(parallel_mixer="linear")
    t = _tokens(B=4, n=16)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)

    def loss():
        logits = model(t[:, :-1]).logits
        return torch.nn.functional.cross_entropy(logits.flatten(0, 1), t[:, 1:].flatten())

    first = loss()
    first.backward()
    b = model.stack.blocks[0]
    for w in (b.attn.out_proj.weight, b.mixer.out_proj.weight, b.mixer.q_proj.weight):
        assert w.grad is not None and torch.isfinite(w.grad).all() and w.grad.abs().sum() > 0
    opt.step()
    opt.zero_grad()
    assert loss().item() < first.item()


def test_the_attention_branchs_own_terms_stay_off_the_mixer():
    cfg = ModelConfig(**BASE, parallel_mixer="linear", attn_sinks=True, ablate_heads="0.1")
    mix = mixer_config(cfg)
    assert (mix.attention, mix.attn_sinks, mix.ablate_heads, mix.layer) == ("linear", False, "", "standard")
    model = build_model(cfg)
    assert model.stack.blocks[0].attn.sinks is not None and model.stack.blocks[0].mixer.sinks is None


@pytest.mark.parametrize(
    "fields,field,words",
    [
        ({"parallel_mixer": "nope"}, "parallel_mixer", "one of"),
        ({"parallel_mixer": "linear", "memory": "xl"}, "memory", "two mixers"),
        ({"parallel_mixer": "linear", "position": "t5"}, "parallel_mixer", "position"),
        ({"parallel_mixer": "mamba2", "causal": False}, "parallel_mixer", "causal"),
    ],
)
def test_refusals_name_the_field_and_the_reason(fields, field, words):
    with pytest.raises(ConfigError) as e:
        ModelConfig(**{**BASE, **fields}).validate()
    assert e.value.field == field and words in str(e.value)


def test_views_that_read_one_attention_per_layer_take_the_attention_branch():
    from models.blocks import layer_attentions
    from models.long_context import pooled_maps

    model = _model(ssm_heads=8, ssm_head_dim=8)  # the mixer's 8 heads tell its map from attention's 4
    assert layer_attentions(model) == [b.attn for b in model.stack.blocks]
    result = pooled_maps(model, _tokens(B=1, n=96))
    assert len(result.maps) == BASE["n_layers"]
    assert all(m.mass.shape[1] == 4 for m in result.maps)
