"""The four ModelConfig fields pretrained checkpoints need (``norm_eps``, ``attn_bias``, ``gelu_approx``,
``embed_norm``): their defaults leave every model as it was, other values do what they say (checked
against torch's own modules), the parameter estimate stays exact, and bad values are refused by name."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from models import ConfigError, ModelConfig, build_model

BASE = dict(vocab_size=50, n_layers=2, d_model=16, n_heads=4, n_kv_heads=2, max_len=32)


def test_defaults_add_nothing():
    keys = build_model(ModelConfig(**BASE)).state_dict().keys()
    assert not any(k.endswith("proj.bias") or "embed_norm" in k for k in keys)


@pytest.mark.parametrize(
    "fields",
    [
        dict(attn_bias="qkv"),
        dict(attn_bias="all"),
        dict(embed_norm=True),
        dict(embed_norm=True, norm="rmsnorm"),
        dict(architecture="encoder_only", causal=False, attn_bias="all", embed_norm=True, norm_placement="post"),
        dict(architecture="encoder_decoder", attn_bias="all", embed_norm=True, position="t5", n_decoder_layers=3),
        dict(qk_norm="head", attn_bias="qkv"),
        dict(qk_norm="all", norm_placement="res_post", norm="rmsnorm"),
        dict(architecture="encoder_only", causal=False, qk_norm="all", norm_placement="res_post"),
        dict(architecture="encoder_decoder", qk_norm="all", position="t5", n_decoder_layers=3),
    ],
)
def test_parameter_estimate_stays_exact(fields):
    cfg = ModelConfig(**BASE, **fields).validate()
    assert cfg.approx_params() == sum(p.numel() for p in build_model(cfg).parameters())


def test_attention_biases_are_where_asked():
    qkv = build_model(ModelConfig(**BASE, attn_bias="qkv")).stack.blocks[0].attn
    assert qkv.q_proj.bias.shape == (16,) and qkv.k_proj.bias.shape == (8,) and qkv.out_proj.bias is None
    assert build_model(ModelConfig(**BASE, attn_bias="all")).stack.blocks[0].attn.out_proj.bias.shape == (16,)


@pytest.mark.parametrize(
    "norm,reference",
    [("layernorm", lambda d, eps: nn.LayerNorm(d, eps=eps)), ("rmsnorm", lambda d, eps: nn.RMSNorm(d, eps=eps))],
)
def test_norm_eps_is_the_norms_epsilon(norm, reference):
    x = 1e-3 * torch.randn(3, 16, generator=torch.Generator().manual_seed(0))  # small: eps matters
    model = build_model(ModelConfig(**BASE, norm=norm, norm_eps=1e-4))
    ours = model.final_norm
    torch.testing.assert_close(ours(x), reference(16, 1e-4)(x))
    assert not torch.allclose(build_model(ModelConfig(**BASE, norm=norm)).final_norm(x), ours(x))


@pytest.mark.parametrize("ffn", ["gelu", "geglu"])
def test_gelu_approx_is_torchs_tanh_gelu(ffn):
    x = torch.randn(2, 5, 16, generator=torch.Generator().manual_seed(1))
    layer = build_model(ModelConfig(**BASE, ffn=ffn, gelu_approx="tanh")).stack.blocks[0].ffn
    if ffn == "gelu":
        want = layer.w2(F.gelu(layer.w1(x), approximate="tanh"))
    else:
        want = layer.w2(F.gelu(layer.w(x), approximate="tanh") * layer.v(x))
    torch.testing.assert_close(layer(x)[0], want)


def test_embed_norm_normalises_the_embeddings():
    model = build_model(ModelConfig(**{**BASE, "n_layers": 1}, embed_norm=True))
    tokens = torch.tensor([[1, 2, 3]])
    out = model(tokens)
    x = model.position.embed(model.embed(tokens), torch.arange(3))
    torch.testing.assert_close(out.hidden_states[0], model.embed_norm(x))
    assert not torch.allclose(out.hidden_states[0], x)


@pytest.mark.parametrize(
    "field,value",
    [("norm_eps", 0.0), ("norm_eps", float("nan")), ("norm_eps", 1.0), ("attn_bias", "some"), ("gelu_approx", "erf")],
)
def test_bad_values_are_refused_by_name(field, value):
    with pytest.raises(ConfigError) as e:
        ModelConfig(**BASE, **{field: value}).validate()
    assert e.value.field == field
