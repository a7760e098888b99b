"""Properties shared by the axial, Sinkhorn, clustered, ProbSparse and synthesizer (dense and random)
attention mechanisms, on the core and on a whole model.

Gradients are finite and reach what they should, the effective attention is a distribution that
reproduces the output, the weights path equals the fast path, GQA equals MHA with repeated K/V, causal
cores and models leak nothing from later positions, the size estimate equals the built model, every key
is valid in some (causal, position) setting, refused combinations name the field, and float64 keeps
its precision. Per-mechanism references (formulas, brute force) are in test_axial.py, test_sinkhorn.py,
test_clustered.py, test_probsparse.py and test_synthesizer.py.
"""

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from models import ConfigError, ModelConfig, build_model, choices
from models.attention import ATTENTION
from models.context import ForwardContext

KEYS = ["axial", "sinkhorn", "clustered", "probsparse", "synthesizer_dense", "synthesizer_random"]
SMALL = dict(
    d_model=32,
    n_heads=4,
    n_layers=1,
    max_len=64,
    block_size=5,
    axial_width=5,
    n_clusters=3,
    lloyd_iters=4,
    probsparse_factor=2,
    position="sinusoidal",
)


@pytest.fixture
def core_base():
    """Blocks of 5, rows of 5 and 3 clusters: a length of 23 has a partial block, row and cluster."""
    return SMALL


def qkv(B=2, h=4, L=23, d=8, h_kv=None, seed=0, grad=False):
    g = torch.Generator().manual_seed(seed)
    out = [torch.randn(B, h if i == 0 else (h_kv or h), L, d, generator=g) for i in range(3)]
    return [t.requires_grad_(grad) for t in out]


def run(core, q, k, v, need_weights=False, mods=None):
    return core(q, k, v, mods or {}, ForwardContext(tokens=None, position=None, need_weights=need_weights))


def params(keys=KEYS):
    return [pytest.param(k, c, id=f"{k}-{'causal' if c else 'bidir'}") for k in keys for c in (True, False)]


@pytest.mark.parametrize("key,causal", params())
def test_core_gradients_are_finite_and_reach_queries_or_parameters(key, causal, core_for):
    cfg, core = core_for(key, causal, skip_rejected=True)
    q, k, v = qkv(grad=True)
    out, probs, _ = run(core, q, k, v)
    assert out.shape == q.shape and probs is None
    out.pow(2).mean().backward()
    assert v.grad is not None and torch.isfinite(v.grad).all() and v.grad.abs().sum() > 0
    trained = [p for p in core.parameters()]
    if key in ("synthesizer_dense", "sinkhorn", "synthesizer_random"):
        assert trained and all(p.grad is not None and torch.isfinite(p.grad).all() for p in trained)
        assert any(p.grad.abs().sum() > 0 for p in trained)
    if key != "synthesizer_random":  # the only mechanism that ignores its queries
        assert q.grad is not None and q.grad.abs().sum() > 0 and torch.isfinite(q.grad).all()


@pytest.mark.parametrize("key,causal", params())
def test_effective_attention_is_a_distribution_that_reproduces_the_output(key, causal, core_for):
    cfg, core = core_for(key, causal, skip_rejected=True)
    q, k, v = qkv()
    fast, none, _ = run(core, q, k, v)
    out, probs, _ = run(core, q, k, v, need_weights=True)
    assert none is None and probs.shape == (2, 4, 23, 23)
    torch.testing.assert_close(out, fast)
    assert (probs >= 0).all()
    torch.testing.assert_close(probs.sum(-1), torch.ones(2, 4, 23), rtol=0, atol=1e-5)
    torch.testing.assert_close(probs @ v, out, rtol=1e-4, atol=1e-5)
    if causal:
        assert (probs[..., torch.ones(23, 23, dtype=torch.bool).triu(1)] == 0).all()


@pytest.mark.parametrize("key,causal", params())
def test_gqa_equals_mha_with_repeated_kv(key, causal, core_for):
    cfg, core = core_for(key, causal, skip_rejected=True)
    q, k, v = qkv(h_kv=2)
    out, _, _ = run(core, q, k, v)
    ref, _, _ = run(core, q, k.repeat_interleave(2, 1), v.repeat_interleave(2, 1))
    torch.testing.assert_close(out, ref)


