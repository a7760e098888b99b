"""The maps of a parallel_hybrid model (attention and Mamba-2 side by side in each layer): the main maps are each
layer's attention, the mixer's maps (its implicit attention) are one more map set, ``stacks["mixer"]``, equal to
what the model records in ``LayerInfo.parallel``; the Attention tab shows them in its second slot."""

import numpy as np
import torch

from explorer.analysis import attention_maps
from models import ModelConfig, build_model

CFG = ModelConfig(layer="parallel_hybrid", n_layers=2, d_model=32, n_heads=4, ssm_heads=8, ssm_head_dim=8)
TEXT = "Attention is all you need."


def test_the_mixers_maps_are_a_map_set_beside_the_attentions():
    maps = attention_maps(CFG, TEXT)
    out = build_model(CFG).eval()(torch.tensor([list(TEXT.encode())]), return_attention=True)
    np.testing.assert_allclose(maps.attention, np.stack([a[0].detach().numpy() for a in out.attentions]), atol=1e-6)
    mixer = maps.stacks["mixer"]
    want = np.stack([i.parallel.attention[0].detach().numpy() for i in out.layers])  # (layers, 8, L, L)
    np.testing.assert_allclose(mixer.attention, want, atol=1e-6)
    assert mixer.attention.shape[1] == 8 and maps.attention.shape[1] == 4
    assert mixer.config["attention"] == "mamba2" and "mamba2" in mixer.stack
    assert mixer.summary()["row_sums_ok"] and maps.summary()["row_sums_ok"]
    assert any("parallel_hybrid" in n for n in maps.notes)


def test_the_attention_tab_shows_the_mixers_maps():
    from explorer.app.tabs.parts.stacks import attention_updates

    shown = attention_updates(CFG, TEXT, None)
    assert shown["encoder_grid"]["visible"] and "mamba2" in shown["encoder_grid"]["label"]
    assert not shown["cross_grid"]["visible"]
    plain = attention_updates(CFG.replace(layer="standard"), TEXT, None)
    assert not any(u["visible"] for u in plain.values())
