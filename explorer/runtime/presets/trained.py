"""The presets of the bundled trained models: their names, bundles and overrides."""

from __future__ import annotations

# The models shipped with trained weights (``assets/bundles``, made by ``explorer.training.bundle``): picking
# one of these draws its bundle. The overrides repeat the bundle recipes' configs on purpose: a test fails
# when a preset and its bundle's manifest drift apart.
BUNDLE_PRESETS = {
    "Trained: default (pre-LN, RoPE)": "default",
    "Trained: post-LN": "post_ln",
    "Trained: ALiBi": "alibi",
    "Trained: sliding window": "sliding_window",
    "Trained: GQA (2 K/V heads)": "gqa",
    "Trained: MoE (4 experts)": "moe",
    "Trained: encoder-decoder (reverse)": "encoder_decoder",
    "Trained: gpt-oss style (windows + sinks)": "gpt_oss_style",
    "Trained: MLA (latent attention)": "mla",
    "Trained: gated attention output": "gated_attention",
    "Trained: differential attention": "differential",
    "Trained: NSA (native sparse attention)": "nsa",
    "Trained: Mamba-2": "mamba2",
}
TRAINED: dict = {  # first in the dropdown
    "Trained: default (pre-LN, RoPE)": (
        "The app's default model with bundled trained weights: byte-level LM on the Python documentation "
        "(pre-LN, RoPE, full attention, 4 layers, d_model 128).",
        {},
    ),
    "Trained: post-LN": (
        "The default model with the original Transformer's post-LN placement, trained the same way.",
        dict(norm_placement="post"),
    ),
    "Trained: ALiBi": (
        "The default model with ALiBi's distance penalty instead of RoPE, trained the same way.",
        dict(position="alibi"),
    ),
    "Trained: sliding window": (
        "The default model with sliding-window attention (64 keys back), trained the same way.",
        dict(attention="sliding_window"),
    ),
    "Trained: GQA (2 K/V heads)": (
        "The default model with 4 query heads sharing 2 K/V heads, trained the same way.",
        dict(n_kv_heads=2),
    ),
    "Trained: MoE (4 experts)": (
        "The default model with a mixture of 4 experts (top-2, d_ff 256 each) as FFN, trained the same way.",
        dict(ffn="moe", d_ff=256),
    ),
    "Trained: encoder-decoder (reverse)": (
        "A 2 + 2 layer encoder-decoder trained to write a string backwards (type 'abc=>cba').",
        dict(architecture="encoder_decoder", n_layers=2),
    ),
    "Trained: gpt-oss style (windows + sinks)": (
        "The default model with gpt-oss's layers: 64-key sliding windows and full attention alternate, and "
        "every head has a learned sink; trained the same way.",
        dict(layer_schedule="sliding_window,full", window=64, attn_sinks=True),
    ),
    "Trained: MLA (latent attention)": (
        "The default model with DeepSeek's multi-head latent attention (keys and values from one shared "
        "latent and a shared RoPE key), trained the same way.",
        dict(attention="mla"),
    ),
    "Trained: gated attention output": (
        "The default model with an elementwise sigmoid gate on each head's output (Qiu et al. 2025, G1), "
        "trained the same way.",
        dict(attn_gate="elementwise"),
    ),
    "Trained: differential attention": (
        "The default model with differential attention (two softmax maps subtracted, Ye et al. 2025), "
        "trained the same way.",
        dict(attention="differential"),
    ),
    "Trained: NSA (native sparse attention)": (
        "The default model with DeepSeek's native sparse attention (compressed blocks, the top selected blocks "
        "and a 64-key window, mixed by learned gates; Yuan et al. 2025), trained the same way.",
        dict(attention="nsa"),
    ),
    "Trained: Mamba-2": (
        "The default model with Mamba-2's selective state-space scan (Dao & Gu 2024) in place of attention and no "
        "position encoding (the scan carries order), trained the same way.",
        dict(attention="mamba2", position="none"),
    ),
}
