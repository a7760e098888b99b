"""talking_heads against a plain-PyTorch formula written here from the paper (explicit loops over heads),
plus the property that pins it to full attention (identity mixing at init)."""

import math
from functools import partial

import pytest
import torch
from cores import bias_and_dense, build_core, check_parameter_count, context, draw_qkv, pair_mask

from models import ModelConfig, build_model

SMALL = dict(d_model=32, n_heads=4, n_layers=2, max_len=64)
H, L, D = 4, 12, 8
_core = partial(build_core, SMALL, torch_seed=0)
_qkv = partial(draw_qkv, L=L)


_bias = partial(bias_and_dense, H, L)
_mask = partial(pair_mask, L)


@pytest.mark.parametrize("causal", [True, False])
def test_talking_heads_equals_the_papers_formula(causal):
    cfg, core = _core("talking_heads", causal)
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        core.mix_logits.copy_(torch.randn(H, H, generator=g))
        core.mix_weights.copy_(torch.randn(H, H, generator=g))
    q, k, v = _qkv()
    mods, bias = _bias()
    out, probs, _ = core(q, k, v, mods, context())
    P1, P2 = core.mix_logits.detach(), core.mix_weights.detach()
    logits = [q[:, n] @ k[:, n].transpose(-1, -2) / math.sqrt(D) + bias[n] for n in range(H)]
    want_w, want_out = [], []
    soft = []
    for n in range(H):
        mixed = sum(P1[n, m] * logits[m] for m in range(H))
        soft.append(torch.softmax(mixed.masked_fill(~_mask(causal), -math.inf), -1))
    for n in range(H):
        w = sum(P2[n, m] * soft[m] for m in range(H))
        want_w.append(w)
        want_out.append(w @ v[:, n])
    torch.testing.assert_close(probs, torch.stack(want_w, 1), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(out, torch.stack(want_out, 1), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("position", ["rope", "t5", "alibi", "shaw", "xl"])
@pytest.mark.parametrize("causal", [True, False])
def test_talking_heads_at_init_is_full_attention(position, causal):
    """Identity mixing at init: the same weights give the same logits as attention='full' (run by the kernels)."""
    kw = dict(SMALL, causal=causal, position=position)
    th = build_model(ModelConfig(**kw, attention="talking_heads"))
    full = build_model(ModelConfig(**kw, attention="full"))
    full.load_state_dict(th.state_dict(), strict=False)
    t = torch.randint(0, 256, (2, 20), generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(th(t).logits, full(t).logits, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("memory", ["xl", "tokens"])
def test_talking_heads_with_memory_keys_at_init_is_full_attention(memory):
    """Keys prepended before the queries (memory) are honoured as on the dense path."""
    kw = dict(SMALL, causal=True, position="xl", memory=memory, segment_len=8, mem_len=8, n_memory=3)
    th = build_model(ModelConfig(**kw, attention="talking_heads"))
    full = build_model(ModelConfig(**kw, attention="full"))
    full.load_state_dict(th.state_dict(), strict=False)
    t = torch.randint(0, 256, (2, 20), generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(th(t).logits, full(t).logits, rtol=1e-4, atol=1e-4)


def test_talking_heads_mixing_learns():
    cfg, core = _core("talking_heads", True)
    q, k, v = _qkv()
    out, _, _ = core(q, k, v, {}, context(False))
    out.pow(2).sum().backward()
    assert core.mix_logits.grad.abs().sum() > 0 and core.mix_weights.grad.abs().sum() > 0


@pytest.mark.parametrize("key,extra", [("talking_heads", 2 * H * H)])
def test_parameter_count_per_layer(key, extra):
    check_parameter_count(SMALL, key, extra)
