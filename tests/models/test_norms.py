"""Norms and residual placements against the formulas of catalogue section 5."""
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from models.config import ModelConfig
from models.norms import EPS, NORM, NORM_PLACEMENT

D = 8


def _x(*shape, seed=0):
    torch.manual_seed(seed)
    return torch.randn(*shape, D) * 3 + 1


# ---------------------------------------------------------------------------- every norm
@pytest.mark.parametrize("key", list(NORM))
def test_norm_shape_dtype_gradient(key):
    v = NORM[key]
    assert v.key == key and v.paper and v.summary
    norm = v.build(D, ModelConfig(d_model=D, n_heads=2))
    x = _x(2, 3).requires_grad_()
    y = norm(x)
    assert y.shape == x.shape and y.dtype == x.dtype and torch.isfinite(y).all()
    (y * torch.randn_like(y)).sum().backward()
    assert x.grad is not None and torch.isfinite(x.grad).all()
    for p in norm.parameters():
        assert p.grad is not None


def _perturbed(norm):
    with torch.no_grad():  # move parameters off their init so the test sees them used
        for p in norm.parameters():
            p.add_(torch.randn_like(p) * 0.3)
    return norm


def test_layernorm_matches_torch():
    norm = _perturbed(NORM["layernorm"].build(D, None))
    x = _x(4, 5)
    want = nn.LayerNorm(D, eps=1e-5)
    want.load_state_dict({"weight": norm.weight.detach(), "bias": norm.bias.detach()})
    torch.testing.assert_close(norm(x), want(x))
    mu, var = x.mean(-1, keepdim=True), x.var(-1, unbiased=False, keepdim=True)
    torch.testing.assert_close(norm(x), (x - mu) / torch.sqrt(var + 1e-5) * norm.weight + norm.bias)


def test_rmsnorm_formula():
    norm = _perturbed(NORM["rmsnorm"].build(D, None))
    x = _x(4, 5)
    rms = torch.sqrt((x ** 2).mean(-1, keepdim=True) + 1e-5)
    torch.testing.assert_close(norm(x), x / rms * norm.weight)
    assert [p.shape for p in norm.parameters()] == [(D,)]


def test_scalenorm_formula():
    norm = NORM["scalenorm"].build(D, None)
    (g,) = list(norm.parameters())
    assert g.shape == () and abs(g.item() - math.sqrt(D)) < 1e-6
    x = _x(4, 5)
    torch.testing.assert_close(norm(x), math.sqrt(D) * x / x.norm(dim=-1, keepdim=True))
    assert torch.allclose(norm(x).norm(dim=-1), torch.full((4, 5), math.sqrt(D)))
    assert torch.isfinite(norm(torch.zeros(2, D))).all()


def test_adanorm_value_and_detached_gradient():
    norm = NORM["adanorm"].build(D, None)
    assert list(norm.parameters()) == []
    x = _x(3, 4).double().requires_grad_()
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


# ---------------------------------------------------------------------------- placements
def _placement(key, dropout=0.0):
    torch.manual_seed(0)
    cfg = ModelConfig(d_model=D, n_heads=2, norm="rmsnorm", norm_placement=key, dropout=dropout)
    made = []

    def make_norm():
        made.append(_perturbed(NORM["rmsnorm"].build(D, cfg)))
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
    x = _x(2, 3).requires_grad_()
    y = res(x, _sublayer())
    assert y.shape == x.shape
    y.sum().backward()
    assert x.grad is not None
    for m in made:  # the norms the placement asked for are registered submodules
        assert any(m is sub for sub in res.modules())


def test_final_norm_flags():
    flags = {k: v.build.final_norm for k, v in NORM_PLACEMENT.items()}
    want = {"post": False, "pre": True, "sandwich": True, "rezero": False, "none": False}
    assert {k: flags[k] for k in want} == want


@pytest.mark.parametrize("key", list(NORM_PLACEMENT))
def test_placement_formula(key):
    res, made = _placement(key)
    f = _sublayer()
    x = _x(2, 3)
    want = {
        "post": lambda: made[0](x + f(x)),
        "pre": lambda: x + f(made[0](x)),
        "sandwich": lambda: x + made[1](f(made[0](x))),
        "rezero": lambda: x + res.alpha * f(x),
        "none": lambda: x + f(x),
    }
    if key not in want:
        pytest.skip(f"no hand formula for {key}")
    torch.testing.assert_close(res(x, f), want[key]())
    assert len(made) == {"post": 1, "pre": 1, "sandwich": 2, "rezero": 0, "none": 0}[key]


def test_rezero_identity_at_init_and_learns():
    res, made = _placement("rezero")
    assert made == [] and res.alpha.item() == 0.0
    x = _x(2, 3)
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
    x = _x(4, 6)
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
        want = x / torch.sqrt((x ** 2).mean(-1, keepdim=True) + EPS) * norm.weight
    torch.testing.assert_close(got, want, rtol=0, atol=1e-12)
