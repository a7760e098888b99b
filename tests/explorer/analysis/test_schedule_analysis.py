"""What assumed one attention per model, with a layer schedule: the KV cache sums each layer's kind, the
maps show each layer's own pattern."""

import numpy as np

from explorer.analysis import attention_maps, kv_cache_bytes
from models import ModelConfig

SMALL = dict(n_layers=6, d_model=32, n_heads=4, n_kv_heads=2)


def test_kv_cache_sums_each_layer_kind():
    cfg = ModelConfig(layer_schedule="sliding_window*2,full", window=16, **SMALL)
    lens = [8, 100]
    kv = kv_cache_bytes(cfg, lens)
    per_key = 2 * 2 * 8 * 2  # K and V, 2 K/V heads, d_head 8, 2 bytes
    # 4 sliding layers keep min(L, 16) keys, 2 full layers all L
    assert kv["current"] == [per_key * (4 * min(n, 16) + 2 * n) for n in lens]
    assert kv["by_kind"] == {
        "sliding_window": [per_key * 4 * min(n, 16) for n in lens],
        "full": [per_key * 2 * n for n in lens],
    }
    assert [sum(v) for v in zip(*kv["by_kind"].values())] == kv["current"]
    assert kv["mha"] == [2 * x for x in kv["current"]]
    chunked = kv_cache_bytes(ModelConfig(layer_schedule="chunked*3,full:nope", attention_chunk_size=32, **SMALL), [100])
    assert chunked["by_kind"] == {
        "chunked": [per_key * 5 * 32],
        "full:nope": [per_key * 100],
    }  # layers 0-2, 4-5 chunked
    uniform = kv_cache_bytes(ModelConfig(**SMALL), [100])
    assert uniform["current"] == [per_key * 6 * 100] and uniform["by_kind"] == {"full": uniform["current"]}


def test_maps_carry_each_layers_own_pattern():
    cfg = ModelConfig(layer_schedule="sliding_window,chunked,full", window=3, attention_chunk_size=5, **SMALL)
    maps = attention_maps(cfg, "the quick brown fox jumps")
    L = len(maps.tokens)
    i, j = np.arange(L)[:, None], np.arange(L)[None, :]
    rules = [(i - j < 3) & (j <= i), (i // 5 == j // 5) & (j <= i), j <= i]
    assert maps.layer_masks.shape == (6, L, L)
    for layer in range(6):
        allowed = rules[layer % 3]
        assert np.array_equal(maps.layer_masks[layer], allowed)
        assert np.all(np.nan_to_num(maps.attention[layer])[:, ~allowed] == 0)  # nothing outside its own pattern
    assert np.array_equal(maps.mask, rules[2]) and maps.mask_kind == "pattern"
    # the share of pairs allowed is the layers' mean, not the union's (which is full attention's here), so the
    # reading never says the schedule allows every pair full attention allows
    assert maps.allowed_fraction == np.mean([r.mean() for r in rules])
    from explorer.figures.readings import allows_every_pair

    assert not allows_every_pair(maps.summary())
    assert attention_maps(ModelConfig(**SMALL), "the quick").layer_masks is None


def test_approximation_view_reads_each_layers_mechanism():
    """Full layers between approximate ones equal exact softmax (error 0, shared-QK only where LSH runs);
    the approximate layers do not (the check can fail)."""
    for attention, schedule in (("lsh", "lsh,full"), ("full", "linear,full")):
        cfg = ModelConfig(layer_schedule=schedule, attention=attention, n_layers=4, d_model=32, n_heads=4)
        view = attention_maps(cfg, "hello world again").views.items["approximation"]
        worst = view.max_error.max(axis=1)
        assert np.all(worst[1::2] < 1e-6) and np.all(worst[0::2] > 1e-3), (schedule, worst)
