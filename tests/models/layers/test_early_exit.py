"""Early exit (Elbayad et al. 2020; Schuster et al. 2022; catalogue section 8): exit depths, threshold one
is the plain model, an exited token keeps its exit layer's logits."""

from functools import partial

import torch
from stacks import draw_tokens, model_from

BASE = dict(n_layers=3, d_model=32, n_heads=4, max_len=128)
_model = partial(model_from, BASE)
_tokens = draw_tokens


def test_early_exit_depths_are_in_range_and_gradients_flow():
    model = _model(layer="early_exit", exit_threshold=0.02)
    out = model(_tokens())
    depth = out.layers[-1].exit_depth
    assert depth.shape == (2, 24) and depth.min() >= 1 and depth.max() <= 3
    out.logits.pow(2).mean().backward()
    assert model.stack.blocks[0].attn.q_proj.weight.grad.abs().sum() > 0


def test_early_exit_threshold_one_is_the_plain_model():
    ee = _model(layer="early_exit", exit_threshold=1.0)
    plain = _model()
    plain.load_state_dict(ee.state_dict())
    out = ee(_tokens())
    assert (out.layers[-1].exit_depth == 3).all()
    torch.testing.assert_close(out.logits, plain(_tokens()).logits, rtol=0, atol=0)


def test_early_exit_tokens_that_exit_keep_their_exit_layer_logits():
    ee = _model(layer="early_exit", exit_threshold=1e-9)  # every token exits after layer 1
    one = _model(n_layers=1)
    one.load_state_dict(
        {
            k: v
            for k, v in ee.state_dict().items()
            if not k.startswith("stack.blocks.") or k.startswith("stack.blocks.0.")
        }
    )
    out = ee(_tokens())
    assert (out.layers[-1].exit_depth == 1).all()
    torch.testing.assert_close(out.logits, one(_tokens()).logits, rtol=1e-5, atol=1e-5)
    for h in out.hidden_states[2:]:  # frozen states are copied forward
        torch.testing.assert_close(h, out.hidden_states[1])
