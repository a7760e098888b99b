"""explorer.analysis.experiments against independent references: autograd on the same model and batch,
the entropy / distance formulas on the model's own attention, the FLOP count of the linear
layers, and the sweep's records for impossible, invalid and over-budget lengths."""

import math

import numpy as np
import pytest
import torch

from explorer.analysis import (
    CACHE,
    attention_maps,
    clear_caches,
    gradient_norms,
    input_batch,
    kv_cache_bytes,
    model_summary,
    next_token_loss,
)
from explorer.runtime.configs import as_config
from explorer.runtime.tokens import token_label
from models import ConfigError, ModelConfig, build_model, choices, registries

SMALL = dict(n_layers=3, d_model=32, n_heads=2)
TEXT = "Attention is all you need."


def _valid(cfg: ModelConfig):
    """``cfg``, else ``cfg`` bidirectional, else None (a mechanism's own constraints)."""
    for c in (cfg, cfg.replace(causal=False)):
        try:
            return c.validate()
        except ConfigError:
            continue
    return None


@pytest.mark.parametrize("attention", choices()["attention"])
def test_attention_maps_match_the_model(attention):
    cfg = _valid(ModelConfig(attention=attention, **SMALL))
    if cfg is None:
        pytest.skip(f"{attention}: no valid small config")
    maps = attention_maps(cfg, TEXT)
    ids = list(TEXT.encode())
    out = build_model(cfg).eval()(torch.tensor([ids]), return_attention=True)
    ref = np.stack([a[0].detach().numpy() for a in out.attentions])  # (layers, h, L, Lk)
    np.testing.assert_allclose(maps.attention, ref, atol=1e-6)
    assert maps.tokens == [token_label(b) for b in ids]
    # entropy and mean distance from their definitions
    p = ref.astype(np.float64)
    ent = -(np.where(p > 0, p * np.log(np.where(p > 0, p, 1)), 0)).sum(-1).mean(-1)
    L, lk = p.shape[2], p.shape[3]
    i = np.arange(L)[:, None] + lk - L
    dist = (p * np.abs(i - np.arange(lk))).sum(-1).mean(-1)
    if registries()["attention"][attention].caps.rows_sum_to_one is None:  # a recurrent mixer's implicit map:
        assert np.isnan(maps.entropy).all()  # signed weights of no fixed sum have no entropy
    else:
        np.testing.assert_allclose(maps.entropy, ent, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(maps.distance, dist, rtol=1e-4, atol=1e-4)
    assert maps.allowed_fraction == pytest.approx(maps.mask.mean())
    # nothing outside the mask gets probability
    assert np.all(np.nan_to_num(maps.attention)[:, :, ~maps.mask] == 0)
    s = maps.summary()
    assert s["row_sums_ok"] and s["n_tokens"] == len(ids) and len(s["entropy"]) == maps.attention.shape[0]


def test_pattern_mask_is_the_catalogue_rule():
    cfg = ModelConfig(attention="sliding_window", window=3, **SMALL)
    maps = attention_maps(cfg, "abcdefghij")
    i, j = np.arange(10)[:, None], np.arange(10)[None, :]
    np.testing.assert_array_equal(maps.mask, (np.abs(i - j) < 3) & (j <= i))
    assert maps.mask_kind == "pattern"
    assert maps.allowed_fraction == pytest.approx(((np.abs(i - j) < 3) & (j <= i)).mean())


def test_text_is_capped_and_empty_text_rejected():
    maps = attention_maps(ModelConfig(**SMALL), "é" * 200)  # 400 bytes
    assert len(maps.tokens) == 256 and maps.truncated
    with pytest.raises(ConfigError):
        attention_maps(ModelConfig(**SMALL), "")


def test_learned_positions_past_max_len_raise_config_error():
    with pytest.raises(ConfigError, match="max_len"):
        attention_maps(ModelConfig(position="learned", max_len=8, **SMALL), "0123456789")


def _reference_norms(cfg, seq_len=16, batch=2, seed=0):
    model = build_model(cfg).train()
    (tokens,) = input_batch(cfg, seq_len, batch, seed)
    out = model(tokens)
    for h in out.hidden_states:
        h.retain_grad()
    next_token_loss(out.logits, tokens).backward()
    blocks = model.stack.blocks
    attn = [b.attn.out_proj.weight.grad.norm().item() for b in blocks]
    ffn = (
        []
        if blocks[0].ffn is None
        else [math.sqrt(sum(p.grad.double().pow(2).sum().item() for p in b.ffn.output_parameters())) for b in blocks]
    )
    res = [h.grad.norm().item() for h in out.hidden_states]
    return attn, ffn, res


@pytest.mark.parametrize("placement", choices()["norm_placement"])
@pytest.mark.parametrize("ffn", ["gelu", "swiglu", "none"])
def test_gradient_norms_equal_direct_autograd(placement, ffn):
    cfg = ModelConfig(norm_placement=placement, ffn=ffn, **SMALL)
    got = gradient_norms(cfg, seq_len=16, batch=2)
    attn, ffn_ref, res = _reference_norms(cfg)
    assert got["layer"] == list(range(cfg.n_layers))
    np.testing.assert_allclose(got["attn_out"], attn, rtol=1e-5, atol=1e-12)
    np.testing.assert_allclose(got["ffn_out"], ffn_ref, rtol=1e-5, atol=1e-12)
    np.testing.assert_allclose(got["residual"], res, rtol=1e-5)
    assert (got["ffn_out"] == []) == (ffn == "none")


def test_rezero_branches_get_exactly_zero_gradient():
    got = gradient_norms(ModelConfig(norm_placement="rezero", **SMALL), seq_len=16, batch=2)
    assert got["attn_out"] == [0.0] * 3 and got["ffn_out"] == [0.0] * 3
    assert all(r > 0 for r in got["residual"])


def test_gradient_norms_are_seeded_and_cached_results_are_copies():
    cfg = ModelConfig(**SMALL)
    a = gradient_norms(cfg, seq_len=16, batch=2, seed=1)
    a["attn_out"].clear()
    b = gradient_norms(cfg, seq_len=16, batch=2, seed=1)
    assert len(b["attn_out"]) == 3
    assert b != gradient_norms(cfg, seq_len=16, batch=2, seed=2)


@pytest.mark.parametrize("layer", choices()["layer"])
def test_gradient_norms_run_for_every_layer_structure(layer):
    cfg = _valid(ModelConfig(layer=layer, **SMALL))
    if cfg is None:
        pytest.skip(f"{layer}: no valid small config")
    got = gradient_norms(cfg, seq_len=16, batch=2)
    for key in ("attn_out", "ffn_out", "residual"):
        assert all(v is None or (math.isfinite(v) and v >= 0) for v in got[key])
    assert len(got["residual"]) >= 1 and len(got["attn_out"]) >= 1


def test_model_summary_counts_parameters_and_flops():
    cfg = ModelConfig(**SMALL)  # full causal attention through SDPA
    s = model_summary(cfg, seq_len=24)
    model = build_model(cfg)
    assert s["parameters"] == sum(p.numel() for p in model.parameters())
    linear = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))
    attn = cfg.n_layers * 4 * cfg.n_heads * 24 * 24 * cfg.d_head / 2  # FlashAttention convention, causal
    assert s["flops_per_token"] == pytest.approx(2 * linear + attn / 24)
    assert [c["category"] for c in s["components"]] == list(registries())


