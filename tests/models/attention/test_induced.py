"""isab and luna against plain-PyTorch formulas written here (explicit loops), and their defining
properties: ISAB's map is the product of two row-stochastic maps and is permutation-equivariant without
positions; Luna carries its packed sequence from layer to layer."""

import math
from functools import partial

import pytest
import torch
from cores import build_core, check_parameter_count, context, draw_qkv

from models import ConfigError, ModelConfig, build_model

SMALL = dict(d_model=32, n_heads=4, n_layers=2, max_len=64, n_inducing=5, conv_kernel=4)
H, L, D = 4, 12, 8
_core = partial(build_core, SMALL, torch_seed=0)
_qkv = partial(draw_qkv, L=L)


# ------------------------------------------------------------------------------ isab
def test_isab_equals_two_attentions_through_the_inducing_points():
    cfg, core = _core("isab", False)
    q, k, v = _qkv()
    out, probs, _ = core(q, k, v, {}, context())
    I, Wk = core.inducing.detach(), core.key_of_h.detach()
    for b in range(2):
        for n in range(H):
            a1 = torch.softmax(I[n] @ k[b, n].T / math.sqrt(D), -1)  # (m, L)
            gathered = a1 @ v[b, n]  # (m, d)
            a2 = torch.softmax(q[b, n] @ (gathered @ Wk[n]).T / math.sqrt(D), -1)  # (L, m)
            torch.testing.assert_close(out[b, n], a2 @ gathered, rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(probs[b, n], a2 @ a1, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(probs.sum(-1), torch.ones(2, H, L))
    assert (probs >= 0).all()
    torch.testing.assert_close(probs @ v, out, rtol=1e-5, atol=1e-5)


def test_isab_is_permutation_equivariant_and_gqa_equals_repeated_kv():
    cfg, core = _core("isab", False)
    q, k, v = _qkv()
    out, _, _ = core(q, k, v, {}, context(False))
    perm = torch.randperm(L, generator=torch.Generator().manual_seed(1))
    out_p, _, _ = core(q[:, :, perm], k[:, :, perm], v[:, :, perm], {}, context(False))
    torch.testing.assert_close(out_p, out[:, :, perm], rtol=1e-5, atol=1e-5)  # a set function
    q, k, v = _qkv(h_kv=2)
    a, _, _ = core(q, k, v, {}, context(False))
    b, _, _ = core(q, k.repeat_interleave(2, 1), v.repeat_interleave(2, 1), {}, context(False))
    torch.testing.assert_close(a, b)


def test_isab_is_refused_causal_and_with_score_biases():
    for kw in (dict(causal=True), dict(causal=False, position="t5"), dict(causal=False, position="shaw")):
        with pytest.raises(ConfigError) as e:
            ModelConfig(**{**SMALL, "attention": "isab", **kw}).validate()
        assert e.value.field in ("causal", "position")
    ModelConfig(**{**SMALL, "attention": "isab", "causal": False, "position": "rope"}).validate()


# ------------------------------------------------------------------------------ luna
def test_luna_packs_unpacks_and_carries_the_packed_sequence():
    cfg, core = _core("luna", False)
    ctx = context()
    calls = [_qkv(0), _qkv(1)]
    results = [core(q, k, v, {}, ctx) for q, k, v in calls]
    Wq, Wk = core.pack_query.weight.detach(), core.unpack_key.weight.detach()  # (d, d), y = x W^T
    P = core.initial.detach().expand(2, -1, -1)  # (B, m, d)
    d_model = H * D
    for (q, k, v), (out, probs, _) in zip(calls, results):
        packed_q = (P @ Wq.T).view(2, 5, H, D)
        gathered = torch.zeros(2, H, 5, D)
        for b in range(2):
            for n in range(H):
                a1 = torch.softmax(packed_q[b, :, n] @ k[b, n].T / math.sqrt(D), -1)  # (m, L)
                gathered[b, n] = a1 @ v[b, n]
        flat = gathered.transpose(1, 2).reshape(2, 5, d_model)  # (B, m, d): heads concatenated
        keys = (flat @ Wk.T).view(2, 5, H, D)
        for b in range(2):
            for n in range(H):
                a1 = torch.softmax(packed_q[b, :, n] @ k[b, n].T / math.sqrt(D), -1)
                a2 = torch.softmax(q[b, n] @ keys[b, :, n].T / math.sqrt(D), -1)  # (L, m)
                torch.testing.assert_close(out[b, n], a2 @ gathered[b, n], rtol=1e-5, atol=1e-5)
                torch.testing.assert_close(probs[b, n], a2 @ a1, rtol=1e-5, atol=1e-5)
        P = torch.nn.functional.layer_norm(flat + P, (d_model,), core.norm.weight.detach(), core.norm.bias.detach())
    torch.testing.assert_close(ctx.packed, P, rtol=1e-5, atol=1e-5)


def test_luna_only_the_first_layers_table_is_read():
    model = build_model(ModelConfig(**{**SMALL, "attention": "luna", "causal": False}))
    t = torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(0))
    base = model(t).logits
    with torch.no_grad():
        model.stack.blocks[1].attn.core.initial.add_(1.0)
    torch.testing.assert_close(model(t).logits, base)
    with torch.no_grad():
        model.stack.blocks[0].attn.core.initial.add_(1.0)
    assert not torch.allclose(model(t).logits, base, atol=1e-4)


@pytest.mark.parametrize(
    "kw,field",
    [(dict(causal=True), "causal"), (dict(layer="reversible"), "layer"), (dict(position="alibi"), "position")],
)
def test_luna_refusals_name_the_field(kw, field):
    with pytest.raises(ConfigError) as e:
        ModelConfig(**{**SMALL, "attention": "luna", "causal": False, **kw}).validate()
    assert e.value.field == field


# ------------------------------------------------------------------------------ sizes
@pytest.mark.parametrize(
    "key,extra,kw",
    [
        ("isab", H * 5 * D + H * D * D, dict(causal=False)),
        ("luna", 5 * H * D + 2 * (H * D) ** 2 + 2 * H * D, dict(causal=False)),
    ],
)
def test_parameter_count_per_layer(key, extra, kw):
    check_parameter_count(SMALL, key, extra, **kw)
