"""The Model tab's card lists a layer schedule's layers by kind and the KV cache each kind holds at the
config's max_len: a causal window keeps its last ``window`` keys, a chunk at most ``chunk`` keys, a full
layer all of them (2 bytes x K and V x K/V heads x d_head per key)."""

from explorer.app.tabs.model import card
from models import ModelConfig


def test_gemma3_style_card_sums_the_cache_per_layer_kind():
    cfg = ModelConfig(
        n_layers=6,
        d_model=64,
        n_heads=4,
        n_kv_heads=2,
        max_len=512,
        attention="sliding_window",
        window=16,
        layer_schedule="sliding_window*5,full",
    ).validate()
    per_key = 2 * 2 * cfg.kv_heads * cfg.d_head  # K and V, fp16
    sliding, full = 5 * 16 * per_key, 1 * 512 * per_key
    text = card(cfg, 16)
    assert "L0–L4 `sliding_window`, L5 `full`" in text
    assert f"**{sliding + full:,} bytes**" in text
    assert f"`sliding_window` layers {sliding:,}" in text and f"`full` layers {full:,}" in text


def test_llama4_style_card_names_the_nope_layers():
    cfg = ModelConfig(
        n_layers=4,
        d_model=64,
        n_heads=4,
        max_len=256,
        attention="chunked",
        attention_chunk_size=32,
        layer_schedule="chunked*3,full:nope",
    ).validate()
    per_key = 2 * 2 * cfg.kv_heads * cfg.d_head
    text = card(cfg, 16)
    assert "L0–L2 `chunked`, L3 `full:nope`" in text
    assert f"`chunked` layers {3 * 32 * per_key:,}" in text and f"`full:nope` layers {256 * per_key:,}" in text


def test_a_uniform_model_has_no_schedule_line():
    assert "Layers (schedule" not in card(ModelConfig(n_layers=2, d_model=32, n_heads=2).validate(), 8)


def test_kv_cache_figure_draws_each_layer_kind_and_they_sum_to_the_model():
    from explorer.analysis import kv_cache_bytes
    from explorer.figures.latency import kv_cache_figure

    cfg = ModelConfig(
        n_layers=4, d_model=64, n_heads=4, attention="sliding_window", window=16, layer_schedule="sliding_window,full"
    ).validate()
    lens = [8, 64, 512]
    fig = kv_cache_figure(kv_cache_bytes(cfg, lens))
    by_name = {t.name: list(t.y) for t in fig.data}
    sliding, full = by_name["current: its sliding_window layers"], by_name["current: its full layers"]
    current = next(v for k, v in by_name.items() if k.startswith("current ("))
    assert [a + b for a, b in zip(sliding, full)] == current
    per_key = 2 * 2 * cfg.kv_heads * cfg.d_head / 2**20  # MiB
    assert sliding == [2 * min(n, 16) * per_key for n in lens] and full == [2 * n * per_key for n in lens]
