"""The ``sinkhorn`` view: the sorting matrix is a (causal: strictly lower) row-stochastic matrix whose
weights are exactly how the effective attention of a query block splits over the other key blocks;
its figure and reading carry the numbers."""

import numpy as np
import pytest
from view_runs import TEXT, TINY, app_run

from explorer.analysis import attention_maps
from explorer.figures import views as pv
from explorer.figures.views import views_reading
from models import ModelConfig

L = len(TEXT.encode())  # 20


@pytest.mark.parametrize("causal", [False, True])
def test_sinkhorn_view_is_the_block_split_of_the_attention(causal):
    b = 4  # 20 = 5 blocks of 4: no padding, every sorted slot mixes full blocks
    cfg = ModelConfig(attention="sinkhorn", block_size=b, sinkhorn_iters=40, causal=causal, position="rope", **TINY)
    views, out, _ = app_run(cfg)
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


def test_sinkhorn_figure_and_reading_carry_the_numbers():
    cfg = ModelConfig(attention="sinkhorn", block_size=4, causal=False, position="rope", **TINY)
    views = attention_maps(cfg, TEXT).views
    fig = pv.view_figures(views)["sinkhorn"]
    assert len(fig.data) == cfg.n_layers * cfg.n_heads
    assert np.allclose(np.asarray(fig.data[3].z), views.items["sinkhorn"].P[1, 1], atol=1e-6)
    assert "Sinkhorn" in fig.layout.title.text and fig.layout.xaxis3.title.text == "key block (sorted in)"
    assert "sinkhorn" in views_reading(views)