@pytest.mark.parametrize("key", [k for k in KEYS if k != "clustered"])
def test_causal_core_leaks_nothing(key, core_for):
    cfg, core = core_for(key, True)
    q, k, v = qkv()
    base, _, _ = run(core, q, k, v)
    for t in (1, 6, 12, 22):
        q2, k2, v2 = q.clone(), k.clone(), v.clone()
        for x in (q2, k2, v2):
            x[:, :, t:] = torch.randn_like(x[:, :, t:]) * 3.0  # change the present and the future
        out, _, _ = run(core, q2, k2, v2)
        torch.testing.assert_close(out[:, :, :t], base[:, :, :t], rtol=0, atol=1e-6)
        assert not torch.allclose(out[:, :, t:], base[:, :, t:])


MODEL = dict(n_layers=2, d_model=32, n_heads=4, max_len=64, block_size=8, axial_width=8, lloyd_iters=3)


def model_cfg(key, causal, n_kv=None):
    """The first position encoding (rope first) this key accepts in this causal setting, or None."""
    for position in ["rope"] + [p for p in choices()["position"] if p != "rope"]:
        try:
            return ModelConfig(**MODEL, attention=key, causal=causal, position=position, n_kv_heads=n_kv).validate()
        except ConfigError:
            continue
    return None


@pytest.mark.parametrize("key", KEYS)
def test_every_key_is_valid_in_some_causal_and_position_setting(key):
    assert any(model_cfg(key, c) is not None for c in (True, False))


@pytest.mark.parametrize("key,causal", params())
@pytest.mark.parametrize("n_kv", [None, 2])
def test_model_forward_backward_and_size_estimate(key, causal, n_kv):
    cfg = model_cfg(key, causal, n_kv)
    if cfg is None:
        pytest.skip(f"{key} does not support causal={causal} (declared in its capabilities)")
    model = build_model(cfg)
    assert cfg.approx_params() == sum(p.numel() for p in model.parameters())
    tokens = torch.randint(0, 256, (2, 30), generator=torch.Generator().manual_seed(0))
    out = model(tokens, return_attention=True)
    (out.logits.pow(2).mean() + out.aux_loss).backward()
    assert torch.isfinite(out.logits).all()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
    for a in out.attentions:
        torch.testing.assert_close(a.sum(-1), torch.ones(2, 4, 30), rtol=0, atol=1e-5)


@pytest.mark.parametrize("key", [k for k in KEYS if k != "clustered"])
def test_causal_models_leak_nothing(key):
    model = build_model(model_cfg(key, True)).eval()
    t = torch.randint(0, 256, (1, 30), generator=torch.Generator().manual_seed(1))
    base = model(t).logits
    for pos in (3, 17, 29):
        t2 = t.clone()
        t2[0, pos] = (t2[0, pos] + 1) % 256
        out = model(t2).logits
        torch.testing.assert_close(out[:, :pos], base[:, :pos], rtol=0, atol=1e-5)
        assert not torch.allclose(out[:, pos:], base[:, pos:])


@pytest.mark.parametrize(
    "key,field,kw",
    [
        ("clustered", "causal", {"causal": True}),
        ("clustered", "position", {"causal": False, "position": "alibi"}),
        ("sinkhorn", "position", {"position": "t5"}),
        ("axial", "position", {"position": "shaw"}),
        ("probsparse", "position", {"position": "xl"}),
        ("synthesizer_dense", "position", {"position": "rope"}),
        ("synthesizer_random", "position", {"position": "alibi"}),
        ("axial", "n_heads", {"n_heads": 1}),
        ("sinkhorn", "sinkhorn_temperature", {"sinkhorn_temperature": 0.0}),
        ("sinkhorn", "sinkhorn_iters", {"sinkhorn_iters": 0}),
        ("clustered", "lloyd_iters", {"lloyd_iters": 1000, "causal": False}),
        ("probsparse", "probsparse_factor", {"probsparse_factor": 0}),
        ("axial", "axial_width", {"axial_width": 1 << 17}),
        ("synthesizer_random", "max_len", {"max_len": 8192}),
        ("synthesizer_dense", "memory", {"memory": "tokens"}),
    ],
)
def test_invalid_values_and_combinations_name_the_field(key, field, kw, config_for):
    with pytest.raises(ConfigError) as e:
        config_for(key, **kw)
    assert e.value.field == field


