"""A head width apart from ``d_model / n_heads`` (``head_dim``): every attention key that accepts it builds, runs
forward and backward and is counted exactly by ``approx_params``; full attention equals a float64 loop over heads
written from the formula (q, k, v: ``d_model -> heads * d_h``, softmax(q k^T / sqrt(d_h)) v, output
``heads * d_h -> d_model``); what cannot use it is refused naming ``head_dim``."""

import math

import pytest
import torch

from models import ConfigError, ModelConfig, build_model, choices
from models.context import ForwardContext, LayerInfo

# d_model / n_heads = 8; heads of 12 make the heads' concatenated width 48, not 32
BASE = dict(
    n_layers=2,
    d_model=32,
    n_heads=4,
    head_dim=12,
    max_len=64,
    window=8,
    stride=8,
    block_size=8,
    n_global=2,
    n_random=1,
    segment_len=16,
    mem_len=16,
    chunk_size=8,
    n_features=16,
    proj_len=16,
    n_landmarks=8,
    max_span=16,
    span_ramp=4,
    n_inducing=4,
)
REFUSED = {"mla": "qk_nope_head_dim"}  # keys with head widths of their own: head_dim is refused, naming that
L = 24


def _valid(**kw):
    """The first valid config of ``kw`` over the positions a key may need (rope, else none); None if refused."""
    for position in ("rope", "none", "sinusoidal"):
        try:
            return ModelConfig(**{**BASE, "position": position, **kw}).validate()
        except ConfigError as e:
            if e.field == "head_dim":
                raise
    return None


def _tokens(B=2, n=L, seed=0):
    return torch.randint(0, 256, (B, n), generator=torch.Generator().manual_seed(seed))


def _run(cfg, *args):
    model = build_model(cfg)
    out = model(*args)
    (out.logits.float().pow(2).mean() + out.aux_loss).backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert grads and all(torch.isfinite(g).all() for g in grads)
    assert torch.isfinite(out.logits).all()
    assert cfg.approx_params() == sum(p.numel() for p in model.parameters())
    return model


@pytest.mark.parametrize("key", [k for k in choices()["attention"] if k not in REFUSED])
def test_every_attention_key_runs_with_a_head_width_of_its_own(key):
    ran = []
    for causal in (True, False):
        cfg = _valid(attention=key, causal=causal)
        if cfg is None:
            continue
        model = _run(cfg, _tokens())
        attn = model.stack.blocks[0].attn
        assert tuple(attn.out_proj.weight.shape) == (32, 48)
        if hasattr(attn, "q_proj"):
            assert tuple(attn.q_proj.weight.shape) == (48, 32)
        ran.append(causal)
    assert ran, f"attention={key!r} is refused with head_dim=12 in both causal settings"


@pytest.mark.parametrize(
    "category,key", [(c, k) for c in ("memory", "layer") for k in choices()[c]], ids=lambda v: str(v)
)
def test_every_memory_and_layer_structure_runs_with_a_head_width_of_its_own(category, key):
    """Memories (their own keys, compressive reconstruction, kNN) and layer structures (funnel's pooled queries,
    shared and repeated layers) with heads of 12 at d_model 32."""
    extra = dict(cmem_len=8, n_memory=2, knn_size=64, knn_k=4)
    ran = [
        c for c in (True, False) if (cfg := _valid(**extra, **{category: key, "causal": c})) and _run(cfg, _tokens())
    ]
    assert ran, f"{category}={key!r} is refused with head_dim=12 in both causal settings"


@pytest.mark.parametrize("key", list(REFUSED))
def test_keys_with_widths_of_their_own_refuse_head_dim(key):
    with pytest.raises(ConfigError) as e:
        ModelConfig(**{**BASE, "position": "rope", "attention": key}).validate()
    assert e.value.field == "head_dim" and REFUSED[key] in str(e.value)


@pytest.mark.parametrize(
    "extra",
    [
        dict(qk_norm="head"),
        dict(qk_norm="all"),
        dict(attn_gate="elementwise"),
        dict(attn_gate="headwise"),
        dict(attn_sinks=True),
        dict(n_kv_heads=2),
        dict(n_kv_heads=1, attention="sliding_window"),
        dict(attention="differential"),
        dict(attention="differential", n_kv_heads=2, head_dim=4),
        dict(layer_schedule="sliding_window,full"),
        dict(layer_schedule="mla,full"),  # MLA layers keep their own widths, the full ones read head_dim
        dict(head_dim=64, n_heads=2),  # wider than d_model
        dict(head_dim=6, d_model=30, n_heads=4),  # d_model not a multiple of n_heads: the width is given
    ],
    ids=str,
)
def test_the_sublayer_terms_follow_the_head_width(extra):
    kw = {"attention": "full", **extra}
    if "layer_schedule" in kw:
        kw["attention"] = kw["layer_schedule"].split(",")[-1]
    cfg = _valid(**kw)
    assert cfg is not None
    _run(cfg, _tokens())


