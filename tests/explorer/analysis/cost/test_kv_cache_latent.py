"""The KV-cache bytes of a mechanism whose record says what its cache keeps (MLA: the latent and the shared RoPE
key), next to MHA / GQA / MQA, which keep their K/V-head rule; the figure and the model card say which rule."""

import pytest

from explorer.analysis import kv_cache_bytes
from explorer.analysis.why import circuits
from explorer.app.tabs.model import card
from explorer.figures.latency import kv_cache_figure
from models import ConfigError, ModelConfig

MLA = dict(attention="mla", d_model=32, n_heads=4, n_layers=3, kv_lora_rank=12, qk_nope_head_dim=6, qk_rope_head_dim=4)


def test_mla_caches_its_latent_and_rope_key_per_token_and_layer():
    cfg = ModelConfig(**MLA).validate()
    kv = kv_cache_bytes(cfg, [1, 100])
    assert kv["current"] == [3 * (12 + 4) * n * 2 for n in (1, 100)]
    assert kv["values_per_token_layer"] == 16 and kv["own_rule"]
    assert kv["mha"] == [2 * 3 * 4 * 8 * n * 2 for n in (1, 100)]  # MHA of the same width, for comparison
    fig = kv_cache_figure(kv)
    current = next(t for t in fig.data if t.name.startswith("current"))
    assert "mla: 16 values per token and layer" in current.name and list(current.y) == [
        b / 2**20 for b in kv["current"]
    ]
    mla_line = next(t for t in fig.data if t.name.startswith("MLA latent"))
    assert list(mla_line.y) == list(current.y)  # the reference MLA line at the config's widths is this model
    text = card(cfg, 16)  # the model card: 3 layers x 16 values x 2 bytes
    assert f"**{3 * 16 * 2:,} bytes per token**" in text and "3 layers × 16 values the mla cache keeps" in text


@pytest.mark.parametrize("n_kv", [None, 2, 1])
def test_mha_gqa_mqa_keep_the_k_v_head_rule(n_kv):
    cfg = ModelConfig(attention="full", d_model=32, n_heads=4, n_layers=3, n_kv_heads=n_kv).validate()
    kv = kv_cache_bytes(cfg, [10])
    assert kv["current"] == [2 * 3 * (n_kv or 4) * 8 * 10 * 2] and not kv["own_rule"]
    current = next(t for t in kv_cache_figure(kv).data if t.name.startswith("current"))
    assert "K/V heads" in current.name


def test_head_circuits_refuse_a_core_with_its_own_projections():
    with pytest.raises(ConfigError) as e:
        circuits.check_structure(ModelConfig(**MLA).validate())
    assert e.value.field == "attention" and "latent" in str(e.value)
