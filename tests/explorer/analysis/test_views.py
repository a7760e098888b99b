"""Variant views against the model output they come from, recomputed independently here: exact
softmax from the layer's own projections, bucket / cluster / span / expert / reach / depth entries,
and the figures carry the numbers. Plus the memory-aware residual gradient norms."""
import dataclasses
import json
import math
import subprocess
import sys

import numpy as np
import pytest
import torch

from explorer.analysis import experiments as ex
from explorer.analysis.views import GROUP_KEYS, VIEWS
from explorer.figures import views as pv
from models import ModelConfig, build_model
from models.context import ExpertStats, LayerInfo

TINY = dict(n_layers=2, d_model=16, n_heads=2)
TEXT = "hello world, it's me"
IDS = list(TEXT.encode())
L = len(IDS)


def _run(cfg):
    """The view result and an independent forward pass of the same model on the same bytes."""
    maps = ex.attention_maps(cfg, TEXT)
    model = build_model(cfg).eval()
    with torch.no_grad():
        out = model(torch.tensor([IDS]), return_attention=True)
    return maps.views, out, model


@torch.no_grad()
def _exact_from_projections(model, out, layer, causal):
    """softmax(q k^T / sqrt(d_h)) with q, k from the layer's own projections (no position, no norm)."""
    cfg = model.cfg
    attn = model.stack.blocks[layer].attn
    x = out.layers[layer].input
    h, hkv, dh = cfg.n_heads, cfg.kv_heads, cfg.d_head
    q = attn.q_proj(x).view(1, L, h, dh).transpose(1, 2)
    k = attn.k_proj(x).view(1, L, hkv, dh).transpose(1, 2).repeat_interleave(h // hkv, dim=1)
    s = q @ k.transpose(-1, -2) / math.sqrt(dh)
    if causal:
        s = s.masked_fill(~torch.ones(L, L, dtype=torch.bool).tril(), float("-inf"))
    return torch.softmax(s, -1)[0].numpy()


@pytest.mark.parametrize("attention,extra", [
    ("linear", dict(causal=True, position="none")),
    ("nystrom", dict(causal=False, n_landmarks=4, n_kv_heads=1, position="sinusoidal")),  # added to the input
])
def test_approximation_error_is_effective_minus_exact_softmax(attention, extra):
    cfg = ModelConfig(attention=attention, norm_placement="none", **TINY, **extra)
    views, out, model = _run(cfg)
    a = views.items["approximation"]
    allowed = np.tril(np.ones((L, L), bool)) if cfg.causal else np.ones((L, L), bool)
    for i in range(cfg.n_layers):
        exact = _exact_from_projections(model, out, i, cfg.causal)
        eff = out.attentions[i][0].numpy()
        err = np.abs(eff - exact)
        np.testing.assert_allclose(a.exact[i], exact, atol=2e-6)
        np.testing.assert_allclose(a.effective[i], eff, atol=1e-7)
        np.testing.assert_allclose(a.error[i], err, atol=2e-6)
        np.testing.assert_allclose(a.max_error[i], err.max(axis=(1, 2)), atol=2e-6)
        np.testing.assert_allclose(a.mean_error[i], err[:, allowed].mean(-1), atol=1e-6)
    assert a.max_error.max() > 1e-3  # an approximation, not exact softmax


def test_lsh_reference_is_shared_qk_softmax_without_self():
    cfg = ModelConfig(attention="lsh", position="none", norm_placement="none", n_buckets=4, chunk_size=4, **TINY)
    views, out, model = _run(cfg)
    a = views.items["approximation"]
    x = out.layers[0].input
    with torch.no_grad():
        q = model.stack.blocks[0].attn.q_proj(x).view(1, L, 2, 8).transpose(1, 2)[0]  # (h, L, d_h)
    kn = q / q.norm(dim=-1, keepdim=True)
    s = (q @ kn.transpose(-1, -2) / math.sqrt(8)).masked_fill(~torch.ones(L, L, dtype=torch.bool).tril(-1), float("-inf"))
    s[:, 0, 0] = 0.0  # the first query has no other key: it attends itself
    np.testing.assert_allclose(a.exact[0], torch.softmax(s, -1).numpy(), atol=2e-6)
    np.testing.assert_array_equal(views.items["groups"].labels[0], out.layers[0].buckets[0].numpy())
    assert views.items["groups"].n_groups == 4


def test_routing_clusters_and_adaptive_span_come_from_the_layers():
    views, out, _ = _run(ModelConfig(attention="routing", n_clusters=3, **TINY))
    g = views.items["groups"]
    assert g.what == "routing cluster" and g.n_groups == 3
    for i in range(2):
        np.testing.assert_array_equal(g.labels[i], out.layers[i].clusters[0].numpy())
    views, out, _ = _run(ModelConfig(attention="adaptive_span", max_span=8, span_ramp=4, **TINY))
    s = views.items["span"]
    np.testing.assert_allclose(s.span, np.stack([i.span.numpy() for i in out.layers]))
    assert s.max_span == 8 and set(views.items) == {"approximation", "span"}


@pytest.mark.parametrize("ffn,top_k", [("moe", 2), ("switch", 1), ("hash", 1)])
def test_expert_histogram_sums_to_tokens_times_top_k(ffn, top_k):
    cfg = ModelConfig(ffn=ffn, n_experts=3, top_k=2, capacity_factor=1.0, **TINY)
    views, out, model = _run(cfg)
    e = views.items["experts"]
    assert e.counts.shape == (2, 3) and (e.counts.sum(axis=1) == L * top_k).all() and e.top_k == top_k
    for i, info in enumerate(out.layers):
        np.testing.assert_array_equal(e.counts[i], info.experts.expert_counts.numpy())
        assert e.dropped[i] == info.experts.dropped
        np.testing.assert_array_equal(e.assignment[i], info.experts.assignment[0].numpy())
    if ffn == "hash":  # a pure function of the token id
        table = model.stack.blocks[0].ffn.table
        np.testing.assert_array_equal(e.assignment[0], table[torch.tensor(IDS)].numpy())
        assert (e.dropped == 0).all() and e.capacity == [None, None]
    else:  # nothing kept beyond capacity: kept = assigned - dropped <= E * capacity
        assert (e.counts.sum(1) - e.dropped <= 3 * np.array(e.capacity)).all()


def test_memory_view_lengths_and_reach():
    cfg = ModelConfig(memory="xl", segment_len=8, mem_len=6, **TINY)  # full causal attention, rope
    views, out, _ = _run(cfg)
    m = views.items["memory"]
    assert m.segments == [(0, 8), (8, 8), (16, 4)]
    np.testing.assert_array_equal(m.memory_len, [[0, 6, 6]] * 2)
    pos = np.arange(L)
    start = pos // 8 * 8
    np.testing.assert_array_equal(m.local, pos - start)  # within its segment: back to the segment start
    want = pos - np.maximum(0, np.where(start > 0, start - 6, 0))  # plus the 6 remembered tokens
    np.testing.assert_array_equal(m.reach, np.stack([want, want]))
    np.testing.assert_array_equal(m.reach[0], out.layers[0].reach[0].numpy())


def test_exit_depths_and_act_steps():
    views, out, _ = _run(ModelConfig(layer="early_exit", exit_threshold=0.004, **TINY))
    d = views.items["exit"]
    assert ((d.depth >= 1) & (d.depth <= 2)).all() and d.threshold == 0.004
    np.testing.assert_array_equal(d.depth, out.layers[-1].exit_depth[0].numpy())
    never = ex.attention_maps(ModelConfig(layer="early_exit", exit_threshold=1.0, **TINY), TEXT).views.items["exit"]
    assert (never.depth == 2).all()
    views, out, _ = _run(ModelConfig(layer="universal", act=True, n_layers=3, d_model=16, n_heads=2))
    a = views.items["act"]
    assert ((a.depth >= 1) & (a.depth <= 3)).all()
    np.testing.assert_allclose(a.depth, out.layers[-1].act_steps[0].numpy())


def test_standard_configs_have_no_views_and_summaries_are_json():
    assert ex.attention_maps(ModelConfig(**TINY), TEXT).views.items == {}
    assert ex.attention_maps(ModelConfig(attention="sliding_window", window=4, **TINY), TEXT).summary()["views"] == {}
    s = ex.attention_maps(ModelConfig(attention="lsh", ffn="switch", **TINY), TEXT).summary()
    assert set(s["views"]) == {"approximation", "groups", "experts"} <= set(VIEWS)
    assert json.loads(json.dumps(s, allow_nan=False))["views"]["experts"]["top_k"] == 1


def test_view_figures_carry_the_numbers():
    views = ex.attention_maps(ModelConfig(attention="linear", ffn="moe", n_experts=3, **TINY), TEXT).views
    figs = pv.view_figures(views, layer=1, head=1)
    assert set(figs) == {"approximation", "approximation_table", "experts"}
    a = views.items["approximation"]
    title = figs["approximation"].layout.title.text
    assert "layer 1, head 1" in title and f"{a.max_error[1, 1]:.3f}" in title and f"{a.mean_error[1, 1]:.4f}" in title
    np.testing.assert_allclose(np.nan_to_num(np.asarray(figs["approximation"].data[2].z, float)),
                               np.tril(a.error[1, 1]), atol=1e-6)
    bars = [t for t in figs["experts"].data if t.type == "bar"]
    assert [list(t.y) for t in bars] == views.items["experts"].counts.tolist()
    assert all(f.layout.title.text and f.layout.height >= 300 for f in figs.values())


def test_plots_views_does_not_import_torch():
    code = "import sys, explorer.figures.views; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_residual_gradient_of_a_segmented_memory_is_measured_over_all_segments():
    cfg = ModelConfig(memory="xl", segment_len=6, mem_len=6, **TINY)
    got = ex.gradient_norms(cfg, seq_len=16, batch=2, seed=3)
    assert all(v is not None and v > 0 for v in got["residual"]) and "segments" in " ".join(got["notes"])
    # independent reference: the inputs each block receives, captured by forward pre-hooks
    model = build_model(cfg).train()
    seen = {i: [] for i in range(cfg.n_layers)}
    hooks = [b.register_forward_pre_hook(lambda m, args, i=i: seen[i].append(args[0]))
             for i, b in enumerate(model.stack.blocks)]
    tokens = ex.gradient_batch(cfg, 16, 2, 3)
    loss = ex.next_token_loss(model(tokens).logits, tokens)
    for h in hooks:
        h.remove()
    for i in range(cfg.n_layers):
        assert len(seen[i]) == 3  # segments of 6, 6, 4
        grads = torch.autograd.grad(loss, seen[i], retain_graph=True)
        want = math.sqrt(sum(float((g.double() ** 2).sum()) for g in grads))
        assert got["residual"][i] == pytest.approx(want, rel=1e-6)


def test_reversible_residual_stays_none_with_the_reason():
    got = ex.gradient_norms(ModelConfig(layer="reversible", **TINY), seq_len=8, batch=1)
    assert got["residual"] == [None, None] and "reversible" in got["notes"][0]


def test_every_field_the_views_read_is_a_layer_info_field():
    """The views read typed fields; a renamed or misspelt field fails here instead of hiding a view."""
    fields = {f.name for f in dataclasses.fields(LayerInfo)}
    assert set(GROUP_KEYS) <= fields
    assert {"span", "experts", "memory_len", "reach", "exit_depth", "exit_confidence", "act_steps", "act_halting",
            "attention", "q", "k", "score_mods", "key_ids", "segments", "input"} <= fields
    assert {f.name for f in dataclasses.fields(ExpertStats)} == {"expert_counts", "dropped", "assignment", "capacity"}
    # each view returns None for an output without its statistics, never raises
    empty = [LayerInfo(index=0, input=torch.zeros(1, 3, 16)), LayerInfo(index=1, input=torch.zeros(1, 3, 16))]
    cfg = ModelConfig(**TINY)
    assert all(fn(cfg, empty) is None for fn in VIEWS.values())