def test_cross_attention_and_the_encoder_follow_the_head_width():
    cfg = _valid(architecture="encoder_decoder", causal=True)
    model = _run(cfg, _tokens(), _tokens(n=9, seed=1))
    cross = model.decoder.blocks[0].cross
    assert tuple(cross.q_proj.weight.shape) == (48, 32) and tuple(cross.out_proj.weight.shape) == (32, 48)


def test_an_odd_head_width_is_refused_with_rope_naming_head_dim():
    with pytest.raises(ConfigError) as e:
        ModelConfig(**{**BASE, "head_dim": 7, "position": "rope"}).validate()
    assert e.value.field == "head_dim"
    ModelConfig(**{**BASE, "head_dim": 7, "position": "sinusoidal"}).validate()  # no pairs to rotate


def test_head_dim_out_of_range_is_refused():
    for bad in (0, -3, 5000):
        with pytest.raises(ConfigError) as e:
            ModelConfig(**{**BASE, "head_dim": bad}).validate()
        assert e.value.field == "head_dim"


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("n_kv", [None, 2])
def test_full_attention_with_a_head_width_of_its_own_equals_the_formula_in_float64(causal, n_kv):
    """softmax(x W_q^n (x W_k^g)^T / sqrt(d_h)) x W_v^g per query head n (K/V head g = n // (h / h_kv)), the heads
    concatenated (h * d_h = 48 numbers) and mapped back to d_model = 32 by W_o. Sinusoidal positions are added to
    the embeddings, so the sublayer called on ``x`` sees ``x`` as given."""
    cfg = ModelConfig(**{**BASE, "n_kv_heads": n_kv, "position": "sinusoidal", "causal": causal}).validate()
    model = build_model(cfg).double()
    attn = model.stack.blocks[0].attn
    B, T, d, h, dh = 2, 11, 32, 4, 12
    hkv = n_kv or h
    x = torch.randn(B, T, d, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    ctx = ForwardContext(tokens=torch.zeros(B, T, dtype=torch.long), position=model.position)
    got = attn(x, ctx, LayerInfo(index=0))
    wq, wk, wv = attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight  # (h * d_h, d), (h_kv * d_h, d) x2
    assert wq.shape == (h * dh, d) and wk.shape == (hkv * dh, d)
    allowed = torch.ones(T, T, dtype=torch.bool)
    if causal:
        allowed = torch.arange(T)[None, :] <= torch.arange(T)[:, None]
    heads = []
    for n in range(h):
        g = n // (h // hkv)
        q = x @ wq[n * dh : (n + 1) * dh].T  # (B, T, d_h)
        k = x @ wk[g * dh : (g + 1) * dh].T
        v = x @ wv[g * dh : (g + 1) * dh].T
        s = (q @ k.transpose(1, 2) / math.sqrt(dh)).masked_fill(~allowed, -math.inf)
        heads.append(torch.softmax(s, -1) @ v)
    want = torch.cat(heads, -1) @ attn.out_proj.weight.T  # (B, T, h * d_h) -> (B, T, d)
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("attention", ["full", "linear"])
def test_footprint_counts_and_bounds_wide_heads(attention):
    """Heads much wider than d_model / n_heads (4 x 64 at d_model 32): the meta-device count is the built model's and
    the predicted activation peak bounds the measured one, maps and kept q, k included."""
    from kernels.tools.measure import measure_peak
    from models.footprint import footprint, weights

    cfg = ModelConfig(**{**BASE, "head_dim": 64, "attention": attention}).validate()
    model = build_model(cfg)
    assert weights(cfg)[0] == sum(p.numel() for p in model.parameters()) == cfg.approx_params()
    tokens = _tokens(n=48)

    def forward():
        with torch.no_grad():
            return build_model(cfg).eval()(tokens, return_attention=True).logits.shape

    def backward():
        out = build_model(cfg).train()(tokens)
        (out.logits.float().logsumexp(-1).mean() + out.aux_loss).backward()
        return out.logits.shape

    _, fwd = measure_peak(forward)
    _, bwd = measure_peak(backward)
    assert 0 < fwd <= footprint(cfg, "attention", 48, 2).total
    assert 0 < bwd <= footprint(cfg, "gradients", 48, 2).total
