"""Differential attention's drawn map ``A`` has negative weights and rows that sum to ``1 - lambda``: the grid draws
them on a signed scale (never blank for being negative: tests/explorer/figures/test_grid_kinds_signed.py), and the
maps' health flag checks the rows against what the record declares (one sum per head) instead of one."""

import numpy as np

from explorer.analysis import attention_maps
from explorer.analysis.maps.attention import rows_ok
from explorer.figures.attention import attention_grid
from models import ModelConfig

TEXT = "The quick brown fox jumps over"


def test_grid_names_the_negative_weights_and_rows_are_checked_per_head():
    maps = attention_maps(ModelConfig(attention="differential", n_layers=2, d_model=64), TEXT)
    share = float((np.nan_to_num(maps.attention) < 0).mean())
    assert share > 0
    fig = attention_grid(maps)
    assert "negative" not in fig.layout.title.text and fig.layout.meta["signed"]  # drawn, not blank
    sums = maps.attention.sum(-1)
    assert not np.allclose(sums, 1) and maps.summary()["row_sums_ok"]
    bent = maps.attention.copy()
    bent[0, 0, 3] *= 1.5  # one row of a head off that head's sum
    assert rows_ok(bent, True) is False and rows_ok(bent, False) is False


def test_a_softmax_map_keeps_its_plain_title():
    maps = attention_maps(ModelConfig(attention="mla", n_layers=1, d_model=64), TEXT)
    assert "negative" not in attention_grid(maps).layout.title.text and maps.summary()["row_sums_ok"]
