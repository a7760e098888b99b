"""Poolingformer (Zhang et al. 2021) against its two-level formula written as plain loops."""

import math

import pytest
import torch

from models import ConfigError, ModelConfig, build_model
from models.attention import ATTENTION
from models.context import ForwardContext


def _cfg(**kw):
    base = dict(
        attention="poolingformer",
        d_model=32,
        n_heads=4,
        n_layers=1,
        window=4,
        pool_window=10,
        pool_stride=3,
        max_len=64,
    )
    return ModelConfig(**{**base, **kw}).validate()


def _reference(q, k, v, w_q2, cfg):
    """Loops over heads and queries: window softmax y_i; pooled groups wholly inside the larger
    window (and at or before i when causal); z_i from query y_i W_h; (y + z) / 2, or y without groups."""
    B, h, L, dh = q.shape
    rep = h // k.shape[1]
    s, causal = cfg.pool_stride, cfg.causal
    out = torch.zeros_like(q)
    groups = [list(range(g, min(g + s, L))) for g in range(0, L, s)]
    for b in range(B):
        for n in range(h):
            kk, vv = k[b, n // rep], v[b, n // rep]
            for i in range(L):
                js = [j for j in range(L) if abs(i - j) < cfg.window and (j <= i or not causal)]
                p = torch.softmax(torch.stack([q[b, n, i] @ kk[j] for j in js]) / math.sqrt(dh), 0)
                y = sum(p[c] * vv[j] for c, j in enumerate(js))
                ok = [m for m in groups if all(abs(i - j) < cfg.pool_window and (j <= i or not causal) for j in m)]
                if not ok:
                    out[b, n, i] = y
                    continue
                q2 = y @ w_q2[n]
                kbar = torch.stack([kk[m].mean(0) for m in ok])
                vbar = torch.stack([vv[m].mean(0) for m in ok])
                p2 = torch.softmax(kbar @ q2 / math.sqrt(dh), 0)
                out[b, n, i] = (y + p2 @ vbar) / 2
    return out


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("n_kv", [None, 2])
@pytest.mark.parametrize("L", [13, 15])
def test_poolingformer_equals_the_two_level_formula(causal, n_kv, L):
    cfg = _cfg(causal=causal, n_kv_heads=n_kv)
    core = ATTENTION["poolingformer"].build(cfg)
    with torch.no_grad():
        core.w_q2.normal_(0, 1.0)
    g = torch.Generator().manual_seed(0)
    hkv = n_kv or 4
    q = torch.randn(2, 4, L, 8, generator=g)
    k, v = torch.randn(2, hkv, L, 8, generator=g), torch.randn(2, hkv, L, 8, generator=g)
    want = _reference(q, k, v, core.w_q2.detach(), cfg)
    for need in (False, True):
        ctx = ForwardContext(tokens=torch.zeros(2, L, dtype=torch.long), position=None, need_weights=need)
        out, probs, _ = core(q, k, v, {}, ctx)
        torch.testing.assert_close(out, want, rtol=1e-5, atol=1e-5)
        if need:  # the effective attention reproduces the output and its rows sum to one
            vv = v.repeat_interleave(4 // hkv, 1)
            torch.testing.assert_close(probs @ vv, want, rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(probs.sum(-1), torch.ones(2, 4, L))
            if causal:
                assert (probs.triu(1) == 0).all()


def test_poolingformer_second_level_reaches_past_the_window_and_trains():
    cfg = _cfg(causal=True, window=2, pool_window=12, pool_stride=2, n_layers=2)
    model = build_model(cfg)
    out = model(torch.randint(0, 256, (1, 20), generator=torch.Generator().manual_seed(1)), return_attention=True)
    a = out.attentions[0][0]  # (h, L, L)
    i = 15
    assert (a[:, i, : i - 1] > 0).any()  # beyond the window of 2 (keys i - 1, i), through the pooled groups
    assert (a[:, i, i - 12 + 1 : i + 1].sum(-1) - 1).abs().max() < 1e-5  # nothing beyond the pooling window
    out.logits.pow(2).mean().backward()
    w = model.stack.blocks[0].attn.core.w_q2
    assert w.grad is not None and w.grad.abs().sum() > 0


@pytest.mark.parametrize(
    "change,field",
    [
        (dict(pool_window=4), "pool_window"),
        (dict(pool_window=10, pool_stride=11), "pool_stride"),
        (dict(pool_window=5000, pool_stride=1), "pool_window"),
        (dict(position="alibi"), "position"),
    ],
)
def test_poolingformer_refusals_name_the_field(change, field):
    with pytest.raises(ConfigError) as e:
        _cfg(**change)
    assert e.value.field == field
