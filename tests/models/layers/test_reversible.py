"""Reversible layers (RevNet, Gomez et al. 2017; Reformer, Kitaev et al. 2020; catalogue section 8):
gradients equal those without recomputation, activation memory is flat in depth, post-norm is refused."""

from functools import partial

import pytest
import torch
from stacks import draw_tokens, model_from, stack_context

from models import ConfigError, ModelConfig, choices

BASE = dict(n_layers=3, d_model=32, n_heads=4, max_len=128)
_model = partial(model_from, BASE)
_tokens = draw_tokens


def _reversible_reference(model, tokens):
    """The same weights, pre-norm, run with ordinary autograd (every activation stored)."""
    x = model.drop(model.embed(tokens))
    x1 = x2 = x
    ctx = stack_context(model, tokens, classifier=True)
    for block in model.stack.blocks:
        info = ctx.begin_layer(x1)
        y1 = x1 + block.res_attn.drop(block.attn(block.res_attn.norm(x2), ctx, info))
        y2 = x2 + block.res_ffn.drop(block.ffn(block.res_ffn.norm(y1), tokens)[0])
        x1, x2 = y1, y2
    return model.head(model.final_norm((x1 + x2) / 2))


@pytest.mark.parametrize("dropout", [0.0, 0.2])
@pytest.mark.parametrize("position", ["rope", "t5"])
def test_reversible_gradients_equal_those_without_recomputation(dropout, position):
    model = _model(layer="reversible", dropout=dropout, position=position)
    model.train()
    t = _tokens()
    model.random.reseed(1)  # the dropout masks of both passes come from the model's own source
    model(t).logits.pow(2).mean().backward()
    got = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    model.random.reseed(1)  # the dropout masks of both passes come from the model's own source
    _reversible_reference(model, t).pow(2).mean().backward()
    want = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    assert got.keys() == want.keys() and len(got) > 10
    for n in want:  # reconstruction X = Y - F(.) rounds at the scale of the stream: fp32 tolerance
        scale = float(want[n].abs().max())
        torch.testing.assert_close(got[n], want[n], rtol=1e-4, atol=1e-4 * scale, msg=n)


def test_reversible_recomputed_aux_losses_carry_gradients():
    if "moe" not in choices()["ffn"]:
        pytest.skip("moe not registered yet")
    model = _model(layer="reversible", ffn="moe")
    out = model(_tokens())
    assert out.aux_loss > 0
    out.aux_loss.backward()
    grads = [p.grad for n, p in model.named_parameters() if "ffn" in n and p.grad is not None]
    assert any(g.abs().sum() > 0 for g in grads)


def _saved_bytes(model, tokens):
    """Bytes of tensors saved for backward by the forward pass: what stays alive until backward
    (the reversible backward's recomputation saves one layer at a time, transiently)."""
    total = [0]

    def pack(t):
        total[0] += t.numel() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = model(tokens).logits.sum()
    loss.backward()
    return total[0]


def test_reversible_activation_memory_is_flat_in_depth():
    t = _tokens(2, 64)
    cfg = dict(d_model=32, n_heads=4, vocab_size=64)
    rev = [_saved_bytes(_model(**cfg, layer="reversible", n_layers=n), t % 64) for n in (2, 12)]
    std = [_saved_bytes(_model(**cfg, layer="standard", n_layers=n), t % 64) for n in (2, 12)]
    assert rev[1] <= 1.05 * rev[0], rev
    assert std[1] > 3 * std[0], std  # the measurement does see per-layer activations
    assert rev[1] < std[1] / 4


def test_reversible_rejects_post_norm_with_a_reason():
    with pytest.raises(ConfigError, match="norm_placement"):
        ModelConfig(**BASE, layer="reversible", norm_placement="post").validate()
    for placement in ("pre", "sandwich", "rezero", "none"):
        out = _model(layer="reversible", norm_placement=placement)(_tokens())
        assert torch.isfinite(out.logits).all()
