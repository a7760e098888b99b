"""differential (Ye et al. 2025, Differential Transformer): the core against a float64 plain-PyTorch loop over
heads written here from the paper's formulas, lambda_init per layer, RoPE on each half-head in the sublayer,
the map's row sums, gradients, the size estimate and refusals."""

import math

import pytest
import torch

from models import ConfigError, ModelConfig, build_model
from models.attention import ATTENTION
from models.context import ForwardContext, LayerInfo

BASE = dict(attention="differential", d_model=32, n_heads=4, n_layers=1, max_len=64, position="sinusoidal")
L = 9


def _core(causal, layer=0, **kw):
    cfg = ModelConfig(**{**BASE, "causal": causal, **kw}).validate()
    torch.manual_seed(0)
    core = ATTENTION["differential"].build(cfg, layer).double()
    core.subln.weight.data.uniform_(0.5, 1.5)  # a gain away from 1, so a missing one would show
    return cfg, core


def _qkv(h=4, h_kv=4, d=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(2, n, L, d, generator=g, dtype=torch.float64) for n in (h, h_kv, h_kv)]


def _reference(core, q, k, v, causal, layer):
    """Per head: A = softmax(Q1 K1^T/sqrt(d)) - lambda softmax(Q2 K2^T/sqrt(d)); (1 - lambda_init) RMSNorm(A V)."""
    B, h, n, dh = q.shape
    d, lk = dh // 2, k.shape[2]  # keys before the queries (a memory prefix): lk - n of them
    lam_init = 0.8 - 0.6 * math.exp(-0.3 * ((layer + 1) - 1))  # the paper's l = 1 .. n_layers
    lam = (
        torch.exp(torch.dot(core.lambda_q1, core.lambda_k1))
        - torch.exp(torch.dot(core.lambda_q2, core.lambda_k2))
        + lam_init
    )
    i, j = torch.arange(n)[:, None] + (lk - n), torch.arange(lk)[None, :]
    allowed = (j <= i) if causal else torch.ones(n, lk, dtype=torch.bool)
    gain = core.subln.weight
    outs = torch.empty(B, h, n, dh, dtype=torch.float64)
    maps = torch.empty(B, h, n, lk, dtype=torch.float64)
    for b in range(B):
        for m in range(h):
            g = m // (h // k.shape[1])
            q1, q2 = q[b, m, :, :d], q[b, m, :, d:]
            k1, k2 = k[b, g, :, :d], k[b, g, :, d:]
            p1 = torch.softmax((q1 @ k1.T / math.sqrt(d)).masked_fill(~allowed, -math.inf), -1)
            p2 = torch.softmax((q2 @ k2.T / math.sqrt(d)).masked_fill(~allowed, -math.inf), -1)
            a = p1 - lam * p2
            o = a @ v[b, g]  # (n, d_h)
            o = o / torch.sqrt(o.pow(2).mean(-1, keepdim=True) + 1e-5) * gain
            outs[b, m] = (1 - lam_init) * o
            maps[b, m] = a
    return outs, maps, lam


def _ctx(need_weights=True):
    return ForwardContext(tokens=None, position=None, need_weights=need_weights)


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("layer", [0, 3])
@pytest.mark.parametrize("h_kv", [4, 2, 1])
def test_core_equals_the_formulas(causal, layer, h_kv):
    cfg, core = _core(causal, layer)
    q, k, v = _qkv(h_kv=h_kv)
    out, probs, aux = core(q, k, v, {}, _ctx())
    want, maps, lam = _reference(core, q, k, v, causal, layer)
    torch.testing.assert_close(out, want, rtol=0, atol=1e-10)
    torch.testing.assert_close(probs, maps, rtol=0, atol=1e-10)
    # the drawn map's rows sum to 1 - lambda (negative weights allowed), the same for every row
    torch.testing.assert_close(probs.sum(-1), (1 - lam).expand(2, 4, L), rtol=0, atol=1e-10)
    out2, none, _ = core(q, k, v, {}, _ctx(False))  # without maps: the shared kernels' path
    assert none is None
    torch.testing.assert_close(out2, want, rtol=0, atol=1e-10)


@pytest.mark.parametrize("causal", [True, False])
def test_core_with_memory_keys_before_the_queries(causal):
    """A memory prefix (xl, compressive, memory tokens): 5 keys before the 9 queries, the queries the last 9."""
    cfg, core = _core(causal, 1)
    q, _, _ = _qkv(seed=1)
    g = torch.Generator().manual_seed(2)
    k, v = (torch.randn(2, 4, L + 5, 8, generator=g, dtype=torch.float64) for _ in range(2))
    out, probs, _ = core(q, k, v, {}, _ctx())
    want, maps, _ = _reference(core, q, k, v, causal, 1)
    torch.testing.assert_close(out, want, rtol=0, atol=1e-10)
    torch.testing.assert_close(probs, maps, rtol=0, atol=1e-10)


