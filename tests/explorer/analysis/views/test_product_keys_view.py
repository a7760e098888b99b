"""The ``pkm`` view: every read of the product-key memory is counted (macaron's two FFN calls add
up), and the counts equal a brute-force top-k over all ``pkm_subkeys^2`` product keys."""

import numpy as np
import pytest
import torch
from view_runs import TEXT, TINY, app_run

from explorer.figures import views as pv
from explorer.figures.views import views_reading
from models import ModelConfig, build_model

IDS = list(TEXT.encode())
L = len(IDS)


@pytest.mark.parametrize("layer", ["standard", "macaron"])  # macaron: two FFN calls per layer, counts add up
def test_pkm_usage_counts_every_read(layer):
    cfg = ModelConfig(ffn="pkm", layer=layer, pkm_subkeys=8, pkm_topk=3, pkm_heads=2, **TINY)
    views = app_run(cfg)[0]
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
