"""The ``probsparse`` view: the active queries number u (causal: at least u, the running top-u) and are
exactly the rows that are not the uniform mean of V; its figure and reading carry the numbers."""

import numpy as np
import pytest
from view_runs import TEXT, TINY, app_run

from explorer.analysis import attention_maps
from explorer.figures import views as pv
from explorer.figures.views import views_reading
from models import ModelConfig

L = len(TEXT.encode())


@pytest.mark.parametrize("causal", [False, True])
def test_probsparse_active_queries_are_the_non_uniform_rows(causal):
    cfg = ModelConfig(attention="probsparse", probsparse_factor=1, causal=causal, position="rope", **TINY)
    views, out, _ = app_run(cfg)
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


def test_probsparse_figure_and_reading_carry_the_numbers():
    cfg = ModelConfig(attention="probsparse", causal=False, position="rope", **TINY)
    views = attention_maps(cfg, TEXT).views
    fig = pv.view_figures(views)["probsparse"]
    v = views.items["probsparse"]
    assert np.array_equal(np.asarray(fig.data[0].z), v.active.reshape(-1, L).astype(int))
    assert f"u = {v.u} of {L}" in fig.layout.title.text
    assert "probsparse" in views_reading(views)
