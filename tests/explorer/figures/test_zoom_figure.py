"""The zoomed head shows the model's own probabilities for that (layer, head), with token labels."""

import numpy as np
import pytest

from explorer.analysis import attention_maps
from explorer.figures.zoom import head_figure
from models import ModelConfig


@pytest.fixture(scope="module")
def maps():
    return attention_maps(
        ModelConfig(n_layers=2, d_model=32, n_heads=2, attention="sliding_window", window=3), "hello world"
    )


def test_zoom_is_the_head_itself_with_blank_where_not_allowed(maps):
    fig = head_figure(maps, 1, 1)
    ref = maps.attention[1, 1].astype(np.float64)
    z = np.asarray(fig.data[0].z, dtype=np.float64)
    assert np.array_equal(np.isnan(z), ref == 0)
    np.testing.assert_array_equal(z[ref > 0], ref[ref > 0])
    assert np.isnan(z).sum() == 11 * 11 - sum(min(i + 1, 3) for i in range(11))  # causal window of 3
    assert list(fig.data[0].y)[4] == "4 o" and list(fig.data[0].x)[0] == "0 h"
    assert fig.data[0].zmax == pytest.approx(ref.max()) and "Layer 1, head 1" in fig.layout.title.text


def test_out_of_range_picks_are_clamped(maps):
    assert "Layer 1, head 1" in head_figure(maps, 9, 9).layout.title.text
