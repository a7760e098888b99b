"""Feedback Transformer (Fan et al. 2020) against the paper's recurrence written out in plain PyTorch."""

import math

import pytest
import torch

from models import ConfigError, ModelConfig, build_model
from models.layers.feedback import FEEDBACK_MAX_LEN

BASE = dict(layer="feedback", n_layers=3, d_model=32, n_heads=4, max_len=64, position="none", causal=True)


def _model(**kw):
    return build_model(ModelConfig(**{**BASE, **kw}))


def _tokens(B=2, n=12, seed=0):
    return torch.randint(0, 256, (B, n), generator=torch.Generator().manual_seed(seed))


def _reference(model, tokens):
    """m_t = sum_l softmax(w)_l x_t^l; layer l at step t: softmax attention of Norm(x_t^(l-1)) over
    [Norm(m_0) .. Norm(m_(t-1)), Norm(x_t^(l-1))] with its own projections (pre-norm, no positions)."""
    cfg = model.cfg
    B, L = tokens.shape
    h, dh = cfg.n_heads, cfg.d_head
    w = torch.softmax(model.stack.mix, 0)
    x0 = model.embed(tokens)  # (B, L, d)
    mems, outs = [], []
    for t in range(L):
        x = x0[:, t]  # (B, d)
        m = w[0] * x
        for n, b in enumerate(model.stack.blocks):
            norm, a = b.res_attn.norm, b.attn
            kv_in = torch.stack([norm(mm) for mm in mems] + [norm(x)], dim=1)  # (B, t+1, d)
            q = a.q_proj(norm(x)).view(B, h, dh)
            k = a.k_proj(kv_in).view(B, t + 1, h, dh)
            v = a.v_proj(kv_in).view(B, t + 1, h, dh)
            p = torch.softmax(torch.einsum("bhd,bkhd->bhk", q, k) / math.sqrt(dh), dim=-1)
            x = x + a.out_proj(torch.einsum("bhk,bkhd->bhd", p, v).reshape(B, h * dh))
            x = x + b.ffn(b.res_ffn.norm(x))[0]
            m = m + w[n + 1] * x
        mems.append(m)
        outs.append(x)
    return model.head(model.final_norm(torch.stack(outs, dim=1)))


def test_feedback_equals_the_papers_recurrence():
    model = _model().eval()
    with torch.no_grad():  # a non-uniform mix, so every layer's weight matters
        model.stack.mix.copy_(torch.tensor([0.3, -1.0, 0.5, 1.2]))
    t = _tokens()
    torch.testing.assert_close(model(t).logits, _reference(model, t), rtol=1e-5, atol=1e-5)


def test_feedback_is_causal_and_lower_layers_read_upper_layers_of_earlier_steps():
    model = _model(position="rope").eval()
    t = _tokens(1, 16)
    base = model(t)
    t2 = t.clone()
    t2[0, 9] = (t2[0, 9] + 1) % 256
    out = model(t2)
    torch.testing.assert_close(out.logits[:, :9], base.logits[:, :9], rtol=0, atol=1e-6)
    assert not torch.allclose(out.logits[:, 9:], base.logits[:, 9:])
    # only the top layer's state in the memory: layer 0 at step t > 0 then depends on the top layer
    with torch.no_grad():
        model.stack.mix.copy_(torch.tensor([-30.0, -30.0, -30.0, 30.0]))
    a = model(t, return_attention=True)
    with torch.no_grad():
        model.stack.blocks[-1].ffn.output_parameters()[0].mul_(2.0)
    b = model(t, return_attention=True)
    torch.testing.assert_close(a.attentions[0][..., 0, :], b.attentions[0][..., 0, :])  # step 0: no memory yet
    assert not torch.allclose(a.attentions[0][..., 1:, :], b.attentions[0][..., 1:, :], atol=1e-4)


def test_feedback_attention_maps_are_causal_rows_summing_to_one():
    model = _model()
    out = model(_tokens(1, 10), return_attention=True)
    assert len(out.attentions) == 3 and len(out.hidden_states) == 3
    for a in out.attentions:
        assert a.shape == (1, 4, 10, 10)
        torch.testing.assert_close(a.sum(-1), torch.ones(1, 4, 10))
        assert (a.triu(1) == 0).all()
    assert out.hidden_states[1].shape == (1, 10, 32)


def test_feedback_gradients_reach_the_memory_weights():
    model = _model()
    model(_tokens()).logits.pow(2).mean().backward()
    assert model.stack.mix.grad is not None and model.stack.mix.grad.abs().sum() > 0


@pytest.mark.parametrize(
    "change,field",
    [
        (dict(causal=False, position="rope"), "causal"),
        (dict(attention="sliding_window"), "attention"),
        (dict(memory="tokens"), "memory"),
        (dict(max_len=FEEDBACK_MAX_LEN + 1), "max_len"),
    ],
)
def test_feedback_refusals_name_the_field(change, field):
    with pytest.raises(ConfigError) as e:
        ModelConfig(**{**BASE, **change}).validate()
    assert e.value.field == field


def test_feedback_refuses_calls_longer_than_max_len():
    model = _model(max_len=8)
    with pytest.raises(ConfigError) as e:
        model(_tokens(1, 9))
    assert e.value.field == "tokens" and "max_len=8" in str(e.value)
