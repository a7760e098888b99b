"""Pooled implicit maps of recurrent mixers (Mamba-2, Gated DeltaNet, and hybrids with softmax layers) from
``models.long_context.pooled_maps`` against dense pooling of the model's own dense implicit maps, at 512 and
1024 tokens; the long-context zoom of a far cell against the dense map."""

import pytest
import torch

from explorer.analysis.long_context.zoom import implicit_region
from kernels import pool_probs
from models import ModelConfig, build_model
from models.blocks import Attention
from models.interventions import Interventions
from models.long_context import pooled_maps

MIXERS = {
    "mamba2": dict(attention="mamba2", ffn="none", ssm_state=8),
    "gated_deltanet": dict(attention="gated_deltanet", delta_value_heads=8),
    "hybrid": dict(attention="gated_deltanet", layer_schedule="gated_deltanet,full", position="rope"),
}


def _model(**kw):
    kw.setdefault("position", "none")
    cfg = ModelConfig(n_layers=2, d_model=32, n_heads=4, max_len=1024, norm="rmsnorm", **kw)
    return build_model(cfg).eval().double()


@pytest.mark.parametrize("L", [512, pytest.param(1024, marks=pytest.mark.slow)])
@pytest.mark.parametrize("name", list(MIXERS))
def test_pooled_implicit_maps_equal_dense_pooling(name, L):
    model = _model(**MIXERS[name])
    tokens = torch.randint(0, 256, (1, L), generator=torch.Generator().manual_seed(L))
    res = pooled_maps(model, tokens, max_cells=16, sink_k=3, window=40)
    with torch.no_grad():
        dense = model(tokens, return_attention=True).attentions
    assert "implicit (chunked recurrence)" in res.method
    for layer, (pm, a) in enumerate(zip(res.maps, dense)):
        ref = pool_probs(a.double(), pm.block_q, pm.block_k, sink_k=3, window=40)
        recurrent = name != "hybrid" or layer == 0
        if recurrent:
            assert (a < 0).any() and torch.isnan(pm.entropy).all() and "not probabilities" in pm.note
        scale = a.abs().sum(-1).max().item()
        for stat in ("mass", "sink", "local", "distance") + (() if recurrent else ("entropy",)):
            tol = 1e-9 * scale * (L if stat == "distance" else 1) + 1e-12
            torch.testing.assert_close(getattr(pm, stat).double(), getattr(ref, stat), atol=tol, rtol=1e-7, msg=stat)


@pytest.mark.parametrize(
    "name, rows, keys",
    [("mamba2", (250, 300), (10, 42)), ("gated_deltanet", (120, 150), (90, 118))],  # its decays forget faster
)
def test_zoom_region_is_the_dense_map_off_the_diagonal(name, rows, keys):
    model = _model(**MIXERS[name])
    L, head = 300, 1
    tokens = torch.randint(0, 256, (1, L), generator=torch.Generator().manual_seed(1))
    attn = [m for m in model.modules() if isinstance(m, Attention)][1]
    got = {}

    def capture(call):
        if call.attn is attn:
            got["r"] = implicit_region(attn.core, call, *rows, *keys, head)

    with torch.no_grad():
        model(tokens, interventions=Interventions(observe_cores=capture))
        dense = model(tokens, return_attention=True).attentions[1][0, head]
    torch.testing.assert_close(got["r"], dense[slice(*rows), slice(*keys)].double(), atol=1e-10, rtol=1e-8)
    assert got["r"].abs().max() > 0
