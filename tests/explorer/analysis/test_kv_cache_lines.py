"""The KV-cache figure's reference lines (explorer/analysis/cost/summary.py): GQA and MLA by hand."""

from explorer.analysis.cost.summary import kv_cache_bytes
from explorer.figures.latency import kv_cache_figure
from models import ModelConfig


def test_gqa_and_mla_lines_by_hand():
    cfg = ModelConfig(n_layers=3, d_model=128, n_heads=8, kv_lora_rank=48, qk_rope_head_dim=16).validate()
    kv = kv_cache_bytes(cfg, [10, 100])
    assert kv["gqa_heads"] == 2
    assert kv["gqa"] == [2 * 2 * 16 * 3 * L * 2 for L in (10, 100)]  # K and V, 2 heads of 16, 3 layers, fp16
    assert kv["mla"] == [(48 + 16) * 3 * L * 2 for L in (10, 100)]
    names = [t.name for t in kv_cache_figure(kv).data]
    assert any(n.startswith("GQA (2 K/V heads)") for n in names) and any(n.startswith("MLA latent (64") for n in names)


def test_a_window_bounds_the_mla_line_as_it_bounds_the_others():
    cfg = ModelConfig(attention="sliding_window", window=16, n_heads=4).validate()
    kv = kv_cache_bytes(cfg, [8, 1000])
    assert kv["mla"][1] == kv["mla"][0] * 16 // 8  # 16 keys kept past the window, 8 before it
    assert not any(t.name.startswith("GQA") for t in kv_cache_figure(kv).data)  # 4 heads: GQA-4 is MQA
