"""Funnel-Transformer (Dai et al. 2020): pooled lengths, output length, a plain-PyTorch reference of
pool-query attention and the upsampling decoder, and no leak of the future in the causal variant."""

import math

import pytest
import torch

from models import ConfigError, ModelConfig, build_model

BASE = dict(layer="funnel", n_layers=3, funnel_blocks=3, d_model=32, n_heads=4, max_len=64)


def _model(**kw):
    return build_model(ModelConfig(**{**BASE, **kw}))


def _tokens(B=2, n=21, seed=0):
    return torch.randint(0, 256, (B, n), generator=torch.Generator().manual_seed(seed))


def _attend(a, xq, xkv, allowed):
    """Softmax attention of the module ``a``'s projections, no positions, ``allowed [n', n]``."""
    B, h = xq.shape[0], a.cfg.n_heads
    dh = a.cfg.d_head
    q = a.q_proj(xq).view(B, -1, h, dh)
    k = a.k_proj(xkv).view(B, -1, h, dh)
    v = a.v_proj(xkv).view(B, -1, h, dh)
    s = torch.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(dh)
    p = torch.softmax(s.masked_fill(~allowed, -math.inf), dim=-1)
    return a.out_proj(torch.einsum("bhqk,bkhd->bqhd", p, v).reshape(B, -1, h * dh))


def _pool(x):
    """Mean of pairs (2p, 2p + 1); an odd last token alone."""
    n = x.shape[1]
    return torch.stack([x[:, 2 * p : min(2 * p + 2, n)].mean(1) for p in range((n + 1) // 2)], dim=1)


def _reference(model, tokens, causal):
    """Pre-norm, position 'none' (causal) or 'sinusoidal' (bidirectional), one layer per block."""
    L = tokens.shape[1]
    x = model.position.embed(model.embed(tokens), torch.arange(L))
    for n, b in enumerate(model.stack.blocks):
        if n == 0:
            q_in, last = x, torch.arange(L)
            kv_last = last
        else:
            q_in, kv_last = _pool(x), last
            last = torch.tensor([min(2 * p + 1, len(kv_last) - 1) for p in range((len(kv_last) + 1) // 2)])
            last = kv_last[last]
        allowed = (
            (kv_last[None, :] <= last[:, None]) if causal else torch.ones(len(last), len(kv_last), dtype=torch.bool)
        )
        x = q_in + _attend(b.attn, b.res_attn.norm(q_in), b.res_attn.norm(x), allowed)
        x = x + b.ffn(b.res_ffn.norm(x))[0]
        if n == 0:
            first = x
    S = 2 ** (len(model.stack.blocks) - 1)
    up = torch.zeros_like(first)
    for i in range(L):
        if causal:  # the last pooled group whose tokens all lie at or before i
            done = [p for p in range(x.shape[1]) if (p + 1) * S - 1 <= i]
            if done:
                up[:, i] = x[:, done[-1]]
        else:
            up[:, i] = x[:, i // S]
    return model.head(model.final_norm(first + up))


@pytest.mark.parametrize("causal,position", [(True, "none"), (False, "sinusoidal")])
@pytest.mark.parametrize("L", [21, 24])
def test_funnel_equals_plain_pytorch_reference(causal, position, L):
    model = _model(causal=causal, position=position).eval()
    t = _tokens(n=L)
    torch.testing.assert_close(model(t).logits, _reference(model, t, causal), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "L,blocks,n_layers,want", [(37, 3, 3, [37, 19, 10]), (40, 2, 4, [40, 40, 20, 20]), (9, 2, 2, [9, 5])]
)
def test_funnel_pooled_lengths_and_output_length(L, blocks, n_layers, want):
    model = _model(funnel_blocks=blocks, n_layers=n_layers)
    out = model(_tokens(n=L), return_attention=True)
    assert [h.shape[1] for h in out.hidden_states] == want
    assert out.logits.shape == (2, L, 256)
    for n, a in enumerate(out.attentions):  # pool-query layers: pooled queries over the unpooled keys
        lk = want[n - 1] if n and want[n] != want[n - 1] else want[n]
        assert a.shape == (2, 4, want[n], lk)
        torch.testing.assert_close(a.sum(-1), torch.ones(2, 4, want[n]))


@pytest.mark.parametrize("position", ["rope", "none", "learned"])
def test_causal_funnel_leaks_nothing(position):
    model = _model(causal=True, position=position).eval()
    t = _tokens(1, 29)
    base = model(t).logits
    for pos in (0, 4, 7, 15, 28):
        t2 = t.clone()
        t2[0, pos] = (t2[0, pos] + 1) % 256
        out = model(t2).logits
        torch.testing.assert_close(out[:, :pos], base[:, :pos], rtol=0, atol=1e-5)
        assert not torch.allclose(out[:, pos:], base[:, pos:])


def test_one_funnel_block_is_the_standard_model():
    f, s = _model(funnel_blocks=1), _model(layer="standard")
    f.load_state_dict(s.state_dict())
    t = _tokens()
    torch.testing.assert_close(f(t).logits, s(t).logits, rtol=1e-6, atol=1e-6)


def test_funnel_pool_query_rope_places_queries_at_their_groups_last_token():
    """Pool-query attention with rope equals attention with queries rotated at positions
    min(2p + 1, n - 1) and keys at 0 .. n - 1 (n = 9: 1, 3, 5, 7, 8)."""
    from models.context import ForwardContext, LayerInfo
    from models.layers.funnel import pool_query_attention
    from models.positions import apply_rope

    model = _model(position="rope", causal=False, n_layers=2, funnel_blocks=2)
    a = model.stack.blocks[1].attn
    xkv, xq = torch.randn(1, 9, 32), torch.randn(1, 5, 32)
    ctx = ForwardContext(tokens=torch.zeros(1, 9, dtype=torch.long), position=model.position)
    got = pool_query_attention(a, xq, xkv, False, ctx, LayerInfo(index=1))
    h, dh = 4, 8
    q = apply_rope(a.q_proj(xq).view(1, 5, h, dh).transpose(1, 2), torch.tensor([1, 3, 5, 7, 8]), 10000.0)
    k = apply_rope(a.k_proj(xkv).view(1, 9, h, dh).transpose(1, 2), torch.arange(9), 10000.0)
    v = a.v_proj(xkv).view(1, 9, h, dh).transpose(1, 2)
    p = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(dh), -1)
    want = a.out_proj((p @ v).transpose(1, 2).reshape(1, 5, 32))
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "change,field",
    [
        (dict(funnel_blocks=2), "funnel_blocks"),
        (dict(funnel_blocks=4), "funnel_blocks"),
        (dict(position="alibi"), "position"),
        (dict(attention="sliding_window"), "attention"),
        (dict(memory="tokens"), "memory"),
        (dict(ffn="hash"), "ffn"),
    ],
)
def test_funnel_refusals_name_the_field(change, field):
    with pytest.raises(ConfigError) as e:
        ModelConfig(**{**BASE, **change}).validate()
    assert e.value.field == field
