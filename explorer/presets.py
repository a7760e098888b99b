"""Named architectures as ModelConfig overrides, scaled to the explorer's size.

Each preset keeps the architecture's *choices* (attention pattern, positions, norm placement, FFN,
K/V heads, ...) at the explorer's interactive size (4 layers, d_model 128, ~128 tokens), so the
maps and curves show what the choices do, not what a 70B model costs. Head ratios are kept where
they matter (GQA: several query heads per K/V head). Presets that name a variant not yet in the
registries (or a combination it rejects) are hidden by ``available()`` until it lands.
"""
from __future__ import annotations

from models import ConfigError, ModelConfig

# name -> (one-line description, overrides of ModelConfig defaults)
PRESETS: dict = {
    "Vanilla Transformer (2017)": (
        "Vaswani et al. 2017, decoder side: sinusoidal positions, post-LN, ReLU FFN.",
        dict(attention="full", position="sinusoidal", norm_placement="post", norm="layernorm", ffn="relu",
             causal=True)),
    "BERT (2018)": (
        "Devlin et al. 2018: bidirectional encoder, learned positions, post-LN, GELU.",
        dict(attention="full", position="learned", max_len=512, norm_placement="post", norm="layernorm",
             ffn="gelu", causal=False)),
    "GPT-2 (2019)": (
        "Radford et al. 2019: causal decoder, learned positions, pre-LN, GELU.",
        dict(attention="full", position="learned", max_len=1024, norm_placement="pre", norm="layernorm",
             ffn="gelu", causal=True)),
    "T5 (2020)": (
        "Raffel et al. 2020, encoder: relative position buckets, pre-norm RMSNorm, ReLU.",
        dict(attention="full", position="t5", norm_placement="pre", norm="rmsnorm", ffn="relu", causal=False)),
    "Sparse Transformer (2019)": (
        "Child et al. 2019: strided factorised attention, pre-activation residuals, GELU.",
        dict(attention="strided", stride=16, position="learned", max_len=4096, norm_placement="pre",
             norm="layernorm", ffn="gelu", causal=True)),
    "Longformer (2020)": (
        "Beltagy et al. 2020: sliding window plus global tokens, bidirectional, RoBERTa-style post-LN.",
        dict(attention="longformer", window=32, n_global=2, position="learned", max_len=4096,
             norm_placement="post", norm="layernorm", ffn="gelu", causal=False)),
    "BigBird (2020)": (
        "Zaheer et al. 2020: window + global + random blocks, bidirectional.",
        dict(attention="bigbird", window=16, n_global=2, n_random=2, block_size=16, position="learned",
             max_len=4096, norm_placement="post", norm="layernorm", ffn="gelu", causal=False)),
    "LLaMA (2023)": (
        "Touvron et al. 2023: RoPE, pre-norm RMSNorm, SwiGLU, causal.",
        dict(attention="full", position="rope", norm_placement="pre", norm="rmsnorm", ffn="swiglu",
             causal=True)),
    "Llama-2-70B (GQA)": (
        "Touvron et al. 2023: LLaMA with grouped-query attention (64 query heads over 8 K/V heads; "
        "here 8 over 2).",
        dict(attention="full", position="rope", norm_placement="pre", norm="rmsnorm", ffn="swiglu",
             n_heads=8, n_kv_heads=2, causal=True)),
    "Mistral 7B (2023)": (
        "Jiang et al. 2023: sliding-window attention + GQA (32 query heads over 8 K/V heads; here 8 "
        "over 2), RoPE, RMSNorm, SwiGLU; window scaled to the short input.",
        dict(attention="sliding_window", window=32, position="rope", norm_placement="pre", norm="rmsnorm",
             ffn="swiglu", n_heads=8, n_kv_heads=2, causal=True)),
    "BLOOM (2022)": (
        "BigScience 2022: ALiBi distance penalties instead of position embeddings, pre-LN, GELU.",
        dict(attention="full", position="alibi", norm_placement="pre", norm="layernorm", ffn="gelu",
             causal=True)),
    "Shaw relative (2018)": (
        "Shaw et al. 2018: clipped relative position vectors on keys and values.",
        dict(attention="full", position="shaw", max_relative=16, norm_placement="post", norm="layernorm",
             ffn="relu", causal=True)),
    "Transformer-XL (2019)": (
        "Dai et al. 2019: segment recurrence with relative positions.",
        dict(attention="full", position="xl", memory="xl", segment_len=64, mem_len=64, norm_placement="post",
             norm="layernorm", ffn="relu", causal=True)),
    "Reformer (2020)": (
        "Kitaev et al. 2020: LSH attention and reversible layers.",
        dict(attention="lsh", n_buckets=8, n_hashes=2, chunk_size=32, layer="reversible", position="rope",
             norm_placement="pre", norm="layernorm", ffn="gelu", causal=True)),
    "Performer (2021)": (
        "Choromanski et al. 2021: FAVOR+ positive random features, linear in L.",
        dict(attention="performer", n_features=64, feature_map="positive", position="rope",
             norm_placement="pre", norm="layernorm", ffn="gelu", causal=True)),
    "Switch Transformer (2021)": (
        "Fedus et al. 2021: top-1 mixture-of-experts FFN, T5-style positions.",
        dict(attention="full", position="t5", norm_placement="pre", norm="rmsnorm", ffn="switch",
             n_experts=4, capacity_factor=1.25, causal=True)),
    "Universal Transformer (2019)": (
        "Dehghani et al. 2019: one shared block applied n_layers times.",
        dict(attention="full", position="sinusoidal", layer="universal", norm_placement="post",
             norm="layernorm", ffn="relu", causal=True)),
}

CUSTOM = "(custom)"
DEFAULT_PRESET = "LLaMA (2023)"


def preset_config(name: str) -> ModelConfig:
    """The full ``ModelConfig`` of preset ``name`` (ConfigError names the valid presets)."""
    if name not in PRESETS:
        raise ConfigError("preset", name, f"one of {list(PRESETS)}")
    return ModelConfig(**PRESETS[name][1])


def available() -> list:
    """Names of the presets whose variants are all registered and whose combination validates."""
    names = []
    for name in PRESETS:
        try:
            preset_config(name).validate()
        except ConfigError:
            continue
        names.append(name)
    return names


def matching_preset(cfg: ModelConfig) -> str:
    """The preset whose config equals ``cfg`` exactly (ignoring the seed), else ``CUSTOM``."""
    d = {**cfg.to_dict(), "seed": 0}
    for name in available():
        if preset_config(name).to_dict() == d:
            return name
    return CUSTOM