def test_new_fields_keep_old_configs_unchanged():
    """Every new field has its documented default and survives the JSON round trip."""
    cfg = ModelConfig().validate()
    assert (cfg.axial_width, cfg.sinkhorn_iters, cfg.lloyd_iters, cfg.probsparse_factor) == (32, 7, 10, 5)
    assert cfg.sinkhorn_temperature == 0.75 and cfg.synthesizer_fixed is False
    assert ModelConfig.from_dict(cfg.to_dict()) == cfg


@pytest.mark.parametrize("key", ["synthesizer_dense", "synthesizer_random", "sinkhorn"])
def test_inputs_longer_than_max_len_are_a_config_error(key, core_for):
    cfg, core = core_for(key, True, max_len=16)
    q, k, v = qkv(L=17)
    with pytest.raises(ConfigError) as e:
        run(core, q, k, v)
    assert e.value.field == "max_len" and "17" in str(e.value)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    key=st.sampled_from(KEYS),
    causal=st.booleans(),
    L=st.integers(1, 33),
    n_heads=st.sampled_from([2, 3, 4]),
    kv=st.booleans(),
    block=st.integers(1, 12),
    width=st.integers(1, 12),
    clusters=st.integers(1, 40),
    iters=st.integers(1, 4),
    factor=st.integers(1, 6),
    fixed=st.booleans(),
    seed=st.integers(0, 99),
)
def test_random_small_shapes_give_distributions_and_finite_gradients(
    key, causal, L, n_heads, kv, block, width, clusters, iters, factor, fixed, seed
):
    try:
        cfg = ModelConfig(
            attention=key,
            causal=causal,
            n_heads=n_heads,
            d_model=4 * n_heads,
            n_kv_heads=1 if kv else None,
            max_len=40,
            block_size=block,
            axial_width=width,
            n_clusters=clusters,
            lloyd_iters=iters,
            sinkhorn_iters=iters,
            probsparse_factor=factor,
            synthesizer_fixed=fixed,
            seed=seed,
            position="sinusoidal",
        ).validate()
    except ConfigError:
        return  # clustered with causal=True: refused with its reason
    core = ATTENTION[key].build(cfg)
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(2, n_heads, L, 4, generator=g, requires_grad=True)
    k, v = (torch.randn(2, 1 if kv else n_heads, L, 4, generator=g, requires_grad=True) for _ in range(2))
    out, probs, _ = run(core, q, k, v, need_weights=True)
    torch.testing.assert_close(probs.sum(-1), torch.ones(2, n_heads, L), rtol=0, atol=1e-5)
    torch.testing.assert_close(probs @ v.repeat_interleave(n_heads // v.shape[1], 1), out, rtol=1e-4, atol=1e-5)
    if causal:
        assert (probs[..., torch.ones(L, L, dtype=torch.bool).triu(1)] == 0).all()
    out.square().sum().backward()
    assert all(torch.isfinite(t.grad).all() for t in (q, k, v) if t.grad is not None)
    assert all(torch.isfinite(p.grad).all() for p in core.parameters() if p.grad is not None)


@pytest.mark.parametrize("key,causal", params())
def test_float64_cores_keep_their_precision(key, causal, core_for):
    """A float64 model (``model.double()``) runs in float64: same result as float32, to fp32 round-off."""
    cfg, core = core_for(key, causal, skip_rejected=True)
    q, k, v = qkv()
    out32, p32, _ = run(core, q, k, v, need_weights=True)
    core = core.double()
    out64, p64, _ = run(core, q.double(), k.double(), v.double(), need_weights=True)
    assert out64.dtype == p64.dtype == torch.float64
    torch.testing.assert_close(p64.sum(-1), torch.ones(2, 4, 23, dtype=torch.float64), rtol=0, atol=1e-12)
    torch.testing.assert_close(out64.float(), out32, rtol=1e-4, atol=1e-5)
