"""The ``induced`` view: ISAB / Luna's two steps recomputed from the layer's weights in plain PyTorch,
their product equal to the reported map; both refuse causal models; the figure carries the product."""

import math

import numpy as np
import pytest
import torch
from view_runs import REPEATED_TEXT, TINY_ROPE, block_values, model_run, softmax64

from explorer.app.tabs.views import LABELS
from explorer.figures import views as pv
from explorer.figures.views import views_reading
from models import ConfigError, ModelConfig, build_model

IDS = list(REPEATED_TEXT.encode())
L = len(IDS)


@pytest.mark.parametrize("mechanism", ["isab", "luna"])
def test_induced_steps_are_the_two_softmaxes_and_multiply_to_the_map(mechanism):
    cfg = ModelConfig(attention=mechanism, causal=False, n_inducing=5, **TINY_ROPE)
    views, out, model = model_run(cfg, IDS)
    v = views.items["induced"]
    h, m, dh = cfg.n_heads, cfg.n_inducing, cfg.d_head
    assert v.pack.shape == (2, h, m, L) and v.unpack.shape == (2, h, L, m)
    scale = 1 / math.sqrt(dh)
    packed = None
    with torch.no_grad():
        for i, (block, info) in enumerate(zip(model.stack.blocks, out.layers)):
            core = block.attn.core
            q, k, val = info.q.double(), info.k.double(), block_values(block, info, cfg).double()
            if mechanism == "isab":
                queries = core.inducing.double()[None]  # (1, h, m, d_h)
            else:
                P = core.initial.double()[None] if packed is None else packed
                queries = (P @ core.pack_query.weight.double().T).view(1, m, h, dh).transpose(1, 2)
            a1 = softmax64(queries @ k.transpose(-1, -2) * scale)  # (1, h, m, L)
            gathered = a1 @ val
            if mechanism == "isab":
                keys = gathered @ core.key_of_h.double()
            else:
                flat = gathered.transpose(1, 2).reshape(1, m, h * dh)
                keys = (flat @ core.unpack_key.weight.double().T).view(1, m, h, dh).transpose(1, 2)
                packed = torch.nn.functional.layer_norm(
                    flat + P, (h * dh,), core.norm.weight.double(), core.norm.bias.double(), core.norm.eps
                )
            a2 = softmax64(q @ keys.transpose(-1, -2) * scale)  # (1, h, L, m)
            assert np.allclose(v.pack[i], a1[0].numpy(), atol=1e-5), i
            assert np.allclose(v.unpack[i], a2[0].numpy(), atol=1e-5), i
            reported = info.attention[0].double().numpy()
            assert np.allclose(np.einsum("hlm,hmk->hlk", a2[0].numpy(), a1[0].numpy()), reported, atol=1e-5)
    assert np.allclose(v.effective.sum(-1), 1, atol=1e-5) and (v.effective >= 0).all()
    s = v.summary()
    assert s["max_product_error"] < 1e-5 and s["max_row_sum_error"] < 1e-5


def test_luna_and_isab_refuse_causal_models():
    """Bidirectional only: every point reads the whole sequence, so a causal model is refused (naming the field)."""
    for mechanism in ("isab", "luna"):
        with pytest.raises(ConfigError, match="causal"):
            build_model(ModelConfig(attention=mechanism, causal=True, **TINY_ROPE))
    # and the map is not causal: the first query puts weight on later keys
    views = model_run(ModelConfig(attention="luna", causal=False, n_inducing=3, **TINY_ROPE), IDS)[0]
    assert (views.items["induced"].effective[:, :, 0, 1:] > 0).all()


def test_induced_figure_carries_the_view():
    views = model_run(ModelConfig(attention="isab", causal=False, n_inducing=4, **TINY_ROPE), IDS)[0]
    fig = pv.view_figures(views)["induced"]
    v = views.items["induced"]
    assert fig.layout.title.text and "induced" in pv.PLOT_NAMES and "induced" in LABELS
    assert all(ax.title.text is not None for ax in (fig.layout.xaxis, fig.layout.yaxis))
    assert np.allclose(np.asarray(fig.data[2].z), v.effective[0, 0], atol=1e-6)
    assert fig.layout.xaxis6.title.text == "key position"  # the bottom row (layer 1) carries the x titles
    assert fig.layout.yaxis.title.text == "layer 0<br>inducing point"
    assert "**isab**" in views_reading(views)
