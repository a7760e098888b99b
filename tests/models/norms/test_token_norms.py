"""Token norms (layernorm, rmsnorm, scalenorm, adanorm) against the formulas of catalogue section 5, and
every norm key's shape, dtype and gradient."""

import math

import pytest
import torch
import torch.nn.functional as F
from norm_inputs import D, draw, perturbed
from torch import nn

from models.config import ModelConfig
from models.norms import EPS, NORM


@pytest.mark.parametrize("key", list(NORM))
def test_norm_shape_dtype_gradient(key):
    v = NORM[key]
    assert v.key == key and v.paper and v.summary
    norm = v.build(D, ModelConfig(d_model=D, n_heads=2))
    x = draw(2, 3).requires_grad_()
    y = norm(x)
    assert y.shape == x.shape and y.dtype == x.dtype and torch.isfinite(y).all()
    (y * torch.randn_like(y)).sum().backward()
    assert x.grad is not None and torch.isfinite(x.grad).all()
    for p in norm.parameters():
        assert p.grad is not None


def test_layernorm_matches_torch():
    norm = perturbed(NORM["layernorm"].build(D, None))
    x = draw(4, 5)
    want = nn.LayerNorm(D, eps=1e-5)
    want.load_state_dict({"weight": norm.weight.detach(), "bias": norm.bias.detach()})
    torch.testing.assert_close(norm(x), want(x))
    mu, var = x.mean(-1, keepdim=True), x.var(-1, unbiased=False, keepdim=True)
    torch.testing.assert_close(norm(x), (x - mu) / torch.sqrt(var + 1e-5) * norm.weight + norm.bias)


def test_rmsnorm_formula():
    norm = perturbed(NORM["rmsnorm"].build(D, None))
    x = draw(4, 5)
    rms = torch.sqrt((x**2).mean(-1, keepdim=True) + 1e-5)
    torch.testing.assert_close(norm(x), x / rms * norm.weight)
    assert [p.shape for p in norm.parameters()] == [(D,)]


def test_scalenorm_formula():
    norm = NORM["scalenorm"].build(D, None)
    (g,) = list(norm.parameters())
    assert g.shape == () and abs(g.item() - math.sqrt(D)) < 1e-6
    x = draw(4, 5)
    torch.testing.assert_close(norm(x), math.sqrt(D) * x / x.norm(dim=-1, keepdim=True))
    assert torch.allclose(norm(x).norm(dim=-1), torch.full((4, 5), math.sqrt(D)))
    assert torch.isfinite(norm(torch.zeros(2, D))).all()


def test_adanorm_value_and_detached_gradient():
    norm = NORM["adanorm"].build(D, None)
    assert list(norm.parameters()) == []
    x = draw(3, 4).double().requires_grad_()
    mu = x.mean(-1, keepdim=True)
    y = (x - mu) / torch.sqrt(((x - mu) ** 2).mean(-1, keepdim=True) + EPS)
    torch.testing.assert_close(norm(x), 1.0 * (1 - 0.1 * y) * y)
    # gradient: J_y^T (w * C (1 - k y)), with J_y the Jacobian of plain standardisation
    w = torch.randn_like(x)
    (got,) = torch.autograd.grad((norm(x) * w).sum(), x)
    std = F.layer_norm(x, (D,), eps=EPS)
    (want,) = torch.autograd.grad(std, x, grad_outputs=w * (1 - 0.1 * std.detach()))
    torch.testing.assert_close(got, want)
    (full,) = torch.autograd.grad((((1 - 0.1 * y) * y) * w).sum(), x)
    assert not torch.allclose(got, full)  # the detach matters


@pytest.mark.parametrize("key", ["layernorm", "rmsnorm"])
def test_float64_input_is_normalised_in_float64(key):
    """A float64 input keeps its precision (float32 internals were off by ~1e-7)."""
    d = 64
    norm = NORM[key].build(d, ModelConfig(d_model=d)).double()
    with torch.no_grad():
        norm.weight.uniform_(0.5, 1.5)
        if key == "layernorm":
            norm.bias.uniform_(-1, 1)
    x = torch.randn(5, d, dtype=torch.float64) * 3 + 1000.0  # a large mean: float32 loses digits
    got = norm(x)
    assert got.dtype == torch.float64
    if key == "layernorm":
        mu = x.mean(-1, keepdim=True)
        want = (x - mu) / torch.sqrt(((x - mu) ** 2).mean(-1, keepdim=True) + EPS) * norm.weight + norm.bias
    else:
        want = x / torch.sqrt((x**2).mean(-1, keepdim=True) + EPS) * norm.weight
    torch.testing.assert_close(got, want, rtol=0, atol=1e-12)
