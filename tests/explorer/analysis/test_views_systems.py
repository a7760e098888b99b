"""Sinkhorn and ProbSparse views against independent expectations: the sorting matrix is a (causal:
strictly lower) row-stochastic matrix whose weights are exactly how the effective attention of a query
block splits over the other key blocks; ProbSparse's active queries number u and are exactly the rows
that are not the uniform mean of V. Plus the clustered label and the figures carrying the numbers."""
import numpy as np
import pytest
import torch

from explorer.analysis import experiments as ex
from explorer.app.tabs.views import LABELS, views_reading
from explorer.figures import views as pv
from models import ModelConfig, build_model

TINY = dict(n_layers=2, d_model=16, n_heads=2)
TEXT = "hello world, it's me"  # 20 bytes
IDS = list(TEXT.encode())
L = len(IDS)


def _run(cfg):
    views = ex.attention_maps(cfg, TEXT).views
    with torch.no_grad():
        out = build_model(cfg).eval()(torch.tensor([IDS]), return_attention=True)
    return views, out


@pytest.mark.parametrize("causal", [False, True])
def test_sinkhorn_view_is_the_block_split_of_the_attention(causal):
    b = 4  # 20 = 5 blocks of 4: no padding, every sorted slot mixes full blocks
    cfg = ModelConfig(attention="sinkhorn", block_size=b, sinkhorn_iters=40, causal=causal, position="rope", **TINY)
    views, out = _run(cfg)
    v = views.items["sinkhorn"]
    nb = L // b
    assert v.P.shape == (cfg.n_layers, cfg.n_heads, nb, nb)
    assert (v.P >= 0).all()
    rows = v.P.sum(-1)
    if causal:
        assert np.allclose(np.triu(v.P[..., :, :]), 0)  # strictly earlier blocks only
        assert np.allclose(rows[..., 0], 0) and np.allclose(rows[..., 1:], 1, atol=1e-5)
    else:
        assert np.allclose(rows, 1, atol=1e-5)
        assert np.allclose(v.P.sum(-2), 1, atol=1e-2)  # Sinkhorn balanced the columns too
        assert v.summary()["max_col_sum_error"] < 1e-2
    for i, info in enumerate(out.layers):
        A = info.attention[0].double().numpy()  # (h, L, L)
        mass = A.reshape(cfg.n_heads, L, nb, b).sum(-1)  # (h, L, nb): attention of each query per key block
        for h in range(cfg.n_heads):
            for a in range(1 if causal else 0, nb):
                others = [c for c in range(nb) if c != a]
                P = v.P[i, h, a, others]
                for q in range(a * b, (a + 1) * b):
                    m = mass[h, q, others]
                    # mass on a foreign block c = (sorted-slot mass) * P[a, c]: proportional to row a of P
                    assert np.allclose(m * P.sum(), P * m.sum(), atol=1e-5), (i, h, a, q)


@pytest.mark.parametrize("causal", [False, True])
def test_probsparse_active_queries_are_the_non_uniform_rows(causal):
    cfg = ModelConfig(attention="probsparse", probsparse_factor=1, causal=causal, position="rope", **TINY)
    views, out = _run(cfg)
    v = views.items["probsparse"]
    u = min(L, int(np.ceil(np.log(L))))  # Informer: factor * ceil(ln L)
    assert v.u == u and v.active.shape == (cfg.n_layers, cfg.n_heads, L)
    n = v.active.sum(-1)
    if causal:
        assert (n >= u).all() and v.active[..., :u].all()  # the first u queries always make the running top-u
    else:
        assert (n == u).all()
    allowed = np.tril(np.ones((L, L), bool)) if causal else np.ones((L, L), bool)
    uniform = allowed / allowed.sum(-1, keepdims=True)
    for i, info in enumerate(out.layers):
        A = info.attention[0].double().numpy()  # (h, L, L)
        is_mean = np.isclose(A, uniform[None], atol=1e-6).all(-1)  # (h, L)
        lazy = ~v.active[i]
        assert is_mean[lazy].all()
        # an active row is an ordinary softmax: uniform only if its scores tie, which random weights never do
        # (query 0 under a causal mask has a single key, so its row is [1] either way)
        act = v.active[i].copy()
        if causal:
            act[:, 0] = False
        assert not is_mean[act].any()
    s = v.summary()
    assert s["n_active"] == n.tolist()


