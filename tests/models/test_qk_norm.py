"""Query/key normalisation (``qk_norm``, models/qkv.py) and partial rotary embeddings (``rope_fraction``)
against float64 references written from the formulas: one attention layer of a catalogue model, its logits
recomputed by hand (RMSNorm per head or over the whole projection, rotate-half RoPE on the first ``rot``
dims, softmax attention with and without the causal mask)."""

import math

import pytest
import torch

from models import ConfigError, ModelConfig, build_model

D, H = 24, 4


def _model(**kw):
    kw = {"norm_placement": "none", **kw}
    cfg = ModelConfig(vocab_size=50, d_model=D, n_heads=H, n_layers=1, ffn="none", **kw).validate()
    model = build_model(cfg).double().eval()
    g = torch.Generator().manual_seed(7)
    with torch.no_grad():  # gains start at 1: move them so a wrong axis or a missing gain shows
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(1 + 0.5 * torch.randn(p.shape, generator=g, dtype=p.dtype))
    return cfg, model


def _rms(t, g, eps):
    return t / torch.sqrt((t * t).mean(-1, keepdim=True) + eps) * g


def _rotate(t, pos, rot, base):
    """Rotate-half RoPE on the first ``rot`` dims of ``t (..., L, d_h)``: dim k pairs with k + rot/2 and turns
    by ``pos * base^(-2k/rot)``; the other dims are left as they are."""
    half = rot // 2
    theta = torch.tensor([base ** (-2 * k / rot) for k in range(half)], dtype=torch.float64)
    ang = pos.double()[:, None] * theta  # (L, rot/2)
    c, s = torch.cos(ang), torch.sin(ang)
    a, b, rest = t[..., :half], t[..., half:rot], t[..., rot:]
    return torch.cat([a * c - b * s, b * c + a * s, rest], dim=-1)


def _reference(cfg, model, tokens, kind, rot):
    """Logits of a one-layer, FFN-less, norm-free model: ``W_out (x + Attn(x))``, from the weights."""
    blk = model.stack.blocks[0].attn
    hkv, dh = cfg.kv_heads, cfg.d_model // cfg.n_heads
    x = model.embed.weight[tokens]  # (B, L, d)
    B, L, _ = x.shape
    q, k, v = x @ blk.q_proj.weight.T, x @ blk.k_proj.weight.T, x @ blk.v_proj.weight.T
    eps = cfg.norm_eps
    if kind == "all":  # OLMo 2: the whole projection, one gain per output feature
        q, k = _rms(q, blk.q_norm.weight, eps), _rms(k, blk.k_norm.weight, eps)
    q, k, v = (t.view(B, L, -1, dh).transpose(1, 2) for t in (q, k, v))  # (B, n, L, d_h)
    if kind == "head":  # Qwen3: each head's d_h dims, one gain shared by the heads
        q, k = _rms(q, blk.q_norm.weight, eps), _rms(k, blk.k_norm.weight, eps)
    pos = torch.arange(L)
    q, k = _rotate(q, pos, rot, cfg.rope_base), _rotate(k, pos, rot, cfg.rope_base)
    rep = cfg.n_heads // hkv
    k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)  # query head n reads n // rep
    s = q @ k.transpose(-1, -2) / math.sqrt(dh)
    if cfg.causal:
        s = s.masked_fill(torch.ones(L, L, dtype=torch.bool).triu(1), float("-inf"))
    out = (s.softmax(-1) @ v).transpose(1, 2).reshape(B, L, -1) @ blk.out_proj.weight.T
    if cfg.norm_placement == "res_post":  # OLMo 2: x + RMSNorm(Attn(x)), then the final RMSNorm
        res = model.stack.blocks[0].res_attn.norm.weight
        h = x + _rms(out, res, eps)
        return _rms(h, model.final_norm.weight, eps) @ model.head.weight.T
    return (x + out) @ model.head.weight.T


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize(
    "kind, n_kv_heads, fraction, rot",
    [
        ("head", None, 1.0, 6),
        ("all", None, 1.0, 6),
        ("head", 2, 0.5, 2),  # int(6 * 0.5) = 3, rounded down to even
        ("all", 1, 0.7, 4),  # int(4.2) = 4
        ("none", 2, 0.34, 2),  # partial RoPE alone
    ],
)
def test_logits_match_the_float64_formula(causal, kind, n_kv_heads, fraction, rot):
    cfg, model = _model(causal=causal, qk_norm=kind, n_kv_heads=n_kv_heads, rope_fraction=fraction, norm_eps=1e-3)
    tokens = torch.randint(0, 50, (2, 9), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        got = model(tokens).logits
        want = _reference(cfg, model, tokens, kind, rot)
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)
    if kind != "none":  # the norm matters: the same weights without it give other logits (the test can fail)
        with torch.no_grad():
            plain = _reference(cfg, model, tokens, "none", rot)
        assert (plain - want).abs().max() > 1e-3


