"""Llama 4's mixture of experts (``moe_llama4``) against a float64 per-token loop of its formula
``y = shared(x) + sum_{e in top_k(x W_r)} expert_e(sigmoid(z_e) x)`` written from the module's weights."""

import pytest
import torch

from models import ModelConfig, build_model
from models.errors import ConfigError
from models.ffn import FFN

D, E, H = 8, 5, 12


def _cfg(**kw):
    return ModelConfig(**{"d_model": D, "n_heads": 2, "ffn": "moe_llama4", "n_experts": E, "top_k": 2, "d_ff": H, **kw})


def _build(**kw):
    torch.manual_seed(0)
    return FFN["moe_llama4"].build(_cfg(**kw))


def _swiglu64(mod, x):
    """``W2 (silu(x W) * (x V))`` in float64 from a SwiGLU module's three weights."""
    w, v, w2 = (m.weight.detach().double() for m in (mod.w, mod.v, mod.w2))
    g = x @ w.T
    return ((g * torch.sigmoid(g)) * (x @ v.T)) @ w2.T


def _reference(ffn, x, k, scale_input=True):
    """Per token: the router's logits, its top k, sigmoid scores scaling the chosen experts' inputs (or, with
    ``scale_input=False``, their outputs: the convention Llama 4 does not use), plus the shared expert."""
    xs = x.detach().double().reshape(-1, D)
    wr = ffn.router.weight.detach().double()
    out = torch.zeros_like(xs)
    counts = [0] * E
    first = []
    for t in range(xs.shape[0]):
        z = xs[t] @ wr.T
        order = sorted(range(E), key=lambda e: -float(z[e]))[:k]
        first.append(order[0])
        y = _swiglu64(ffn.shared, xs[t][None])[0]
        for e in order:
            counts[e] += 1
            s = 1.0 / (1.0 + torch.exp(-z[e]))
            if scale_input:
                y = y + _swiglu64(ffn.experts[e], (s * xs[t])[None])[0]
            else:
                y = y + s * _swiglu64(ffn.experts[e], xs[t][None])[0]
        out[t] = y
    return out.reshape(x.shape), counts, first


@pytest.mark.parametrize("k", [1, 2, 5])
def test_moe_llama4_matches_the_float64_formula(k):
    ffn = _build(top_k=k).double()
    x = torch.randn(3, 7, D, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    y, aux = ffn(x)
    want, counts, first = _reference(ffn, x, k)
    torch.testing.assert_close(y, want, rtol=1e-10, atol=1e-10)
    assert aux["expert_counts"].tolist() == counts
    assert aux["assignment"].reshape(-1).tolist() == first and aux["assignment"].shape == (3, 7)
    assert (aux["dropped"], aux["capacity"]) == (0, None) and "loss" not in aux  # dropless, no balancing loss


def test_the_score_scales_the_input_not_the_output():
    """SwiGLU has no bias, yet ``expert(s x) != s expert(x)``: the reference with output scaling differs."""
    ffn = _build().double()
    x = 3.0 * torch.randn(2, 6, D, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        y, _ = ffn(x)
    wrong, _, _ = _reference(ffn, x, 2, scale_input=False)
    assert float((y - wrong).abs().max()) > 1e-3


def test_float32_matches_the_float64_formula_and_rows_do_not_interact():
    ffn = _build()
    x = torch.randn(4, 9, D, generator=torch.Generator().manual_seed(3))
    y, _ = ffn(x)
    want, _, _ = _reference(ffn, x, 2)
    torch.testing.assert_close(y.double(), want, rtol=1e-5, atol=1e-5)
    alone, _ = ffn(x[2:3])  # dropless: a row's output does not depend on the other rows
    torch.testing.assert_close(alone, y[2:3], rtol=1e-6, atol=1e-6)


def test_moe_llama4_backward_reaches_every_weight():
    ffn = _build(top_k=1)
    x = torch.randn(2, 3, D, requires_grad=True)
    y, _ = ffn(x)
    y.square().sum().backward()
    assert x.grad is not None and float(x.grad.abs().sum()) > 0
    for name, p in ffn.named_parameters():
        assert p.grad is not None, name  # an expert no token chose gets a zero gradient, never None
    assert float(ffn.router.weight.grad.abs().sum()) > 0  # the router learns through the scores
    assert float(ffn.shared.w2.weight.grad.abs().sum()) > 0


def test_parameter_count_is_exact_and_the_model_runs():
    cfg = _cfg(n_layers=2, vocab_size=50).validate()
    model = build_model(cfg)
    assert cfg.approx_params() == sum(p.numel() for p in model.parameters())
    assert FFN["moe_llama4"].n_params(cfg) == (E + 1) * 3 * D * H + D * E
    out = model(torch.randint(0, 50, (2, 5)))
    out.logits.sum().backward()
    assert float(out.aux_loss) == 0.0
    default = ModelConfig(d_model=24, n_heads=2, ffn="moe_llama4").validate()  # d_ff None: the gated 8 d / 3
    assert FFN["moe_llama4"].build(default).shared.w.weight.shape == (64, 24)


def test_moe_llama4_refusals_name_the_field():
    with pytest.raises(ConfigError) as e:
        _cfg(top_k=6).validate()
    assert e.value.field == "top_k"
    with pytest.raises(ConfigError) as e:
        _cfg(n_experts=0).validate()
    assert e.value.field == "n_experts"
