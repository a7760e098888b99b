"""Dense feed-forward variants against the formulas of catalogue section 6."""

import pytest
import torch
import torch.nn.functional as F

from models.config import ModelConfig
from models.ffn import FFN, ffn_hidden_size

D = 12
DENSE = {"relu": F.relu, "gelu": F.gelu, "swish": lambda t: t * torch.sigmoid(t)}
GATED = {"glu": torch.sigmoid, "geglu": F.gelu, "swiglu": lambda t: t * torch.sigmoid(t)}


def cfg_for(key, **kw):
    return ModelConfig(**{"d_model": D, "n_heads": 2, "ffn": key, **kw})


def build(key, **kw):
    torch.manual_seed(0)
    return FFN[key].build(cfg_for(key, **kw))


@pytest.mark.parametrize("key", list(FFN))
def test_registry_entry(key):
    v = FFN[key]
    assert v.key == key and v.paper and v.summary
    if key == "none":
        assert v.build is None
        return
    ffn = build(key)
    x = torch.randn(2, 5, D, requires_grad=True)
    tokens = torch.randint(0, 256, (2, 5))
    y, aux = ffn(x, tokens=tokens)
    assert y.shape == x.shape and isinstance(aux, dict)
    y2, _ = ffn(x)  # tokens are optional
    assert y2.shape == x.shape
    (y.square().sum() + sum(v.sum() for v in aux.values() if torch.is_tensor(v))).backward()
    assert x.grad is not None
    outs = ffn.output_parameters()
    assert outs and all(any(o is p for p in ffn.parameters()) for o in outs)
    assert all(o.grad is not None for o in outs)


@pytest.mark.parametrize("key", sorted(DENSE))
def test_dense_formula(key):
    ffn = build(key)
    x = torch.randn(3, D)
    w1, b1, w2, b2 = ffn.w1.weight, ffn.w1.bias, ffn.w2.weight, ffn.w2.bias
    torch.testing.assert_close(ffn(x)[0], DENSE[key](x @ w1.T + b1) @ w2.T + b2)
    assert ffn(x)[1] == {}
    assert w1.shape == (4 * D, D) and ffn.output_parameters() == [w2]


@pytest.mark.parametrize("key", sorted(GATED))
def test_gated_formula_and_no_biases(key):
    ffn = build(key)
    x = torch.randn(3, D)
    W, V, W2 = ffn.w.weight, ffn.v.weight, ffn.w2.weight
    torch.testing.assert_close(ffn(x)[0], (GATED[key](x @ W.T) * (x @ V.T)) @ W2.T)
    assert all(p.dim() == 2 for p in ffn.parameters())  # Shazeer 2020: no biases
    assert ffn.output_parameters() == [W2]


@pytest.mark.parametrize("d", [12, 16, 100, 128])
def test_d_ff_rule_and_parameter_matching(d):
    for key in DENSE:
        assert ffn_hidden_size(cfg_for(key, d_model=d)) == 4 * d
    for key in GATED:
        h = ffn_hidden_size(cfg_for(key, d_model=d))
        assert h == round(8 * d / 3)
        n_gated = sum(p.numel() for p in FFN[key].build(cfg_for(key, d_model=d)).parameters())
        assert n_gated == 3 * d * h
        n_dense = 2 * d * 4 * d  # weights of the 4d dense FFN
        assert abs(n_gated - n_dense) <= 2 * d  # within one hidden unit's worth (rounding)


@pytest.mark.parametrize("key", sorted(DENSE) + sorted(GATED))
def test_d_ff_override(key):
    assert ffn_hidden_size(cfg_for(key, d_ff=7)) == 7
    ffn = FFN[key].build(cfg_for(key, d_ff=7))
    assert ffn.w2.weight.shape == (D, 7)