def test_clustered_queries_are_labelled_k_means_query_clusters():
    cfg = ModelConfig(attention="clustered", n_clusters=3, causal=False, position="rope", **TINY)
    views, out = _run(cfg)
    g = views.items["groups"]
    assert g.what == "k-means query cluster"
    # clustered attention does not confine a query to its cluster's keys: it takes the centroid's row over all keys
    assert "centroid's attention row over all keys" in views_reading(views)
    assert "attends only keys" not in views_reading(views)
    assert "k-means cluster's attention row" in pv.view_figures(views)["groups"].layout.title.text
    assert np.array_equal(g.labels, np.stack([i.clusters[0].numpy() for i in out.layers]))
    assert "groups" in pv.view_figures(views)


def test_figures_and_reading_carry_the_numbers():
    cfg = ModelConfig(attention="sinkhorn", block_size=4, causal=False, position="rope", **TINY)
    views = ex.attention_maps(cfg, TEXT).views
    fig = pv.view_figures(views)["sinkhorn"]
    assert len(fig.data) == cfg.n_layers * cfg.n_heads
    assert np.allclose(np.asarray(fig.data[3].z), views.items["sinkhorn"].P[1, 1], atol=1e-6)
    assert "Sinkhorn" in fig.layout.title.text and fig.layout.xaxis3.title.text == "key block (sorted in)"
    assert "sinkhorn" in views_reading(views) and set(pv.PLOT_NAMES) <= set(LABELS)

    cfg = ModelConfig(attention="probsparse", causal=False, position="rope", **TINY)
    views = ex.attention_maps(cfg, TEXT).views
    fig = pv.view_figures(views)["probsparse"]
    v = views.items["probsparse"]
    assert np.array_equal(np.asarray(fig.data[0].z), v.active.reshape(-1, L).astype(int))
    assert f"u = {v.u} of {L}" in fig.layout.title.text
    assert "probsparse" in views_reading(views)


def test_talking_heads_view_is_the_mixing_the_forward_applied():
    from explorer.analysis.views import compute_views
    cfg = ModelConfig(attention="talking_heads", causal=True, **TINY)
    model = build_model(cfg).eval()
    gen = torch.Generator().manual_seed(0)
    set_to = []
    with torch.no_grad():
        for blk in model.stack.blocks:
            pre, post = torch.rand(2, 2, generator=gen), torch.rand(2, 2, generator=gen)
            blk.attn.core.mix_logits.copy_(pre)
            blk.attn.core.mix_weights.copy_(post)
            set_to.append((pre.numpy(), post.numpy()))
        out = model(torch.tensor([IDS]), return_attention=True)
    views = compute_views(cfg, out.layers, list(TEXT))
    v = views.items["talking_heads"]
    for i, (pre, post) in enumerate(set_to):
        assert np.allclose(v.pre[i], pre) and np.allclose(v.post[i], post)
        # the effective map is post @ softmax rows: each row sums to that head's row of post
        A = out.layers[i].attention[0].double().numpy()  # (h, L, L)
        assert np.allclose(A.sum(-1), post.sum(-1)[:, None], atol=1e-5)
    fig = pv.view_figures(views)["talking_heads"]
    assert np.allclose(np.asarray(fig.data[3].z), set_to[1][1], atol=1e-6)
    assert "Talking heads" in fig.layout.title.text and "talking heads" in views_reading(views)


