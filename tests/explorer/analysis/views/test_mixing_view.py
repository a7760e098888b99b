"""The ``talking_heads`` and ``residual`` views: the head-mixing matrices are the ones the forward
applied; RealFormer's prior share is recomputed from the recorded q, k; predictive attention's alpha
is sigmoid of its parameter."""

import numpy as np
import pytest
import torch
from view_runs import TEXT, TINY, app_run

from explorer.analysis.views import compute_views
from explorer.figures import views as pv
from explorer.figures.views import views_reading
from models import ModelConfig, build_model

IDS = list(TEXT.encode())
L = len(IDS)


def test_talking_heads_view_is_the_mixing_the_forward_applied():
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
    views, out, _ = app_run(cfg)
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
    views, out, _ = app_run(cfg)
    v = views.items["residual"]
    assert np.isnan(v.alpha[0]) and np.allclose(v.alpha[1:], 0.5)  # sigmoid(0) at initialisation
    assert np.allclose(v.share[0], 0) and ((v.share[1:] > 0) & (v.share[1:] < 1)).all()
    fig = pv.view_figures(views)["residual"]
    assert len(fig.data) == cfg.n_heads + 1 and fig.data[-1].y[1] == pytest.approx(0.5)
    assert "predictive_attention" in views_reading(views)
