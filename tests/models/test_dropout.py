"""Dropout draws from the model's own random source: never from torch's global RNG, the same masks for
the same seed whatever runs beside, inverted scaling, and nn.Dropout's behaviour without a source."""

import threading

import pytest
import torch

from models import ModelConfig, build_model
from models.dropout import Dropout, RandomSource

SMALL = dict(n_layers=2, d_model=32, n_heads=2, dropout=0.3)


def _tokens(seed=0):
    return torch.randint(0, 256, (2, 24), generator=torch.Generator().manual_seed(seed))


def test_a_training_forward_leaves_the_global_rng_alone():
    model = build_model(ModelConfig(**SMALL)).train()
    before = torch.get_rng_state()
    model(_tokens()).logits.sum().backward()
    assert torch.equal(torch.get_rng_state(), before)


def test_the_same_seed_gives_the_same_masks_whatever_draws_beside():
    model = build_model(ModelConfig(**SMALL)).train()
    model.random.reseed(7)
    first = model(_tokens()).logits.detach()
    model.random.reseed(7)
    noise = threading.Thread(target=lambda: [torch.rand(1000) for _ in range(50)])  # another thread's draws
    noise.start()
    torch.manual_seed(123)
    second = model(_tokens()).logits.detach()
    noise.join()
    assert torch.equal(first, second)
    model.random.reseed(8)
    assert not torch.equal(first, model(_tokens()).logits.detach())


@pytest.mark.parametrize("p", [0.2, 0.5])
def test_inverted_dropout_keeps_about_1_minus_p_scaled_by_its_inverse(p):
    drop = Dropout(p)
    drop.source = RandomSource(0)
    out = drop.train()(torch.ones(200_000))
    kept = out != 0
    assert abs(float(kept.float().mean()) - (1 - p)) < 0.01
    assert torch.allclose(out[kept], torch.full_like(out[kept], 1 / (1 - p)))
    assert torch.equal(drop.eval()(torch.ones(5)), torch.ones(5))


def test_without_a_source_it_is_nn_dropout():
    torch.manual_seed(0)
    ours = Dropout(0.4).train()(torch.ones(1000))
    torch.manual_seed(0)
    assert torch.equal(ours, torch.nn.Dropout(0.4).train()(torch.ones(1000)))
