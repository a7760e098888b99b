"""Persistent memory tokens: ``tokens`` (Sukhbaatar et al. 2019, "Augmenting Self-attention with
Persistent Memory"; Burtsev et al. 2020, "Memory Transformer").

``n_memory`` learned memory vectors per layer are prepended to the keys/values. Every query sees
them under every pattern and in causal and bidirectional models; they are read-only (they attend
nothing), which in a causal model is what prepending learned tokens to the input amounts to (they
could only attend each other, so their states would not depend on the input). They carry nothing
between calls, so the input is not segmented. They sit at the positions just before the first token.
"""

from __future__ import annotations

import torch
from torch import nn

from ..capabilities import MemoryCaps
from ..variant import Param, Variant
from .base import Memory

N_MEMORY = Param("n_memory", int, 4, range=(1, 1024), cap=256)  # learned slots per layer


class TokenMemory(Memory):
    """``n_memory`` learned vectors per layer, prepended to that layer's keys/values."""

    segmented = False

    def __init__(self, cfg):
        super().__init__(cfg)
        # in the space of the attention input; N(0, 0.02) like the token embeddings
        self.tokens = nn.Parameter(torch.randn(cfg.n_layers, cfg.n_memory, cfg.d_model) * 0.02)

    def prefix(self, index, state, batch_size):
        return self.tokens[index].unsqueeze(0).expand(batch_size, -1, -1)  # (B, n_memory, d)

    def prefix_ids(self, index, state):
        return -(torch.arange(self.cfg.n_memory) + 1)


VARIANTS = (
    Variant(
        "tokens",
        "Sukhbaatar et al. 2019; Burtsev et al. 2020",
        "n_memory learned memory slots per layer that every position can attend.",
        build=TokenMemory,
        params=(N_MEMORY,),
        caps=MemoryCaps(prepends_keys=True),
        n_params=lambda c: c.n_layers * c.n_memory * c.d_model,
    ),
)
