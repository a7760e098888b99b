"""Every registry key, both causal settings: forward/backward, no leak, sparse == dense reference.

Parametrized over ``choices()``, so a variant is tested the day it is registered.
"""

import math

import pytest
import torch

from models import ConfigError, ModelConfig, build_model, choices
from models.attention import ATTENTION, PATTERNS, pattern_mask
from models.context import ForwardContext, LayerInfo

SMALL = dict(
    n_layers=2,
    d_model=32,
    n_heads=4,
    window=8,
    stride=8,
    block_size=8,
    n_global=2,
    n_random=1,
    max_len=128,
    segment_len=16,
    mem_len=16,
    cmem_len=8,
    n_memory=2,
    chunk_size=8,
    n_features=16,
    proj_len=16,
    n_landmarks=8,
    max_span=16,
    span_ramp=4,
    knn_size=64,
    knn_k=4,
)
L = 40


def _configs(category):
    for key in choices()[category]:
        for causal in (True, False):
            yield pytest.param(key, causal, id=f"{key}-{'causal' if causal else 'bidir'}")


def _build(**kw):
    cfg = ModelConfig(**{**SMALL, **kw})
    try:
        cfg.validate()
    except ConfigError as e:
        pytest.skip(f"invalid combination (rejected with a reason): {e}")
    return cfg, build_model(cfg)


def _tokens(B=2, n=L, seed=0):
    return torch.randint(0, 256, (B, n), generator=torch.Generator().manual_seed(seed))


def _forward_backward(model, tokens):
    out = model(tokens)
    assert out.logits.shape == (*tokens.shape, model.cfg.vocab_size)
    loss = out.logits.float().pow(2).mean() + out.aux_loss
    loss.backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert grads, "no parameter received a gradient"
    assert all(torch.isfinite(g).all() for g in grads)
    assert torch.isfinite(out.logits).all()


CATEGORIES = ["attention", "position", "norm_placement", "norm", "ffn", "memory", "layer"]
EVERY_KEY = [
    pytest.param(cat, key, causal, id=f"{cat}-{key}-{'causal' if causal else 'bidir'}")
    for cat in CATEGORIES
    for key in choices()[cat]
    for causal in (True, False)
]


@pytest.mark.parametrize("category,key,causal", EVERY_KEY)
def test_every_registry_key_runs_forward_and_backward(category, key, causal):
    cfg, model = _build(**{category: key, "causal": causal})  # an invalid pair is skipped with its reason
    _forward_backward(model, _tokens())


@pytest.mark.parametrize("category,key", [pytest.param(c, k, id=f"{c}-{k}") for c in CATEGORIES for k in choices()[c]])
def test_every_registry_key_is_valid_in_some_causal_setting(category, key):
    """So the skips above can never hide a key that no configuration accepts."""
    ok = []
    positions = choices()["position"] if category == "attention" else [SMALL.get("position", "rope")]
    for causal in (True, False):
        for position in positions:
            try:
                ModelConfig(**{**SMALL, "position": position, category: key, "causal": causal}).validate()
                ok.append(causal)
            except ConfigError:
                pass
    assert ok, f"{category}={key!r} is rejected with causal=True and causal=False at the test sizes"


@pytest.mark.parametrize("key", choices()["attention"])
def test_causal_models_leak_nothing(key):
    cfg, model = _build(attention=key, causal=True, position="rope")
    model.eval()
    t = _tokens(1)
    base = model(t).logits
    for pos in (5, 17, L - 1):
        t2 = t.clone()
        t2[0, pos] = (t2[0, pos] + 1) % 256
        out = model(t2).logits
        torch.testing.assert_close(out[:, :pos], base[:, :pos], rtol=0, atol=1e-5)
        assert not torch.allclose(out[:, pos:], base[:, pos:])


# Mechanisms whose forward without weights runs a different code path (block-sparse kernels over a
# layout) from the one with weights (the dense masked reference): the section-1 patterns and the
# adaptive span's windowed layout. The other section-2 mechanisms compute the weights on the same
# path, so comparing the two would compare the code with itself; they are checked against
# independent formulas in attention/test_mechanisms.py.
TWO_PATHS = list(PATTERNS) + ["adaptive_span"]