def test_kv_cache_bytes_formula():
    kv = kv_cache_bytes(ModelConfig(n_heads=4, n_kv_heads=2, d_model=64, n_layers=3), [10, 20])
    assert kv["current"] == [2 * 3 * 2 * 16 * n * 2 for n in (10, 20)]
    assert kv["mha"] == [2 * x for x in kv["current"]] and kv["mqa"] == [x // 2 for x in kv["current"]]


def test_as_config_accepts_json_and_rejects_garbage():
    assert as_config('{"attention": "strided"}').attention == "strided"
    with pytest.raises(ConfigError):
        as_config("{not json")
    with pytest.raises(ConfigError):
        as_config([1, 2])


def test_results_are_memoised_within_the_byte_bound_and_requests_checked_against_the_budget(monkeypatch):
    from explorer.runtime import budget, settings
    from explorer.runtime.cache import nbytes

    clear_caches()
    cfg = ModelConfig(**SMALL)
    first = attention_maps(cfg, TEXT)
    assert attention_maps(cfg, TEXT) is first  # the second redraw costs nothing
    assert 0 < CACHE.bytes <= CACHE.max_bytes
    assert CACHE.bytes >= nbytes(first.attention)  # the maps and the model are what it holds
    need = budget.predict(cfg, "attention", len(TEXT.encode()), 1)
    monkeypatch.setenv(settings.REQUEST_BUDGET, str(need - 1))
    with pytest.raises(ConfigError, match="budget"):  # checked before the cache: refused even if cached
        attention_maps(cfg, TEXT)
    clear_caches()
    assert len(CACHE) == 0 and CACHE.bytes == 0
