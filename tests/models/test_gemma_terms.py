"""Gemma's two model terms, against their formulas in float64: ``embed_scale`` (the token embeddings times
``sqrt(d_model)`` before the first layer) and ``final_softcap`` (logits ``c * tanh(z / c)``); both leave the
parameter count as it was, default off, and are refused by name where no stack reads them."""

import math

import pytest
import torch

from models.config import ModelConfig
from models.errors import ConfigError
from models.model import build_model

BASE = dict(vocab_size=50, d_model=16, n_heads=2, n_layers=2, norm="rmsnorm", seed=3)


def _logits(**changes):
    model = build_model(ModelConfig(**BASE, **changes)).double().eval()
    return model


def test_defaults_leave_models_unchanged():
    c = ModelConfig()
    assert (c.embed_scale, c.final_softcap) == (False, None)


def test_embed_scale_is_the_embedding_times_sqrt_d():
    ids = torch.randint(0, 50, (2, 9), generator=torch.Generator().manual_seed(0))
    scaled, plain = _logits(embed_scale=True), _logits()
    with torch.no_grad():  # the same weights (one seed), the plain model's embedding scaled by hand (untied head)
        plain.embed.weight.mul_(math.sqrt(16))
        assert torch.allclose(scaled(ids).logits, plain(ids).logits, rtol=0, atol=1e-12)


def test_final_softcap_is_c_tanh_z_over_c():
    ids = torch.randint(0, 50, (2, 9), generator=torch.Generator().manual_seed(1))
    capped, plain = _logits(final_softcap=1.0), _logits()
    with torch.no_grad():
        z = plain(ids).logits
        got = capped(ids).logits
    assert torch.allclose(got, torch.tanh(z), rtol=0, atol=1e-15)
    assert got.abs().max() <= 1.0 and (got - z).abs().max() > 1e-3  # the cap bends these logits


def test_parameter_count_unchanged():
    for changes in (dict(embed_scale=True, final_softcap=30.0), {}):
        cfg = ModelConfig(**BASE, **changes)
        model = build_model(cfg)
        assert cfg.approx_params() == sum(p.numel() for p in model.parameters())
    assert ModelConfig(**BASE, embed_scale=True).approx_params() == ModelConfig(**BASE).approx_params()


@pytest.mark.parametrize(
    "changes, field",
    [
        (dict(final_softcap=0.0), "final_softcap"),
        (dict(final_softcap=float("inf")), "final_softcap"),
        (dict(embed_scale="maybe"), "embed_scale"),
        (dict(architecture="encoder_decoder", embed_scale=True), "embed_scale"),
        (dict(architecture="encoder_decoder", final_softcap=5.0), "final_softcap"),
    ],
)
def test_refusals_name_the_field(changes, field):
    with pytest.raises(ConfigError) as e:
        ModelConfig(**{**BASE, **changes}).validate()
    assert e.value.field == field
