"""Learned attention sinks (OpenAI 2025, gpt-oss; ``ModelConfig.attn_sinks``).

One learned logit ``s_n`` per query head and layer joins the softmax's denominator and carries no
value (``kernels/reference.py``; transformers' ``GptOssAttention.sinks``, whose eager attention
concatenates ``s_n`` as one more score column, subtracts the row max, softmaxes and drops the column):

    p_ij = exp(a_ij - m_i) / (exp(s_n - m_i) + sum_j exp(a_ij - m_i)),   m_i = max(s_n, max_j a_ij)

so a row of the attention map sums to ``1 - p_sink_i < 1`` and a head can put its attention
"nowhere" instead of on the first tokens (StreamingLLM's sink tokens, ``n_sinks``). The logits live
on the self-attention sublayer (``attn.sinks``, shape ``[n_heads]``, initialised to 0; gpt-oss draws
them from N(0, std): the initialisation is ours) and reach the core as the ``sinks`` modifier of
``kernels.attention``, so only mechanisms whose softmax runs there accept them (their
``AttentionCaps`` list ``LEARNED_SINK``); the others are refused by name with their reason.
"""

from __future__ import annotations

import torch
from torch import nn


def sink_params(cfg) -> int:
    """Parameters the sinks add to one self-attention sublayer."""
    return cfg.n_heads if cfg.attn_sinks else 0


def make_sinks(cfg) -> nn.Parameter | None:
    """The ``[n_heads]`` sink logits of one layer, or None without ``attn_sinks``."""
    return nn.Parameter(torch.zeros(cfg.n_heads)) if cfg.attn_sinks else None


def sink_mass(probs: torch.Tensor) -> torch.Tensor:
    """``probs [..., Lk]`` of a sink model -> the learned sink's share of each row, ``1 - sum_j p_ij``
    (exact: the sink and the keys share one softmax; a row with no allowed key gives the sink 1)."""
    return (1.0 - probs.sum(-1)).clamp_min(0.0)
