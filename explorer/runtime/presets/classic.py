"""The named architectures of 2017-2021 (the source texts' family) as ModelConfig overrides."""

from __future__ import annotations

CLASSIC: dict = {
    "Vanilla Transformer (2017)": (
        "Vaswani et al. 2017, decoder side: sinusoidal positions, post-LN, ReLU FFN.",
        dict(attention="full", position="sinusoidal", norm_placement="post", norm="layernorm", ffn="relu", causal=True),
    ),
    "BERT (2018)": (
        "Devlin et al. 2018: encoder-only (bidirectional, masked-LM head), learned positions, post-LN, GELU.",
        dict(
            architecture="encoder_only",
            attention="full",
            position="learned",
            max_len=512,
            norm_placement="post",
            norm="layernorm",
            ffn="gelu",
            causal=False,
        ),
    ),
    "GPT-2 (2019)": (
        "Radford et al. 2019: causal decoder, learned positions, pre-LN, GELU.",
        dict(
            attention="full",
            position="learned",
            max_len=1024,
            norm_placement="pre",
            norm="layernorm",
            ffn="gelu",
            causal=True,
        ),
    ),
    "T5 (2020)": (
        "Raffel et al. 2020: encoder-decoder; relative position buckets (one bias table per stack, shared "
        "by its layers), pre-norm RMSNorm (no bias), ReLU (here with FFN biases, which T5 drops).",
        dict(
            architecture="encoder_decoder",
            attention="full",
            position="t5",
            norm_placement="pre",
            norm="rmsnorm",
            ffn="relu",
            causal=True,
        ),
    ),
    "Sparse Transformer (2019)": (
        "Child et al. 2019: strided factorised attention, pre-activation residuals, GELU.",
        dict(
            attention="strided",
            stride=16,
            position="learned",
            max_len=4096,
            norm_placement="pre",
            norm="layernorm",
            ffn="gelu",
            causal=True,
        ),
    ),
    "Longformer (2020)": (
        "Beltagy et al. 2020: sliding window plus global tokens, bidirectional, RoBERTa-style post-LN.",
        dict(
            attention="longformer",
            window=32,
            n_global=2,
            position="learned",
            max_len=4096,
            norm_placement="post",
            norm="layernorm",
            ffn="gelu",
            causal=False,
        ),
    ),
    "BigBird (2020)": (
        "Zaheer et al. 2020: window + global + random blocks, bidirectional.",
        dict(
            attention="bigbird",
            window=16,
            n_global=2,
            n_random=2,
            block_size=16,
            position="learned",
            max_len=4096,
            norm_placement="post",
            norm="layernorm",
            ffn="gelu",
            causal=False,
        ),
    ),
    "LLaMA (2023)": (
        "Touvron et al. 2023: RoPE, pre-norm RMSNorm, SwiGLU, causal.",
        dict(attention="full", position="rope", norm_placement="pre", norm="rmsnorm", ffn="swiglu", causal=True),
    ),
    "Llama-2-70B (GQA)": (
        "Touvron et al. 2023: LLaMA with grouped-query attention (64 query heads over 8 K/V heads; here 8 over 2).",
        dict(
            attention="full",
            position="rope",
            norm_placement="pre",
            norm="rmsnorm",
            ffn="swiglu",
            n_heads=8,
            n_kv_heads=2,
            causal=True,
        ),
    ),
    "Mistral 7B (2023)": (
        "Jiang et al. 2023: sliding-window attention + GQA (32 query heads over 8 K/V heads; here 8 "
        "over 2), RoPE, RMSNorm, SwiGLU; window scaled to the short input.",
        dict(
            attention="sliding_window",
            window=32,
            position="rope",
            norm_placement="pre",
            norm="rmsnorm",
            ffn="swiglu",
            n_heads=8,
            n_kv_heads=2,
            causal=True,
        ),
    ),
    "BLOOM (2022)": (
        "BigScience 2022: ALiBi distance penalties instead of position embeddings, pre-LN, GELU.",
        dict(attention="full", position="alibi", norm_placement="pre", norm="layernorm", ffn="gelu", causal=True),
    ),
    "Shaw relative (2018)": (
        "Shaw et al. 2018: clipped relative position vectors on keys and values.",
        dict(
            attention="full",
            position="shaw",
            max_relative=16,
            norm_placement="post",
            norm="layernorm",
            ffn="relu",
            causal=True,
        ),
    ),
    "Transformer-XL (2019)": (
        "Dai et al. 2019: segment-level recurrence (each layer also attends the previous segment's "
        "hidden states, detached) with relative positions (u, v biases, sinusoidal R); post-LN, ReLU. "
        "Segments of 32 bytes so the demo text spans several.",
        dict(
            attention="full",
            position="xl",
            memory="xl",
            segment_len=32,
            mem_len=32,
            norm_placement="post",
            norm="layernorm",
            ffn="relu",
            causal=True,
        ),
    ),
    "Compressive Transformer (2019)": (
        "Rae et al. 2019: Transformer-XL memory plus older memories compressed 3:1 by a learned 1D "
        "convolution (the paper's best compression), trained by attention reconstruction.",
        dict(
            attention="full",
            position="xl",
            memory="compressive",
            segment_len=32,
            mem_len=32,
            cmem_len=16,
            compression_rate=3,
            compression="conv",
            norm_placement="post",
            norm="layernorm",
            ffn="relu",
            causal=True,
        ),
    ),
    "Memorizing Transformer (2022)": (
        "Wu et al. 2022: a decoder with T5 relative biases whose second-to-last layer retrieves the "
        "exact top-k of an external (key, value) store and gates it with local attention.",
        dict(
            attention="full",
            position="t5",
            memory="knn",
            segment_len=32,
            knn_size=1024,
            knn_k=8,
            norm_placement="pre",
            norm="rmsnorm",
            ffn="relu",
            causal=True,
        ),
    ),
    "GTrXL (2020)": (
        "Parisotto et al. 2020: Transformer-XL memory with identity-map reordering (pre-LN) and "
        "GRU-type gates in place of the residual additions.",
        dict(
            attention="full",
            position="xl",
            memory="xl",
            segment_len=32,
            mem_len=32,
            layer="gated",
            norm_placement="pre",
            norm="layernorm",
            ffn="relu",
            causal=True,
        ),
    ),
    "Reformer (2020)": (
        "Kitaev et al. 2020: shared-QK LSH attention (2 hash rounds, 8 buckets, chunks of 16) and "
        "reversible layers; learned absolute positions (the paper's axial embeddings are learned too).",
        dict(
            attention="lsh",
            n_buckets=8,
            n_hashes=2,
            chunk_size=16,
            layer="reversible",
            position="learned",
            max_len=4096,
            norm_placement="pre",
            norm="layernorm",
            ffn="gelu",
            causal=True,
        ),
    ),
    "Routing Transformer (2021)": (
        "Roy et al. 2021: online k-means routing: queries and keys attend within their nearest of "
        "n_clusters centroids (about sqrt(L)), updated by EMA; pre-LN decoder.",
        dict(
            attention="routing",
            n_clusters=8,
            cluster_decay=0.999,
            position="sinusoidal",
            norm_placement="pre",
            norm="layernorm",
            ffn="relu",
            causal=True,
        ),
    ),
    "Linear Transformer (2020)": (
        "Katharopoulos et al. 2020: softmax replaced by the elu(x) + 1 feature map, causal prefix sums "
        "(an RNN in disguise); post-LN, ReLU as in their fast-transformers layers.",
        dict(
            attention="linear", position="sinusoidal", norm_placement="post", norm="layernorm", ffn="relu", causal=True
        ),
    ),
    "Performer (2021)": (
        "Choromanski et al. 2021: FAVOR+ positive orthogonal random features (m = 64 per head), linear "
        "in L; learned positions, pre-LN, GELU.",
        dict(
            attention="performer",
            n_features=64,
            feature_map="positive",
            position="learned",
            max_len=4096,
            norm_placement="pre",
            norm="layernorm",
            ffn="gelu",
            causal=True,
        ),
    ),
    "Linformer (2020)": (
        "Wang et al. 2020: keys and values projected along the sequence to proj_len = 64 by learned "
        "E, F; a bidirectional RoBERTa-style encoder (learned positions, post-LN, GELU).",
        dict(
            attention="linformer",
            proj_len=64,
            position="learned",
            max_len=4096,
            norm_placement="post",
            norm="layernorm",
            ffn="gelu",
            causal=False,
        ),
    ),
    "Nystromformer (2021)": (
        "Xiong et al. 2021: Nystrom approximation of softmax with 16 segment-mean landmarks; a "
        "bidirectional BERT-style encoder (learned positions, post-LN, GELU).",
        dict(
            attention="nystrom",
            n_landmarks=16,
            position="learned",
            max_len=4096,
            norm_placement="post",
            norm="layernorm",
            ffn="gelu",
            causal=False,
        ),
    ),
    "Switch Transformer (2021)": (
        "Fedus et al. 2021: top-1 routing to 8 experts with capacity factor 1.25 and the load-balancing "
        "loss; T5-style relative biases, pre-norm RMSNorm.",
        dict(
            attention="full",
            position="t5",
            norm_placement="pre",
            norm="rmsnorm",
            ffn="switch",
            n_experts=8,
            capacity_factor=1.25,
            causal=True,
        ),
    ),
    "Universal Transformer (2019)": (
        "Dehghani et al. 2019: one shared block applied up to n_layers times with a position + step "
        "timing signal and ACT halting per token (threshold 1 - 0.01); post-LN, ReLU.",
        dict(
            attention="full",
            position="sinusoidal",
            layer="universal",
            act=True,
            act_threshold=0.99,
            norm_placement="post",
            norm="layernorm",
            ffn="relu",
            causal=True,
        ),
    ),
    # encoder-decoder architectures (models/architectures.py)
    "Original Transformer (Vaswani 2017, encoder-decoder)": (
        "Vaswani et al. 2017: bidirectional encoder + causal decoder with cross-attention in every "
        "layer; sinusoidal positions, post-LN, ReLU.",
        dict(
            architecture="encoder_decoder",
            attention="full",
            position="sinusoidal",
            norm_placement="post",
            norm="layernorm",
            ffn="relu",
            causal=True,
        ),
    ),
    "BART (2020)": (
        "Lewis et al. 2020: encoder-decoder with learned positions (one table per stack), post-LN, GELU.",
        dict(
            architecture="encoder_decoder",
            attention="full",
            position="learned",
            max_len=1024,
            norm_placement="post",
            norm="layernorm",
            ffn="gelu",
            causal=True,
        ),
    ),
    # score mixing across layers
    "RealFormer (2020)": (
        "He et al. 2020: BERT (bidirectional, learned positions, post-LN, GELU) with residual attention: "
        "each layer's pre-softmax scores add the previous layer's.",
        dict(
            attention="realformer",
            position="learned",
            max_len=512,
            norm_placement="post",
            norm="layernorm",
            ffn="gelu",
            causal=False,
        ),
    ),
    # layer structures
    "Sandwich Transformer (2020)": (
        "Press et al. 2020: the sublayers reordered a^s (af)^(n-s) f^s; their best 16-layer model has "
        "s = 6, here s = 2 of 4 layers; sinusoidal positions, pre-LN, ReLU, causal.",
        dict(
            attention="full",
            position="sinusoidal",
            layer="sandwich",
            sandwich_coeff=2,
            norm_placement="pre",
            norm="layernorm",
            ffn="relu",
            causal=True,
        ),
    ),
    "Funnel-Transformer (2020)": (
        "Dai et al. 2020: blocks on a sequence mean-pooled by 2, pool-query-only first layers, "
        "upsampled + first-block residual for tokens; B4-4-4 scaled to 3 blocks of 2 layers; post-LN, GELU, "
        "bidirectional (learned positions instead of the paper's relative attention).",
        dict(
            attention="full",
            position="learned",
            max_len=512,
            layer="funnel",
            n_layers=6,
            funnel_blocks=3,
            norm_placement="post",
            norm="layernorm",
            ffn="gelu",
            causal=False,
        ),
    ),
}
