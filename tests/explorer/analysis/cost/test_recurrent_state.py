"""Decode memory of recurrent layers (Mamba-2, Gated DeltaNet): a fixed state counted from the layer's sizes, not
keys; a hybrid's attention layers still grow per token; the figure draws a pure recurrent stack flat beside the
caches and the model card says what stays fixed and what grows."""

import pytest

from explorer.analysis import kv_cache_bytes
from explorer.app.tabs.model import card
from explorer.figures.latency import kv_cache_figure
from models import ModelConfig

LENS = [1, 100, 10_000]
# Mamba-2: h P N + (K - 1)(h P + 2 G N) = 4*8*16 + 3*(32 + 32) = 704 values per layer
MAMBA = dict(attention="mamba2", ffn="none", position="none", d_model=32, n_heads=4, n_layers=4)
# Gated DeltaNet: h_v d_k d_v + (K - 1)(2 h_k d_k + h_v d_v) = 8*8*8 + 3*(64 + 64) = 896 values per layer
DELTA = dict(attention="gated_deltanet", position="rope", d_model=32, n_heads=4, n_layers=4, delta_value_heads=8)


@pytest.mark.parametrize("kw, values", [(MAMBA, 704), (DELTA, 896)])
def test_a_pure_recurrent_model_keeps_the_same_bytes_at_every_length(kw, values):
    cfg = ModelConfig(**kw).validate()
    kv = kv_cache_bytes(cfg, LENS)
    assert kv["current"] == [4 * values * 2] * 3 and kv["state_values"] == {cfg.attention: values}
    assert kv["recurrent"][cfg.attention] == kv["current"]
    assert kv["mha"] == [2 * 4 * 4 * 8 * n * 2 for n in LENS]  # full attention of the same widths grows with L
    text = card(cfg, 16)
    assert f"Recurrent state: **{4 * values * 2:,} bytes**" in text and "no KV cache" in text
    assert f"4 `{cfg.attention}` layers × {values} values" in text


def test_a_hybrid_grows_only_by_its_attention_layers():
    cfg = ModelConfig(**{**DELTA, "layer_schedule": "gated_deltanet*3,full"}).validate()
    kv = kv_cache_bytes(cfg, LENS)
    per_token = 2 * 4 * 8 * 2  # one full layer: K and V of 4 heads x 8, fp16
    assert kv["current"] == [3 * 896 * 2 + per_token * n for n in LENS]
    assert kv["by_kind"]["gated_deltanet"] == [3 * 896 * 2] * 3 and kv["by_kind"]["full"] == [
        per_token * n for n in LENS
    ]
    fig = kv_cache_figure(kv)
    flat = next(t for t in fig.data if t.name.startswith("all 4 layers gated_deltanet"))
    assert len(set(flat.y)) == 1 and flat.y[0] == 4 * 896 * 2 / 2**20
    assert "recurrent state" in fig.layout.title.text and "state" in fig.layout.yaxis.title.text
    text = card(cfg, 16)
    assert f"**{3 * 896 * 2:,} bytes** in fp16 at every context length" in text
    assert f"**{per_token:,} bytes per token**" in text