@pytest.mark.parametrize("key,causal", [p for p in _configs("attention") if p.values[0] in TWO_PATHS])
@pytest.mark.parametrize("position", ["rope", "alibi", "t5", "shaw"])
def test_sparse_path_equals_dense_reference(key, causal, position):
    """Block-sparse forward (no weights requested) == dense masked reference (weights requested)."""
    cfg, model = _build(attention=key, causal=causal, position=position)
    model.eval()
    t = _tokens(2, 70)
    fast = model(t).logits
    ref = model(t, return_attention=True).logits
    torch.testing.assert_close(fast, ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("key,causal", list(_configs("attention")))
def test_effective_attention_rows_sum_to_one_and_zero_outside_pattern(key, causal):
    cfg, model = _build(attention=key, causal=causal, position="sinusoidal")
    out = model(_tokens(1), return_attention=True)
    assert len(out.attentions) == cfg.n_layers
    normalised = ATTENTION[key].caps.rows_sum_to_one
    for a in out.attentions:
        assert a.shape == (1, cfg.n_heads, L, L)
        if normalised:
            torch.testing.assert_close(a.sum(-1), torch.ones(1, cfg.n_heads, L))
        else:  # declared by the record (False, differential: 1 - lambda, one sum per head, the same for every row;
            # None, a recurrent mixer's implicit map: lower triangular, rows of any sum)
            rows = a.sum(-1)
            assert not torch.allclose(rows, torch.ones_like(rows))
            if normalised is False:
                torch.testing.assert_close(rows, rows[..., :1].expand_as(rows))
            else:  # None: no fixed sum
                assert causal and (a.triu(1) == 0).all() and (a.tril() != 0).any()
        if key in {
            "full",
            "sliding_window",
            "dilated_window",
            "strided",
            "fixed",
            "block_local",
            "chunked",
            "longformer",
            "bigbird",
        }:
            assert (a[..., ~pattern_mask(cfg, L)] == 0).all()


@pytest.mark.parametrize("n_kv", [1, 2])
def test_gqa_with_repeated_heads_equals_mha(n_kv):
    """A GQA model whose K/V heads are copied into an MHA model gives the same logits."""
    cfg, gqa = _build(n_kv_heads=n_kv, attention="sliding_window")
    cfg_mha, mha = _build(n_kv_heads=None, attention="sliding_window")
    mha.load_state_dict(
        {k: v for k, v in gqa.state_dict().items() if "k_proj" not in k and "v_proj" not in k}, strict=False
    )
    rep = cfg.n_heads // n_kv
    for bg, bm in zip(gqa.stack.blocks, mha.stack.blocks):
        for name in ("k_proj", "v_proj"):
            w = getattr(bg.attn, name).weight.view(n_kv, cfg.d_head, cfg.d_model)
            getattr(bm.attn, name).weight.data.copy_(w.repeat_interleave(rep, 0).reshape(-1, cfg.d_model))
    t = _tokens()
    torch.testing.assert_close(gqa(t).logits, mha(t).logits, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("n_kv", [None, 4, 2, 1])
@pytest.mark.parametrize("attention", ["full", "sliding_window"])
def test_attention_sublayer_equals_a_per_head_softmax_loop(n_kv, attention):
    """MHA (n_kv = h, or None), GQA and MQA against a plain loop over heads: query head n reads K/V
    head n // (h / h_kv) of the same projections (docs/catalogue.md section 3)."""
    cfg, model = _build(n_kv_heads=n_kv, attention=attention, position="none", causal=True, window=5)
    attn = model.stack.blocks[0].attn
    B, T, d, h, dh = 2, 20, cfg.d_model, cfg.n_heads, cfg.d_head
    hkv = n_kv or h
    x = torch.randn(B, T, d, generator=torch.Generator().manual_seed(1))
    ctx = ForwardContext(tokens=torch.zeros(B, T, dtype=torch.long), position=model.position)
    got = attn(x, ctx, LayerInfo(index=0))
    wq = attn.q_proj.weight.view(h, dh, d)
    wk, wv = attn.k_proj.weight.view(hkv, dh, d), attn.v_proj.weight.view(hkv, dh, d)
    i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]
    allowed = (j <= i) & ((i - j < cfg.window) if attention == "sliding_window" else True)
    heads = []
    for n in range(h):
        g = n // (h // hkv)
        q, k, v = x @ wq[n].T, x @ wk[g].T, x @ wv[g].T  # (B, T, d_h)
        s = (q @ k.transpose(1, 2) / math.sqrt(dh)).masked_fill(~allowed, -math.inf)
        heads.append(torch.softmax(s, -1) @ v)
    want = torch.cat(heads, -1) @ attn.out_proj.weight.T  # (B, T, d)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_rezero_at_init_is_identity_on_the_residual_stream():
    cfg, model = _build(norm_placement="rezero")
    out = model(_tokens())
    for h in out.hidden_states[1:]:
        torch.testing.assert_close(h, out.hidden_states[0])


def test_build_is_seeded_and_leaves_global_rng_alone():
    torch.manual_seed(123)
    before = torch.rand(1)
    torch.manual_seed(123)
    a = build_model(ModelConfig(**SMALL, seed=5))
    after = torch.rand(1)
    assert torch.equal(before, after)
    b = build_model(ModelConfig(**SMALL, seed=5))
    c = build_model(ModelConfig(**SMALL, seed=6))
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    assert not all(torch.equal(p, q) for p, q in zip(a.parameters(), c.parameters()))


@pytest.mark.parametrize(
    "bad",
    [
        torch.tensor([[0, 256]]),
        torch.tensor([[-1, 3]]),
        torch.zeros(3, dtype=torch.long),
        torch.zeros(1, 4),
        torch.zeros(1, 0, dtype=torch.long),
    ],
)
def test_bad_tokens_raise_config_error(bad):
    model = build_model(ModelConfig(**SMALL))
    with pytest.raises(ConfigError) as e:
        model(bad)
    assert "tokens" in str(e.value)


def test_learned_positions_beyond_max_len_is_a_clear_error():
    model = build_model(ModelConfig(**{**SMALL, "position": "learned", "max_len": 16}))
    model(_tokens(1, 16))
    with pytest.raises(ConfigError) as e:
        model(_tokens(1, 17))
    assert "max_len" in str(e.value) and "17" in str(e.value)


def test_concurrent_builds_give_the_same_weights():
    """Builds on several threads (a served app) must not interleave their seeded draws."""
    from concurrent.futures import ThreadPoolExecutor

    cfgs = [ModelConfig(**SMALL, seed=s % 2, ffn="moe" if s % 3 else "gelu") for s in range(12)]
    with ThreadPoolExecutor(4) as pool:
        models = list(pool.map(build_model, cfgs))
    for cfg, model in zip(cfgs, models):
        alone = build_model(cfg)
        assert all(torch.equal(p, q) for p, q in zip(model.parameters(), alone.parameters()))
