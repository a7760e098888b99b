"""The Universal Transformer (Dehghani et al. 2019) with ACT halting (Graves 2016; catalogue section 8):
shared weights, the timing signal before the shared block, the ponder cost."""

from functools import partial

import torch
from stacks import draw_tokens, model_from, stack_context

BASE = dict(n_layers=3, d_model=32, n_heads=4, max_len=128)
_model = partial(model_from, BASE)
_tokens = draw_tokens


def test_universal_shares_weights_across_steps():
    counts = {n: sum(p.numel() for p in _model(layer="universal", n_layers=n).parameters()) for n in (1, 2, 6)}
    assert len(set(counts.values())) == 1
    model = _model(layer="universal", n_layers=4)
    out = model(_tokens())
    assert len(model.stack.blocks) == 1 and len(out.hidden_states) == 4
    # a step is the shared block applied to state + timing signal: steps differ only by the signal
    assert not torch.allclose(out.hidden_states[1], out.hidden_states[2])


def test_universal_steps_apply_the_shared_block_after_the_timing_signal():
    from models.positions import sinusoidal_table

    model = _model(layer="universal", n_layers=3)
    t = _tokens()
    out = model(t)
    ctx = stack_context(model, t, classifier=True)
    table = sinusoidal_table(24, 32)
    x = model.embed(t)  # rope: nothing added at the embedding
    for step in range(3):
        x = model.stack.blocks[0](x + table + table[step], ctx, ctx.begin_layer(x))
    torch.testing.assert_close(out.logits, model.classify(x), rtol=1e-5, atol=1e-5)


def test_universal_act_ponder_cost_is_in_aux_loss():
    cfg = dict(layer="universal", act=True, ponder_weight=0.5, n_layers=4)
    model = _model(**cfg)
    out = model(_tokens())
    last = out.layers[-1]
    steps = last.act_steps
    assert ((steps >= 1) & (steps <= 4)).all() and steps.shape == (2, 24)
    torch.testing.assert_close(out.aux_loss, last.ponder_loss)
    # rho = N + R with the remainder R in (0, 1]
    assert 0.5 * steps.mean() < out.aux_loss <= 0.5 * (steps.mean() + 1)
    out.aux_loss.backward()
    assert model.stack.halt.weight.grad.abs().sum() > 0
    no_act = _model(**{**cfg, "act": False})(_tokens())
    assert no_act.aux_loss == 0


def test_universal_act_with_threshold_near_zero_halts_after_one_step():
    model = _model(layer="universal", act=True, act_threshold=1e-6, n_layers=4)
    out = model(_tokens())
    assert (out.layers[-1].act_steps == 1).all()
