"""Residual norm placements (post, pre, sandwich, res_post, rezero, none) against the formulas of the catalogue."""

import pytest
import torch
from norm_inputs import D, draw, perturbed
from torch import nn

from models.config import ModelConfig
from models.norms import NORM, NORM_PLACEMENT


def _placement(key, dropout=0.0):
    torch.manual_seed(0)
    cfg = ModelConfig(d_model=D, n_heads=2, norm="rmsnorm", norm_placement=key, dropout=dropout)
    made = []

    def make_norm():
        made.append(perturbed(NORM["rmsnorm"].build(D, cfg)))
        return made[-1]

    return NORM_PLACEMENT[key].build(cfg, make_norm), made


def _sublayer():
    torch.manual_seed(5)
    lin = nn.Linear(D, D)
    return lambda t: torch.tanh(lin(t))


@pytest.mark.parametrize("key", list(NORM_PLACEMENT))
def test_placement_metadata_and_gradients(key):
    v = NORM_PLACEMENT[key]
    assert v.key == key and v.paper and v.summary
    res, made = _placement(key)
    assert isinstance(res.final_norm, bool)
    x = draw(2, 3).requires_grad_()
    y = res(x, _sublayer())
    assert y.shape == x.shape
    y.sum().backward()
    assert x.grad is not None
    for m in made:  # the norms the placement asked for are registered submodules
        assert any(m is sub for sub in res.modules())


def test_final_norm_flags():
    flags = {k: v.build.final_norm for k, v in NORM_PLACEMENT.items()}
    want = {"post": False, "pre": True, "sandwich": True, "res_post": True, "rezero": False, "none": False}
    assert {k: flags[k] for k in want} == want


@pytest.mark.parametrize("key", list(NORM_PLACEMENT))
def test_placement_formula(key):
    res, made = _placement(key)
    f = _sublayer()
    x = draw(2, 3)
    want = {
        "post": lambda: made[0](x + f(x)),
        "pre": lambda: x + f(made[0](x)),
        "sandwich": lambda: x + made[1](f(made[0](x))),
        "res_post": lambda: x + made[0](f(x)),
        "rezero": lambda: x + res.alpha * f(x),
        "none": lambda: x + f(x),
    }
    if key not in want:
        pytest.skip(f"no hand formula for {key}")
    torch.testing.assert_close(res(x, f), want[key]())
    assert len(made) == {"post": 1, "pre": 1, "sandwich": 2, "res_post": 1, "rezero": 0, "none": 0}[key]


def test_rezero_identity_at_init_and_learns():
    res, made = _placement("rezero")
    assert made == [] and res.alpha.item() == 0.0
    x = draw(2, 3)
    f = _sublayer()
    torch.testing.assert_close(res(x, f), x)
    res(x, f).sum().backward()
    torch.testing.assert_close(res.alpha.grad, f(x).sum())
    with torch.no_grad():
        res.alpha.fill_(0.5)
    torch.testing.assert_close(res(x, f), x + 0.5 * f(x))


@pytest.mark.parametrize("key", sorted(set(NORM_PLACEMENT) & {"pre", "rezero", "none"}))
def test_dropout_hits_sublayer_only(key):
    res, _ = _placement(key, dropout=0.5)
    x = draw(4, 6)
    ones = lambda t: torch.ones_like(t)  # noqa: E731
    if key == "rezero":
        with torch.no_grad():
            res.alpha.fill_(1.0)
    res.eval()
    torch.testing.assert_close(res(x, ones), x + 1)
    res.train()
    delta = res(x, ones) - x  # residual path untouched; sublayer output is 0 or 2 (inverted dropout)
    kept = (delta - 2).abs() < 1e-5
    assert (kept | (delta.abs() < 1e-5)).all() and kept.any() and (~kept).any()
