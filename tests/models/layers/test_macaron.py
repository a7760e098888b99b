"""Macaron (Lu et al. 2019) against a hand-built reference with the same weights; Macaron and Sandwich both
need an FFN."""

from functools import partial

import pytest
import torch
from stacks import draw_tokens, model_from, stack_context

from models import ConfigError, ModelConfig

BASE = dict(n_layers=3, d_model=32, n_heads=4, max_len=64)
_model = partial(model_from, BASE)
_tokens = partial(draw_tokens, n=20)


@pytest.mark.parametrize("placement", ["pre", "post"])
def test_macaron_equals_two_half_ffn_steps_around_attention(placement):
    """Pre: x + 1/2 FFN1(N(x)); x + Attn(N(x)); x + 1/2 FFN2(N(x)). Post: N(x + ...) each time."""
    model = _model(layer="macaron", norm_placement=placement).eval()
    t = _tokens()
    ctx = stack_context(model, t)
    x = model.embed(t)
    for b in model.stack.blocks:
        info = ctx.begin_layer(x)
        if placement == "pre":
            x = x + 0.5 * b.ffn1(b.res_ffn1.norm(x))[0]
            x = x + b.attn(b.res_attn.norm(x), ctx, info)
            x = x + 0.5 * b.ffn2(b.res_ffn2.norm(x))[0]
        else:
            x = b.res_ffn1.norm(x + 0.5 * b.ffn1(x)[0])
            x = b.res_attn.norm(x + b.attn(x, ctx, info))
            x = b.res_ffn2.norm(x + 0.5 * b.ffn2(x)[0])
    want = model.head(model.final_norm(x))
    torch.testing.assert_close(model(t).logits, want, rtol=1e-5, atol=1e-5)


def test_macaron_ffns_have_separate_weights_and_both_get_gradients():
    model = _model(layer="macaron")
    model(_tokens()).logits.pow(2).mean().backward()
    b = model.stack.blocks[0]
    w1, w2 = b.ffn1.output_parameters()[0], b.ffn2.output_parameters()[0]
    assert w1 is not w2 and not torch.equal(w1, w2)
    assert w1.grad.abs().sum() > 0 and w2.grad.abs().sum() > 0


def test_macaron_adds_the_losses_of_both_expert_ffns():
    model = _model(layer="macaron", ffn="moe", n_layers=1)
    t = _tokens()
    out = model(t)
    b = model.stack.blocks[0]
    ctx = stack_context(model, t)
    x = model.embed(t)
    x1 = x + 0.5 * b.ffn1(b.res_ffn1.norm(x), t)[0]
    loss1 = b.ffn1(b.res_ffn1.norm(x), t)[1]["loss"]
    x2 = x1 + b.attn(b.res_attn.norm(x1), ctx, ctx.begin_layer(x1))
    loss2 = b.ffn2(b.res_ffn2.norm(x2), t)[1]["loss"]
    torch.testing.assert_close(out.aux_loss, loss1 + loss2)
    assert int(out.layers[0].experts.expert_counts.sum()) == 2 * t.numel() * model.cfg.top_k


def test_macaron_and_sandwich_need_an_ffn():
    for layer in ("macaron", "sandwich"):
        with pytest.raises(ConfigError) as e:
            ModelConfig(**BASE, layer=layer, ffn="none").validate()
        assert e.value.field == "ffn" and "gelu" in str(e.value)
