"""The residual-stream gradient norms where the stream is not one tensor per layer: a segmented memory
(measured over every segment's block input, against forward pre-hooks) and a reversible stack (it
recomputes each layer's input inside its autograd Function, so there is none to measure: None, with
the reason)."""

import math

import pytest
import torch

from explorer.analysis import gradient_norms, input_batch, next_token_loss
from models import ModelConfig, build_model

TINY = dict(n_layers=2, d_model=16, n_heads=2)


def test_residual_gradient_of_a_segmented_memory_is_measured_over_all_segments():
    cfg = ModelConfig(memory="xl", segment_len=6, mem_len=6, **TINY)
    got = gradient_norms(cfg, seq_len=16, batch=2, seed=3)
    assert all(v is not None and v > 0 for v in got["residual"]) and "segments" in " ".join(got["notes"])
    # independent reference: the inputs each block receives, captured by forward pre-hooks
    model = build_model(cfg).train()
    seen = {i: [] for i in range(cfg.n_layers)}
    hooks = [
        b.register_forward_pre_hook(lambda m, args, i=i: seen[i].append(args[0]))
        for i, b in enumerate(model.stack.blocks)
    ]
    (tokens,) = input_batch(cfg, 16, 2, 3)  # one input: a decoder-only model
    loss = next_token_loss(model(tokens).logits, tokens)
    for h in hooks:
        h.remove()
    for i in range(cfg.n_layers):
        assert len(seen[i]) == 3  # segments of 6, 6, 4
        grads = torch.autograd.grad(loss, seen[i], retain_graph=True)
        want = math.sqrt(sum(float((g.double() ** 2).sum()) for g in grads))
        assert got["residual"][i] == pytest.approx(want, rel=1e-6)


def test_reversible_residual_stays_none_with_the_reason():
    got = gradient_norms(ModelConfig(layer="reversible", **TINY), seq_len=8, batch=1)
    assert got["residual"] == [None, None] and "reversible" in got["notes"][0]