def test_realformer_share_is_the_accumulated_scores_part():
    cfg = ModelConfig(attention="realformer", causal=True, n_layers=3, d_model=16, n_heads=2)
    views, out = _run(cfg)
    v = views.items["residual"]
    allowed = torch.ones(L, L, dtype=torch.bool).tril()
    prior = None
    for i, info in enumerate(out.layers):
        own = (info.q @ info.k.transpose(-1, -2)).double()[0] / np.sqrt(cfg.d_head)  # (h, L, L) from recorded q, k
        own = own.masked_fill(~allowed, 0)
        if prior is None:
            expect = np.zeros(cfg.n_heads)
        else:
            a, b = prior.square().sum((-1, -2)).sqrt(), own.square().sum((-1, -2)).sqrt()
            expect = (a / (a + b)).numpy()
        assert np.allclose(v.share[i], expect, atol=1e-4), i
        prior = own if prior is None else prior + own  # S_l = own_l + S_(l-1)
    assert np.isnan(v.alpha).all()
    assert "realformer" in pv.view_figures(views)["residual"].layout.title.text


def test_predictive_alpha_is_sigmoid_of_the_parameter():
    cfg = ModelConfig(attention="predictive_attention", causal=True, **TINY)
    views, out = _run(cfg)
    v = views.items["residual"]
    assert np.isnan(v.alpha[0]) and np.allclose(v.alpha[1:], 0.5)  # sigmoid(0) at initialisation
    assert np.allclose(v.share[0], 0) and ((v.share[1:] > 0) & (v.share[1:] < 1)).all()
    fig = pv.view_figures(views)["residual"]
    assert len(fig.data) == cfg.n_heads + 1 and fig.data[-1].y[1] == pytest.approx(0.5)
    assert "predictive_attention" in views_reading(views)


@pytest.mark.parametrize("layer", ["standard", "macaron"])  # macaron: two FFN calls per layer, counts add up
def test_pkm_usage_counts_every_read(layer):
    cfg = ModelConfig(ffn="pkm", layer=layer, pkm_subkeys=8, pkm_topk=3, pkm_heads=2, **TINY)
    views, _ = _run(cfg)
    v = views.items["pkm"]
    calls = 2 if layer == "macaron" else 1
    assert v.counts.shape == (cfg.n_layers, 64)
    assert (v.counts.sum(-1) == calls * 1 * L * cfg.pkm_topk * cfg.pkm_heads).all()  # B * L * topk * heads
    if layer == "standard":  # brute force: the top-k of all 64 products s1[a] + s2[b] for the FFN's real inputs
        model = build_model(cfg).eval()
        seen = []
        hooks = [blk.ffn.register_forward_hook(lambda m, a, o: seen.append((m, a[0]))) for blk in model.stack.blocks]
        with torch.no_grad():
            model(torch.tensor([IDS]))
            for i, (m, x) in enumerate(seen):
                q = m.query(x).view(L, 2, 2, m.half)  # (L, heads, 2, d/2)
                s1 = torch.einsum("thd,hnd->thn", q[:, :, 0], m.keys1)  # (L, h, 8)
                s2 = torch.einsum("thd,hnd->thn", q[:, :, 1], m.keys2)
                full = (s1[..., :, None] + s2[..., None, :]).flatten(-2)  # (L, h, 64): row a * 8 + b
                idx = full.topk(3, dim=-1).indices
                assert np.array_equal(v.counts[i], torch.bincount(idx.flatten(), minlength=64).numpy()), i
        for h in hooks:
            h.remove()
        assert len(seen) == cfg.n_layers
    fig = pv.view_figures(views)["pkm"]
    assert np.asarray(fig.data[0].y).tolist() == sorted(v.counts[0].tolist(), reverse=True)
    assert "pkm" in views_reading(views)


def test_funnel_lengths_halve_per_block():
    cfg = ModelConfig(layer="funnel", n_layers=6, funnel_blocks=3, d_model=16, n_heads=2)
    views, _ = _run(cfg)
    v = views.items["funnel"]
    per = cfg.n_layers // cfg.funnel_blocks
    q = [-(-L // 2 ** (i // per)) for i in range(cfg.n_layers)]  # ceil(L / 2^block)
    k = [-(-L // 2 ** (i // per - (i % per == 0 and i >= per))) for i in range(cfg.n_layers)]  # pool-query: unpooled keys
    assert v.queries.tolist() == q and v.keys.tolist() == k
    fig = pv.view_figures(views)["funnel"]
    assert list(fig.data[0].y) == q and "funnel" in views_reading(views)
    assert "funnel" not in ex.attention_maps(ModelConfig(**TINY), TEXT).views.items
