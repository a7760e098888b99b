"""The analyses that split heads or rebuild queries and keys, on a model whose head width is not
``d_model / n_heads`` (``head_dim=12`` at ``d_model=32``, 4 heads): head circuits from the formula, cached and
replaced head results, the KV-cache bytes, K/V-head surgery and the attention maps' q, k."""

import math

import pytest
import torch

from explorer.analysis.cost.summary import kv_cache_bytes
from explorer.analysis.why.circuits import _ov_qk, composition, head_circuits
from kernels import pool_probs
from models import ModelConfig, build_model
from models.interventions import Interventions
from models.long_context import pooled_maps
from models.surgery import transplant

DH = 12
CFG = dict(vocab_size=40, d_model=32, n_heads=4, n_kv_heads=2, head_dim=DH, n_layers=2, norm="rmsnorm")


def _model(**kw):
    cfg = ModelConfig(**{**CFG, **kw}).validate()
    model = build_model(cfg).eval()
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(1 + 0.5 * torch.randn(p.shape, generator=g))
    return cfg, model


@pytest.mark.parametrize("qk_norm", ["none", "head"])
@torch.no_grad()
def test_head_circuits_use_the_head_width(qk_norm):
    cfg, model = _model(qk_norm=qk_norm)
    c = head_circuits(model, tokens=tuple(range(40)))
    blk = model.stack.blocks[1]
    a = blk.attn
    u = blk.res_attn.norm(model.embed.weight).double()  # (V, d)
    q, k = u @ a.q_proj.weight.double().T, u @ a.k_proj.weight.double().T  # (V, 48), (V, 24)
    h = 3  # reads K/V head 1
    qh, kh = q[:, h * DH : (h + 1) * DH], k[:, DH : 2 * DH]
    if qk_norm == "head":
        rms = lambda t, g: t / torch.sqrt((t * t).mean(-1, keepdim=True) + cfg.norm_eps) * g  # noqa: E731
        qh, kh = rms(qh, a.q_norm.weight.double()), rms(kh, a.k_norm.weight.double())
    torch.testing.assert_close(c.qk[1, h], qh @ kh.T / math.sqrt(DH))
    wv = a.v_proj.weight.double()[DH : 2 * DH]  # (d_h, d)
    wo = a.out_proj.weight.double()[:, h * DH : (h + 1) * DH]  # (d, d_h)
    fold = torch.diag(blk.res_attn.norm.weight.double())
    torch.testing.assert_close(_ov_qk(model, 1, h)[0], wo @ wv @ fold)
    comp = composition(model, 0, 1, "K", draws=3)
    assert torch.isfinite(torch.as_tensor(comp.scores)).all()


@torch.no_grad()
def test_cached_head_results_rebuild_the_sublayer_and_zeroing_one_head_removes_its_output():
    cfg, model = _model()
    ids = torch.randint(0, 40, (2, 9), generator=torch.Generator().manual_seed(1))
    out = model(ids, interventions=Interventions(cache=True))
    info = out.layers[0]
    assert info.head_results.shape == (2, 4, 9, DH)
    assert info.head_outputs.shape == (2, 4, 9, 32)
    wo = model.stack.blocks[0].attn.out_proj.weight  # (d, h * d_h)
    for h in range(4):  # z_h W_O^h from the formula
        want = info.head_results[:, h] @ wo[:, h * DH : (h + 1) * DH].T
        torch.testing.assert_close(info.head_outputs[:, h], want)
    zeroed = model(ids, interventions=Interventions(replace_heads={(0, 2): "zero"}, cache=True)).layers[0]
    assert (zeroed.head_results[:, 2] == 0).all()
    torch.testing.assert_close(zeroed.head_results[:, 1], info.head_results[:, 1])


def test_kv_cache_bytes_count_the_head_width():
    cfg = ModelConfig(**CFG).validate()
    got = kv_cache_bytes(cfg, [100])
    per_key = 2 * 2 * DH * 2  # K and V, 2 K/V heads of 12, 2 bytes
    assert got["values_per_token_layer"] == 2 * 2 * DH
    assert got["current"] == [per_key * 100 * cfg.n_layers]
    assert got["mha"] == [2 * per_key * 100 * cfg.n_layers] and got["mqa"] == [per_key // 2 * 100 * cfg.n_layers]


@torch.no_grad()
def test_merging_kv_heads_averages_heads_of_the_head_width():
    a, model = _model()
    b = a.replace(n_kv_heads=1).validate()
    merged = transplant({k: v.clone() for k, v in model.state_dict().items()}, a, b)
    w = model.stack.blocks[0].attn.k_proj.weight  # (2 * 12, 32)
    want = (w[:DH] + w[DH:]) / 2
    torch.testing.assert_close(merged.stack.blocks[0].attn.k_proj.weight, want)


@torch.no_grad()
def test_returned_queries_and_keys_have_the_head_width():
    cfg, model = _model()
    ids = torch.randint(0, 40, (1, 7), generator=torch.Generator().manual_seed(2))
    out = model(ids, return_attention=True)
    info = out.layers[0]
    assert info.q.shape == (1, 4, 7, DH) and info.k.shape[-1] == DH
    assert torch.allclose(info.attention.sum(-1), torch.ones(1, 4, 7))


@pytest.mark.parametrize("attention", ["full", "sliding_window"])
def test_long_context_pooled_maps_equal_the_dense_maps_pooled(attention):
    """``models.long_context.pooled_maps`` rebuilds each core's scores from its q, k: with heads of 12 they equal
    the model's own dense maps pooled the same way (``kernels.pool_probs``)."""
    cfg = ModelConfig(**{**CFG, "vocab_size": 256, "max_len": 256, "attention": attention, "window": 16}).validate()
    model = build_model(cfg).eval().double()
    tokens = torch.randint(0, 256, (1, 150), generator=torch.Generator().manual_seed(0))
    res = pooled_maps(model, tokens, sink_k=3, window=9)
    with torch.no_grad():
        out = model(tokens, return_attention=True)
    for pm, probs in zip(res.maps, out.attentions):
        ref = pool_probs(probs.double(), pm.block_q, pm.block_k, sink_k=3, window=9)
        for name in ("mass", "entropy", "distance", "sink", "local"):
            torch.testing.assert_close(getattr(pm, name).double(), getattr(ref, name), atol=1e-9, rtol=1e-9)
