"""The attention grid under a layer schedule names each row's layer kind, and a map with negative weights
(Differential attention, ``A1 - lambda A2``) is drawn on a diverging scale of its own values, not as the
uint8 probability levels whose 0 means "not allowed"."""

import numpy as np

from explorer.analysis.maps.attention import attention_maps
from explorer.figures.attention import attention_grid, layer_kind_label
from models import ModelConfig

TEXT = "the cat sat on the mat; the cat sat on the hat."


def test_schedule_rows_name_their_layer_kind():
    cfg = ModelConfig(
        n_layers=4,
        d_model=32,
        n_heads=2,
        attention="sliding_window",
        window=4,
        layer_schedule="sliding_window*3,full:nope",
    ).validate()
    maps = attention_maps(cfg, TEXT)
    assert maps.layer_kinds == ["sliding_window"] * 3 + ["full:nope"]
    assert maps.summary()["layer_kinds"] == maps.layer_kinds
    fig = attention_grid(maps)
    rows = [fig.layout[f"yaxis{'' if r == 0 else r * 2 + 1}"].title.text for r in range(4)]
    assert rows == ["L0 sliding", "L1 sliding", "L2 sliding", "L3 full, NoPE"]
    assert "sliding_window*3,full:nope" in fig.layout.title.text
    # the sliding rows allow fewer pairs than the full one: its own pattern, not the union
    blank = [int((np.asarray(fig.data[r * 2].z) == 0).sum()) for r in range(4)]
    assert blank[0] == blank[1] == blank[2] > blank[3]


def test_uniform_rows_keep_their_plain_titles():
    maps = attention_maps(ModelConfig(n_layers=2, d_model=32, n_heads=2).validate(), TEXT)
    assert maps.layer_kinds is None and maps.summary()["layer_kinds"] is None
    fig = attention_grid(maps)
    assert fig.layout.yaxis.title.text == "layer 0" and fig.layout.meta["p_step"] > 0


def test_differential_maps_draw_their_signed_values():
    cfg = ModelConfig(n_layers=2, d_model=32, n_heads=2, attention="differential").validate()
    maps = attention_maps(cfg, TEXT)
    att = maps.attention
    assert np.nanmin(att) < 0  # A1 - lambda A2 has negative weights at initialisation
    fig = attention_grid(maps)
    assert fig.layout.meta["signed"] is True and fig.layout.meta["p_step"] is None
    ca = fig.layout.coloraxis
    assert ca.cmin == -ca.cmax and ca.cmax > 0  # centred on 0
    z = np.asarray(fig.data[0].z, dtype=np.float64)
    want = att[0, 0]
    allowed = np.isfinite(want) & (want != 0)
    np.testing.assert_allclose(z[allowed], np.round(want[allowed], 4), atol=1e-6)
    assert np.isnan(z[~allowed]).all()  # future keys (causal) stay blank
    assert np.triu(np.ones_like(want, dtype=bool), 1)[~allowed].any()


def test_layer_kind_labels():
    assert layer_kind_label("sliding_window") == "sliding"
    assert layer_kind_label("chunked") == "chunked"
    assert layer_kind_label("full:nope") == "full, NoPE"