@pytest.mark.parametrize("causal", [True, False])
def test_olmo2_shaped_layer_res_post_norm_matches_the_float64_formula(causal):
    cfg, model = _model(
        causal=causal, qk_norm="all", n_kv_heads=2, norm_placement="res_post", norm="rmsnorm", norm_eps=1e-3
    )
    tokens = torch.randint(0, 50, (2, 9), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        torch.testing.assert_close(
            model(tokens).logits, _reference(cfg, model, tokens, "all", 6), rtol=1e-10, atol=1e-10
        )


def test_partial_rope_leaves_the_tail_unrotated_and_stays_relative():
    cfg, model = _model(rope_fraction=0.5)
    rope = model.position
    q, k = torch.randn(1, H, 5, 6, dtype=torch.float64), torch.randn(1, H, 5, 6, dtype=torch.float64)
    q2, k2 = rope.modify(q, k, 0)[:2]
    torch.testing.assert_close(q2[..., 2:], q[..., 2:])  # rot = 2: dims 2..5 pass through
    assert not torch.allclose(q2[..., :2], q[..., :2])
    # the rotated part's scores depend only on the distance: shift both by 3 positions
    q3, k3 = rope.modify(q, k, 0, k_start=3)[:2]
    torch.testing.assert_close(q2 @ k2.transpose(-1, -2), q3 @ k3.transpose(-1, -2))


def test_partial_rope_matches_transformers_gpt_neox_convention():
    """transformers' GPT-NeoX (``rotary_pct`` / ``partial_rotary_factor``): ``q[..., :rotary_dim]`` rotated with
    rotate-half inside it and frequencies over ``rotary_dim``, ``q[..., rotary_dim:]`` concatenated back."""
    transformers = pytest.importorskip("transformers")
    from transformers.models.gpt_neox import modeling_gpt_neox as neox

    dh, frac = 16, 0.25
    hf_cfg = transformers.GPTNeoXConfig(
        hidden_size=4 * dh, num_attention_heads=4, rotary_pct=frac, rotary_emb_base=10000, max_position_embeddings=64
    )
    emb = neox.GPTNeoXRotaryEmbedding(hf_cfg)
    q, k = torch.randn(2, 4, 7, dh), torch.randn(2, 4, 7, dh)
    pos = torch.arange(7)[None].expand(2, 7)
    cos, sin = emb(q, pos)
    want_q, want_k = neox.apply_rotary_pos_emb(q, k, cos, sin)
    cfg = ModelConfig(d_model=4 * dh, n_heads=4, rope_fraction=frac).validate()
    rope = build_model(cfg).position
    got_q, got_k = rope.modify(q, k, 0)[:2]
    torch.testing.assert_close(got_q, want_q, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got_k, want_k, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kind", ["head", "all"])
def test_gradients_reach_the_norm_gains_and_the_count_is_exact(kind):
    for extra in ({}, {"n_kv_heads": 2}, {"architecture": "encoder_decoder"}, {"memory": "compressive"}):
        cfg = ModelConfig(d_model=32, n_heads=4, n_layers=2, qk_norm=kind, **extra).validate()
        model = build_model(cfg)
        assert cfg.approx_params() == sum(p.numel() for p in model.parameters()), extra
        gains = {n: p for n, p in model.named_parameters() if n.endswith(("q_norm.weight", "k_norm.weight"))}
        width = {"head": 8, "all": None}[kind]
        for name, p in gains.items():
            assert p.shape[0] == (width or (32 if "q_norm" in name else 8 * cfg.kv_heads)), name
        tokens = torch.randint(0, 256, (2, 12))
        out = model(tokens, tokens) if extra.get("architecture") else model(tokens)
        (out.logits.square().mean() + out.aux_loss).backward()
        assert gains and all(p.grad is not None and p.grad.abs().sum() > 0 for p in gains.values()), extra


def test_qk_norm_and_rope_fraction_refusals_name_the_field_and_why():
    cases = [
        (dict(qk_norm="head", attention="lsh"), "qk_norm", "shared-QK"),
        (dict(qk_norm="all", attention="synthesizer_dense", position="learned"), "qk_norm", "dot product"),
        (dict(qk_norm="per_head"), "qk_norm", "'none', 'head', 'all'"),
        (dict(rope_fraction=0.5, position="alibi"), "rope_fraction", "position='rope'"),
        (dict(rope_fraction=0.0), "rope_fraction", "(0, 1]"),
        (dict(rope_fraction=1.5), "rope_fraction", "(0, 1]"),
        (dict(rope_fraction=0.05), "rope_fraction", "rounded down to even"),  # int(32 * 0.05) = 1 -> 0
    ]
    for kw, field, why in cases:
        with pytest.raises(ConfigError) as e:
            ModelConfig(**kw).validate()
        assert e.value.field == field and why in str(e.value), kw
    assert ModelConfig(rope_fraction=0.0625).validate()  # 2 of 32 dims


def test_surgery_refuses_merging_kv_heads_under_a_whole_projection_key_norm():
    from models import surgery

    a = ModelConfig(d_model=32, n_heads=4, n_kv_heads=2, qk_norm="all").validate()
    with pytest.raises(ConfigError) as e:
        surgery.check(a, a.replace(n_kv_heads=1))
    assert e.value.field == "n_kv_heads"
    h = ModelConfig(d_model=32, n_heads=4, n_kv_heads=2, qk_norm="head").validate()
    b = h.replace(n_kv_heads=1)
    surgery.check(h, b)  # a per-head key norm is the same for every head: merging keeps it
    moved = surgery.transplant(build_model(h).state_dict(), h, b)
    assert moved.stack.blocks[0].attn.k_norm.weight.shape == (8,)


def test_the_triton_paths_take_the_qk_norm_shapes_and_the_rotated_slice():
    """On CUDA the q/k norms run ``kernels.norms``' fused RMSNorm on rows of ``d_h`` (per head) or of the whole
    projection, and partial RoPE the fused rotation on the non-contiguous slice ``x[..., :rot]`` (here in the
    Triton interpreter): forward and backward agree with the PyTorch path."""
    from kernels.cpu.norms import rms_norm_ref
    from kernels.cpu.rope import apply_rope_ref
    from kernels.norms import rms_norm
    from kernels.rope import apply_rope

    g = torch.Generator().manual_seed(0)
    for shape in ((2, 5, 4, 6), (2, 5, 24)):  # (B, L, h, d_h) per head; (B, L, h * d_h) whole projection
        x = torch.randn(*shape, generator=g, requires_grad=True)
        w = torch.randn(shape[-1], generator=g, requires_grad=True)
        dy = torch.randn(*shape, generator=g)
        got = torch.autograd.grad(rms_norm(x, w, 1e-6, force_triton=True), (x, w), dy)
        want = torch.autograd.grad(rms_norm_ref(x, w, 1e-6), (x, w), dy)
        for a, b in zip(got, want):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    x = torch.randn(2, 4, 7, 12, generator=g, requires_grad=True)
    pos = torch.arange(7)
    for rot in (2, 6):  # a half of 1 and of 3 (not a power of two)
        dy = torch.randn(2, 4, 7, rot, generator=g)
        (got,) = torch.autograd.grad(apply_rope(x[..., :rot], pos, 500.0, force_triton=True), x, dy)
        (want,) = torch.autograd.grad(apply_rope_ref(x[..., :rot], pos, 500.0), x, dy)
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
        assert got[..., rot:].abs().max() == 0  # the unrotated tail takes no gradient through the rotation
