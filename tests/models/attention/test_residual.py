"""realformer and predictive_attention: each against a plain-PyTorch formula written here from the papers
(explicit loops over heads and taps), plus the property that pins them to full attention (a one-layer
RealFormer is plain softmax attention)."""

import math
from functools import partial

import pytest
import torch
from cores import bias_and_dense, build_core, check_parameter_count, context, draw_qkv, pair_mask

from models import ConfigError, ModelConfig, build_model

SMALL = dict(d_model=32, n_heads=4, n_layers=2, max_len=64)
H, L, D = 4, 12, 8
_core = partial(build_core, SMALL, torch_seed=0)
_qkv = partial(draw_qkv, L=L)


_bias = partial(bias_and_dense, H, L)
_mask = partial(pair_mask, L)


# ------------------------------------------------------------------------------ realformer
@pytest.mark.parametrize("causal", [True, False])
def test_realformer_adds_the_previous_layers_scores(causal):
    cfg, core = _core("realformer", causal)
    mods, bias = _bias()
    q1, k1, v1 = _qkv(0)
    q2, k2, v2 = _qkv(1)
    q3, k3, v3 = _qkv(2)
    ctx = context()
    outs = [core(q, k, v, mods, ctx) for q, k, v in ((q1, k1, v1), (q2, k2, v2), (q3, k3, v3))]
    s1 = q1 @ k1.transpose(-1, -2) / math.sqrt(D) + bias
    s2 = q2 @ k2.transpose(-1, -2) / math.sqrt(D) + bias + s1
    s3 = q3 @ k3.transpose(-1, -2) / math.sqrt(D) + bias + s2  # the residual accumulates
    for (out, probs, _), s, v in zip(outs, (s1, s2, s3), (v1, v2, v3)):
        p = torch.softmax(s.masked_fill(~_mask(causal), -math.inf), -1)
        torch.testing.assert_close(probs, p, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(out, p @ v, rtol=1e-5, atol=1e-5)


def test_one_layer_realformer_is_full_attention():
    kw = dict(SMALL, n_layers=1, position="alibi")
    rf = build_model(ModelConfig(**kw, attention="realformer"))
    full = build_model(ModelConfig(**kw, attention="full"))
    t = torch.randint(0, 256, (2, 20), generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(rf(t).logits, full(t).logits, rtol=1e-4, atol=1e-4)
    two = build_model(ModelConfig(**{**kw, "n_layers": 2}, attention="realformer"))
    full2 = build_model(ModelConfig(**{**kw, "n_layers": 2}, attention="full"))
    assert not torch.allclose(two(t).logits, full2(t).logits, atol=1e-3)


# ------------------------------------------------------------------------------ predictive attention
@pytest.mark.parametrize("causal", [True, False])
def test_predictive_attention_convolves_the_previous_map(causal):
    cfg, core = _core("predictive_attention", causal)
    with torch.no_grad():
        core.alpha.fill_(0.3)
    q1, k1, v1 = _qkv(0)
    q2, k2, v2 = _qkv(1)
    ctx = context()
    _, p1, _ = core(q1, k1, v1, {}, ctx)
    out, p2, _ = core(q2, k2, v2, {}, ctx)
    torch.testing.assert_close(
        p1, torch.softmax((q1 @ k1.transpose(-1, -2) / math.sqrt(D)).masked_fill(~_mask(causal), -math.inf), -1)
    )  # first layer plain
    w, b = core.conv.weight.detach(), core.conv.bias.detach()  # (h_out, h_in, 3, 3), (h_out,)
    dy = (-2, -1, 0) if causal else (-1, 0, 1)  # the rows each tap reads
    conv = b.view(1, H, 1, 1).expand(2, H, L, L).clone()
    for a, oy in enumerate(dy):
        for c, ox in enumerate((-1, 0, 1)):
            shifted = torch.zeros(2, H, L, L)
            ys, xs = slice(max(0, -oy), L - max(0, oy)), slice(max(0, -ox), L - max(0, ox))
            ys2, xs2 = slice(max(0, oy), L - max(0, -oy)), slice(max(0, ox), L - max(0, -ox))
            shifted[:, :, ys, xs] = p1[:, :, ys2, xs2]  # shifted[i, j] = p1[i + oy, j + ox]
            conv = conv + torch.einsum("oi,bixy->boxy", w[:, :, a, c], shifted)
    alpha = torch.sigmoid(torch.tensor(0.3))
    s = alpha * conv + (1 - alpha) * q2 @ k2.transpose(-1, -2) / math.sqrt(D)
    want = torch.softmax(s.masked_fill(~_mask(causal), -math.inf), -1)
    torch.testing.assert_close(p2, want, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(out, want @ v2, rtol=1e-5, atol=1e-5)


def test_predictive_attention_parameters_receive_gradients():
    model = build_model(ModelConfig(**SMALL, attention="predictive_attention"))
    t = torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(0))
    model(t).logits.pow(2).mean().backward()
    core = model.stack.blocks[1].attn.core  # the second layer reads the first one's map
    assert core.conv.weight.grad.abs().sum() > 0 and core.alpha.grad.abs() > 0


# ------------------------------------------------------------------------------ refusals and sizes
@pytest.mark.parametrize("key", ["realformer", "predictive_attention"])
@pytest.mark.parametrize("field,value", [("layer", "reversible"), ("layer", "universal"), ("memory", "xl")])
def test_previous_layer_mechanisms_refuse_other_stacks_and_memories(key, field, value):
    kw = {**SMALL, "attention": key, field: value}
    if value == "xl":
        kw["position"] = "t5"
    with pytest.raises(ConfigError) as e:
        ModelConfig(**kw).validate()
    assert e.value.field == field


@pytest.mark.parametrize("key,extra", [("realformer", 0), ("predictive_attention", H * H * 9 + H + 1)])
def test_parameter_count_per_layer(key, extra):
    check_parameter_count(SMALL, key, extra)
