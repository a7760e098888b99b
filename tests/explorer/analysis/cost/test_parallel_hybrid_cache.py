"""The decode memory of a parallel_hybrid model: each layer keeps its attention's K/V cache and, beside it, its
mixer's (Mamba-2: a fixed state of h P N numbers and the convolution's last K - 1 inputs; linear attention beside
full: keys of its own)."""

from explorer.analysis.cost.summary import kv_cache_bytes
from models import ModelConfig

CFG = ModelConfig(layer="parallel_hybrid", n_layers=3, d_model=32, n_heads=4, ssm_heads=8, ssm_head_dim=8)


def test_each_layer_keeps_the_attention_cache_and_the_mixer_state():
    lens = [10, 20]
    got = kv_cache_bytes(CFG, lens)
    h, P, N, G, K = 8, 8, CFG.ssm_state, CFG.ssm_groups, CFG.ssm_conv
    state = h * P * N + (h * P + 2 * G * N) * (K - 1)  # numbers per layer, whatever the length
    attention = [2 * CFG.n_heads * CFG.d_head * n * 3 * 2 for n in lens]  # K and V, 3 layers, 2 bytes each
    assert got["by_kind"]["full"] == attention
    assert got["by_kind"]["mamba2 (parallel)"] == [3 * state * 2] * 2
    assert got["current"] == [a + 3 * state * 2 for a in attention]
    assert got["state_values"] == {"mamba2": state}


def test_a_mixer_that_caches_keys_grows_with_the_length():
    got = kv_cache_bytes(CFG.replace(parallel_mixer="full"), [8, 16])
    assert got["by_kind"]["full (parallel)"] == got["by_kind"]["full"]
    assert got["current"] == [2 * x for x in got["by_kind"]["full"]]
