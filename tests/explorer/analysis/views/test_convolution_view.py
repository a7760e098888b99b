"""The ``lite`` view: the taps are the softmax of each convolution head's kernel, and the convolution
share is recomputed from an explicit convolution and softmax; the figure carries the taps."""

import math

import numpy as np
import pytest
import torch
from view_runs import REPEATED_TEXT, TINY_ROPE, block_values, model_run, softmax64

from explorer.app.tabs.views import LABELS
from explorer.figures import views as pv
from explorer.figures.views import views_reading
from models import ModelConfig

IDS = list(REPEATED_TEXT.encode())


def _lite_reference(q, k, val, taps, causal):
    """Attention half by plain softmax, convolution half by an explicit tap loop with edge renormalisation."""
    h, Lq, dh = q.shape[1], q.shape[2], q.shape[3]
    a = h // 2
    s = q[:, :a] @ k[:, :a].transpose(-1, -2) / math.sqrt(dh)
    if causal:
        s = s.masked_fill(torch.ones(Lq, Lq, dtype=torch.bool).triu(1), float("-inf"))
    out_a = softmax64(s) @ val[:, :a]
    K = taps.shape[1]
    pad = K - 1 if causal else K // 2
    out_c = torch.zeros_like(val[:, a:])
    for c in range(h - a):
        for t in range(Lq):
            num, den = 0.0, 0.0
            for j in range(K):
                src = t - pad + j
                if 0 <= src < Lq:
                    num = num + taps[c, j] * val[0, a + c, src]
                    den += float(taps[c, j])
            out_c[0, c, t] = num / den
    ea, ec = out_a.pow(2).sum(dim=(1, 3)), out_c.pow(2).sum(dim=(1, 3))
    return (ec / (ea + ec))[0].numpy()


@pytest.mark.parametrize("causal", [True, False])
def test_lite_taps_are_the_kernel_softmax_and_the_share_is_recomputed(causal):
    cfg = ModelConfig(attention="lite", conv_kernel=4, causal=causal, **{**TINY_ROPE, "n_heads": 4})
    views, out, model = model_run(cfg, IDS)
    v = views.items["lite"]
    assert v.taps.shape == (2, 2, 4)
    assert v.offsets == ([-3, -2, -1, 0] if causal else [-2, -1, 0, 1])
    with torch.no_grad():
        for i, (block, info) in enumerate(zip(model.stack.blocks, out.layers)):
            w = block.attn.core.kernel.double()
            taps = torch.exp(w) / torch.exp(w).sum(-1, keepdim=True)
            assert np.allclose(v.taps[i], taps.numpy(), atol=1e-6)
            assert np.allclose(v.taps[i].sum(-1), 1)
            share = _lite_reference(
                info.q.double(), info.k.double(), block_values(block, info, cfg).double(), taps, causal
            )
            assert np.allclose(v.conv_share[i], share, atol=1e-5), i
    assert ((v.conv_share >= 0) & (v.conv_share <= 1)).all()


def test_lite_figure_carries_the_taps():
    views = model_run(ModelConfig(attention="lite", conv_kernel=3, **TINY_ROPE), IDS)[0]
    fig = pv.view_figures(views)["lite"]
    v = views.items["lite"]
    assert fig.layout.title.text and "lite" in pv.PLOT_NAMES and "lite" in LABELS
    assert all(ax.title.text is not None for ax in (fig.layout.xaxis, fig.layout.yaxis))
    assert np.allclose(np.asarray(fig.data[0].z), v.taps.reshape(-1, 3), atol=1e-6)
    assert "**lite**" in views_reading(views)