def test_lambda_init_follows_the_layer_index():
    cfg = ModelConfig(**{**BASE, "n_layers": 4}).validate()
    model = build_model(cfg)
    got = [b.attn.core.lambda_init for b in model.stack.blocks]
    assert got == pytest.approx([0.8 - 0.6 * math.exp(-0.3 * (n - 1)) for n in (1, 2, 3, 4)], abs=1e-15)
    assert got[0] == pytest.approx(0.2)


def _rope_half_heads(x, pos, base):
    """Rotate-half RoPE on each half of ``x [T, d_h]`` as its own head of ``d_h / 2``, element by element."""
    dh = x.shape[-1]
    out = x.clone()
    for part in (0, dh // 2):
        m = dh // 2
        for t in range(x.shape[0]):
            for i in range(m // 2):
                a, b = part + i, part + i + m // 2
                ang = float(pos[t]) * base ** (-2 * i / m)
                c, s = math.cos(ang), math.sin(ang)
                out[t, a] = x[t, a] * c - x[t, b] * s
                out[t, b] = x[t, b] * c + x[t, a] * s
    return out


@pytest.mark.parametrize("causal", [True, False])
def test_sublayer_rotates_each_half_head_with_rope(causal):
    """With RoPE, the sublayer hands the core queries and keys whose halves are rotated as heads of d_h / 2
    (the official code's layout), so Q1 K1^T and Q2 K2^T each depend on the distance only."""
    cfg = ModelConfig(**{**BASE, "position": "rope", "causal": causal}).validate()
    model = build_model(cfg).double()
    attn = model.stack.blocks[0].attn
    x = torch.randn(2, L, cfg.d_model, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    ctx = ForwardContext(tokens=torch.zeros(2, L, dtype=torch.long), position=model.position, need_weights=True)
    info = LayerInfo(index=0)
    got = attn(x, ctx, info)
    h, dh = cfg.n_heads, cfg.d_head
    pos = torch.arange(L)
    q = (x @ attn.q_proj.weight.T).view(2, L, h, dh).transpose(1, 2)
    k = (x @ attn.k_proj.weight.T).view(2, L, h, dh).transpose(1, 2)
    v = (x @ attn.v_proj.weight.T).view(2, L, h, dh).transpose(1, 2)
    qr = torch.stack([torch.stack([_rope_half_heads(q[b, n], pos, cfg.rope_base) for n in range(h)]) for b in range(2)])
    kr = torch.stack([torch.stack([_rope_half_heads(k[b, n], pos, cfg.rope_base) for n in range(h)]) for b in range(2)])
    heads, maps, _ = _reference(attn.core, qr, kr, v, causal, 0)
    want = heads.transpose(1, 2).reshape(2, L, h * dh) @ attn.out_proj.weight.T
    torch.testing.assert_close(got, want, rtol=0, atol=1e-10)
    torch.testing.assert_close(info.attention, maps, rtol=0, atol=1e-10)


@pytest.mark.parametrize("causal", [True, False])
def test_gradients_reach_lambda_norm_and_inputs(causal):
    cfg, core = _core(causal, 2)
    q, k, v = (t.requires_grad_(True) for t in _qkv())
    out, _, _ = core(q, k, v, {}, _ctx(False))
    out.pow(2).sum().backward()
    for t in (q, k, v, *core.parameters()):
        assert t.grad is not None and torch.isfinite(t.grad).all() and t.grad.abs().sum() > 0


def test_parameter_count_is_exact():
    cfg = ModelConfig(**{**BASE, "n_layers": 3}).validate()
    full = cfg.replace(attention="full").approx_params()
    assert cfg.approx_params() - full == 3 * (4 * (cfg.d_head // 2) + cfg.d_head)
    assert sum(p.numel() for p in build_model(cfg).parameters()) == cfg.approx_params()


@pytest.mark.parametrize(
    "change,field",
    [
        (dict(position="alibi"), "position"),
        (dict(position="t5"), "position"),
        (dict(position="shaw"), "position"),
        (dict(d_model=36, n_heads=4, position="sinusoidal"), "d_model"),  # d_h = 9: no halves
        (dict(d_model=24, n_heads=4, position="rope"), "d_model"),  # d_h = 6: halves of 3 cannot be rotated
    ],
)
def test_refusals_name_the_field(change, field):
    with pytest.raises(ConfigError) as e:
        ModelConfig(**{**BASE, **change}).validate()
    assert e.value.field == field
