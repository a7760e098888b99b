"""mla (DeepSeek-V2's multi-head latent attention): the sublayer against a float64 plain-PyTorch loop over heads
written here from the paper's formulas (its own RMSNorm and its own interleaved / rotate-half RoPE), the naive and
absorbed forms against each other, the cache the core receives, the size estimate, gradients and refusals; and the
layout against ``transformers``' ``DeepseekV3Attention`` with the same weights."""

import math

import pytest
import torch

from models import ConfigError, ModelConfig, build_model
from models.context import ForwardContext, LayerInfo
from models.interventions import Interventions

BASE = dict(
    attention="mla",
    position="rope",
    d_model=32,
    n_heads=4,
    n_layers=1,
    max_len=64,
    kv_lora_rank=12,
    qk_nope_head_dim=6,
    qk_rope_head_dim=4,
    v_head_dim=5,
)
T = 11


def _model(**kw):
    cfg = ModelConfig(**{**BASE, **kw}).validate()
    return cfg, build_model(cfg).double()


def _rms(x, gain, eps):
    return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps) * gain


def _rope_pairs(x, pos, base, interleaved):
    """Rotate ``x [T, m]`` at positions ``pos [T]``: pair ``i`` is ``(x_2i, x_2i+1)`` when interleaved (DeepSeek),
    ``(x_i, x_i+m/2)`` otherwise, turned by ``pos * base^(-2i/m)``; element by element."""
    m = x.shape[-1]
    out = x.clone()
    for t in range(x.shape[0]):
        for i in range(m // 2):
            a, b = (2 * i, 2 * i + 1) if interleaved else (i, i + m // 2)
            ang = float(pos[t]) * base ** (-2 * i / m)
            c, s = math.cos(ang), math.sin(ang)
            out[t, a] = x[t, a] * c - x[t, b] * s
            out[t, b] = x[t, b] * c + x[t, a] * s
    return out


def _reference(attn, x, cfg):
    """The sublayer's output ``(B, T, d)`` and maps ``(B, h, T, T)`` from the formulas, one head at a time."""
    core = attn.core
    h, dn, dr, dv, r = cfg.n_heads, cfg.qk_nope_head_dim, cfg.qk_rope_head_dim, cfg.v_head_dim, cfg.kv_lora_rank
    B, L, _ = x.shape
    if cfg.q_lora_rank:
        cq = _rms(x @ core.q_a_proj.weight.T, core.q_a_layernorm.weight, 1e-6)
        qall = cq @ core.q_b_proj.weight.T
    else:
        qall = x @ core.q_proj.weight.T  # (B, T, h (dn + dr))
    ckr = x @ core.kv_a_proj_with_mqa.weight.T  # (B, T, r + dr)
    c = _rms(ckr[..., :r], core.kv_a_layernorm.weight, 1e-6)
    kr = ckr[..., r:]
    wkvb = core.kv_b_proj.weight  # (h (dn + dv), r)
    pos = torch.arange(L)
    allowed = (pos[None, :] <= pos[:, None]) if cfg.causal else torch.ones(L, L, dtype=torch.bool)
    outs, maps = [], []
    for b in range(B):
        kr_rot = _rope_pairs(kr[b], pos, cfg.rope_base, cfg.rope_interleave)  # one per token, every head
        heads, ps = [], []
        for n in range(h):
            qn = qall[b, :, n * (dn + dr) : (n + 1) * (dn + dr)]
            q_c, q_r = qn[:, :dn], _rope_pairs(qn[:, dn:], pos, cfg.rope_base, cfg.rope_interleave)
            rows = wkvb[n * (dn + dv) : (n + 1) * (dn + dv)]
            k_c, v = c[b] @ rows[:dn].T, c[b] @ rows[dn:].T  # (T, dn), (T, dv)
            s = (q_c @ k_c.T + q_r @ kr_rot.T) / math.sqrt(dn + dr)
            p = torch.softmax(s.masked_fill(~allowed, -math.inf), -1)
            heads.append(p @ v)
            ps.append(p)
        outs.append(torch.cat(heads, -1) @ attn.out_proj.weight.T)
        maps.append(torch.stack(ps))
    return torch.stack(outs), torch.stack(maps)


def _run(model, x, need_weights=True):
    attn = model.stack.blocks[0].attn
    ctx = ForwardContext(tokens=torch.zeros(x.shape[:2], dtype=torch.long), position=model.position)
    ctx.need_weights = need_weights
    info = LayerInfo(index=0)
    return attn(x, ctx, info), info


def _x(cfg, seed=1, B=2):
    return torch.randn(B, T, cfg.d_model, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("absorb", [False, True])
@pytest.mark.parametrize("q_lora_rank", [0, 7])
@pytest.mark.parametrize("interleave", [True, False])
def test_sublayer_equals_the_formulas(causal, absorb, q_lora_rank, interleave):
    cfg, model = _model(causal=causal, mla_absorb=absorb, q_lora_rank=q_lora_rank, rope_interleave=interleave)
    attn = model.stack.blocks[0].attn
    for p in attn.parameters():  # RMSNorm gains away from 1, so a missing gain would show
        if p.dim() == 1:
            p.data.uniform_(0.5, 1.5)
    x = _x(cfg)
    got, info = _run(model, x)
    want, maps = _reference(attn, x, cfg)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-10)
    torch.testing.assert_close(info.attention, maps, rtol=0, atol=1e-10)


YARN = dict(yarn_factor=40.0, yarn_original_max_len=8, yarn_attention_factor=1.0, yarn_mscale_all_dim=1.0)


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("extra", [{}, YARN], ids=["rope", "yarn_temperature"])
def test_naive_and_absorbed_forms_agree(causal, extra):
    """Same weights, the two forms: outputs, maps and every gradient within 1e-10 in float64 (also with YaRN and
    DeepSeek's softmax temperature ``yarn_mscale_all_dim``, which both forms apply)."""
    cfg, naive = _model(causal=causal, q_lora_rank=5, **extra)
    _, absorbed = _model(causal=causal, q_lora_rank=5, mla_absorb=True, **extra)
    absorbed.load_state_dict(naive.state_dict())
    x = _x(cfg, seed=3)
    results = []
    for model in (naive, absorbed):
        out, info = _run(model, x)
        out.pow(2).sum().backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        results.append((out, info.attention, info.q, info.k, grads))
    (o1, a1, q1, k1, g1), (o2, a2, q2, k2, g2) = results
    torch.testing.assert_close(o1, o2, rtol=0, atol=1e-10)
    torch.testing.assert_close(a1, a2, rtol=0, atol=1e-10)
    torch.testing.assert_close(q1, q2, rtol=0, atol=1e-10)
    torch.testing.assert_close(k1, k2, rtol=0, atol=1e-10)
    assert g1.keys() == g2.keys() and g1
    for name in g1:
        torch.testing.assert_close(g1[name], g2[name], rtol=0, atol=1e-10, msg=name)
    # also without weights requested (the path the model takes when no map is drawn)
    torch.testing.assert_close(_run(naive, x, False)[0], _run(absorbed, x, False)[0], rtol=0, atol=1e-10)


def test_recorded_q_k_give_the_map():
    """The per-head q, k the core reports for the views reproduce its map: softmax(q.k / sqrt(dn + dr))."""
    cfg, model = _model(causal=True)
    _, info = _run(model, _x(cfg))
    s = info.q @ info.k.transpose(-1, -2) / math.sqrt(cfg.qk_nope_head_dim + cfg.qk_rope_head_dim)
    allowed = torch.ones(T, T, dtype=torch.bool).tril()
    p = torch.softmax(s.masked_fill(~allowed, -math.inf), -1)
    torch.testing.assert_close(p, info.attention, rtol=0, atol=1e-12)
    assert info.q.shape == (2, cfg.n_heads, T, 10) and info.k.shape == (2, cfg.n_heads, T, 10)


@pytest.mark.parametrize("absorb", [False, True])
def test_the_core_receives_only_the_latent_and_the_shared_rope_key(absorb):
    """What reaches the core (the decoding cache): one "head" of kv_lora_rank + qk_rope_head_dim per token."""
    cfg, model = _model(mla_absorb=absorb, n_layers=2)
    seen = []
    model(torch.randint(0, 256, (2, T)), interventions=Interventions(observe_cores=seen.append))
    assert len(seen) == 2
    for call in seen:
        assert call.k.shape == (2, 1, T, cfg.kv_lora_rank + cfg.qk_rope_head_dim)
        assert call.v.shape == (2, 1, T, cfg.kv_lora_rank)
        assert call.q.shape == (2, cfg.n_heads, T, cfg.qk_nope_head_dim + cfg.qk_rope_head_dim)


@pytest.mark.parametrize("q_lora_rank", [0, 9])
def test_parameter_count_is_exact(q_lora_rank):
    cfg, model = _model(q_lora_rank=q_lora_rank, n_layers=2)
    d, h = cfg.d_model, cfg.n_heads
    per_layer_by_hand = (
        (d * q_lora_rank + q_lora_rank + q_lora_rank * h * 10 if q_lora_rank else d * h * 10)  # queries
        + d * (12 + 4)  # kv_a_proj_with_mqa
        + 12  # kv_a_layernorm
        + 12 * h * (6 + 5)  # kv_b_proj
        + h * 5 * d  # out_proj
    )
    full = ModelConfig(**{**BASE, "attention": "full", "n_layers": 2}).validate().approx_params()
    standard_attention = 4 * d * d
    assert cfg.approx_params() == full - 2 * standard_attention + 2 * per_layer_by_hand
    assert sum(p.numel() for p in model.parameters()) == cfg.approx_params()


@pytest.mark.parametrize("absorb", [False, True])
def test_gradients_reach_every_parameter_and_nothing_leaks(absorb):
    cfg, model = _model(mla_absorb=absorb, q_lora_rank=6, n_layers=2)
    t = torch.randint(0, 256, (2, T), generator=torch.Generator().manual_seed(0))
    out = model(t)
    out.logits.pow(2).mean().backward()
    for name, p in model.named_parameters():
        if ".attn." in name:
            assert p.grad is not None and torch.isfinite(p.grad).all() and p.grad.abs().sum() > 0, name
    model.zero_grad()
    t2 = t.clone()
    t2[:, 6] = (t2[:, 6] + 1) % 256
    with torch.no_grad():
        a, b = model(t).logits, model(t2).logits
    torch.testing.assert_close(a[:, :6], b[:, :6], rtol=0, atol=1e-12)
    assert not torch.allclose(a[:, 6:], b[:, 6:])


@pytest.mark.parametrize(
    "change,field",
    [
        (dict(position="sinusoidal"), "position"),
        (dict(position="none"), "position"),
        (dict(position="alibi"), "position"),
        (dict(position="t5"), "position"),
        (dict(qk_rope_head_dim=5), "qk_rope_head_dim"),
        (dict(n_kv_heads=2), "n_kv_heads"),
        (dict(attn_bias="qkv"), "attn_bias"),
        (dict(memory="xl", position="rope"), "memory"),
        (dict(memory="knn"), "memory"),
        (dict(layer="funnel", funnel_blocks=1), "attention"),  # funnel takes full attention only
    ],
)
def test_refusals_name_the_field(change, field):
    with pytest.raises(ConfigError) as e:
        ModelConfig(**{**BASE, **change}).validate()
    assert e.value.field == field


def test_layout_matches_transformers_deepseek_v3():
    """Same weights in ``transformers``' DeepseekV3Attention (eager, interleaved RoPE): same output."""
    tr = pytest.importorskip("transformers")
    from transformers.models.deepseek_v3 import modeling_deepseek_v3 as ds

    for q_lora_rank, interleave in [(0, True), (7, True), (0, False)]:
        cfg, model = _model(q_lora_rank=q_lora_rank, rope_interleave=interleave)
        model = model.float()
        hf_cfg = tr.DeepseekV3Config(
            hidden_size=cfg.d_model,
            num_attention_heads=cfg.n_heads,
            num_key_value_heads=cfg.n_heads,
            q_lora_rank=q_lora_rank or None,
            kv_lora_rank=cfg.kv_lora_rank,
            qk_nope_head_dim=cfg.qk_nope_head_dim,
            qk_rope_head_dim=cfg.qk_rope_head_dim,
            v_head_dim=cfg.v_head_dim,
            rope_interleave=interleave,
            attention_bias=False,
            max_position_embeddings=64,
        )
        hf_cfg._attn_implementation = "eager"
        hf = ds.DeepseekV3Attention(hf_cfg, 0)
        attn = model.stack.blocks[0].attn
        state = {k: v for k, v in attn.core.state_dict().items()}
        state["o_proj.weight"] = attn.out_proj.weight
        hf.load_state_dict(state, strict=True)
        x = torch.randn(2, T, cfg.d_model, generator=torch.Generator().manual_seed(4))
        pos = torch.arange(T)[None].expand(2, T)
        cos_sin = ds.DeepseekV3RotaryEmbedding(hf_cfg)(x, pos)
        mask = torch.full((T, T), -math.inf).triu(1)[None, None]
        want, _ = hf(x, cos_sin, mask)
        got, _ = _run(model, x)
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
