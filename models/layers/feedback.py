"""Feedback Transformer (Fan et al. 2020, "Addressing Some Limitations of Transformers with
Feedback Memory").

A standard stack processes a whole sequence layer by layer, so a lower layer can never read what
an upper layer computed at an earlier position. The Feedback Transformer processes tokens one
step at a time and merges all layers' states of a step into one memory vector::

    m_t = sum_{l=0..N} softmax(w)_l x_t^l          x_t^0: the embedding, x_t^l: layer l's output

with ``w`` (``N + 1`` scalars) learned, initialised to 0 (a plain mean). At step ``t`` every layer
``l`` attends to ``[m_0 .. m_(t-1), x_t^(l-1)]``: the memory of all earlier steps and its own input
at ``t``; keys and values are that layer's own projections of those vectors. So the bottom layer at
step ``t`` sees the top layer's representations of steps ``< t``. Causal only, by construction.

Convention: the memory enters a layer's attention through the same input transform as the
layer's own state (whatever the norm placement hands its sublayer: ``Norm(m)`` for pre-norm,
``m`` for post-norm / ReZero), so keys from memory and from the current step are alike, as for
the Transformer-XL memory. Each step runs the ordinary blocks (attention with the memory as a
prefix, then the FFN) on a one-token segment; position encodings see key positions ``0..t`` and
query position ``t``.

Cost and cap: ``L`` steps of ``n_layers`` sublayer calls each, and each step's keys are kept for
backward, so activation memory grows like ``L^2 * d_model * n_layers`` instead of ``L``. The
check therefore caps ``max_len`` at ``FEEDBACK_MAX_LEN`` = 256 and a call longer than ``max_len``
is refused. Records: one ``LayerInfo`` per layer, the steps merged as memory segments are
(``models.memory.view.merge_segments``: rows of the attention map ``(B, h, L, L)``, per-token fields
concatenated, auxiliary losses averaged over steps); each also carries ``layer_mix``, the weights
``softmax(w)`` the memory merges the layers with.
"""

from __future__ import annotations

import torch
from torch import nn

from ..blocks import Block
from ..context import ForwardContext
from ..errors import ConfigError
from ..memory.view import merge_segments
from ..variant import Variant
from .stack import stack_params

FEEDBACK_MAX_LEN = 256


class _FeedbackMemory:
    """The per-call memory the attention sublayers read (the ``ctx.memory`` protocol): layer ``l``'s
    prefix is its input transform of ``m_0 .. m_(t-1)``. Lives for one forward call only."""

    records_input = False

    def __init__(self, n_layers: int):
        self.slots = [[] for _ in range(n_layers)]  # per layer: (B, 1, d) transformed memory vectors

    def prefix(self, index, state, batch_size):
        slots = self.slots[index]
        return torch.cat(slots, dim=1) if slots else None  # (B, t, d)

    def hook(self, index):
        return None


def sublayer_input(res, x):
    """What the residual wrapper ``res`` hands its sublayer for the stream ``x`` (e.g. ``Norm(x)``)."""
    seen = []
    res(x, lambda h: seen.append(h) or torch.zeros_like(h))
    return seen[0]


class FeedbackStack(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.max_len = cfg.max_len
        self.blocks = nn.ModuleList(Block(cfg, i) for i in range(cfg.n_layers))
        self.mix = nn.Parameter(torch.zeros(cfg.n_layers + 1))  # w: softmax weights over x^0 .. x^N

    def attention(self, index: int):
        return self.blocks[index].attn

    def forward(self, x, ctx):
        B, L, _ = x.shape
        if L > self.max_len:
            raise ConfigError(
                "tokens",
                f"length {L}",
                f"at most max_len={self.max_len} tokens with layer='feedback' (one sequential step per token)",
            )
        memory = _FeedbackMemory(len(self.blocks))
        weights = torch.softmax(self.mix, dim=0)
        outputs, steps = [], []
        for t in range(L):
            step = ForwardContext(
                tokens=ctx.tokens[:, t : t + 1],
                position=ctx.position,
                need_weights=ctx.need_weights,
                k_start=ctx.k_start + t,
                memory=memory,
                positions=ctx.positions[t : t + 1],
                classifier=ctx.classifier,
            )
            h = x[:, t : t + 1]  # (B, 1, d)
            m = weights[0] * h
            for block in self.blocks:
                info = step.begin_layer(h)
                h = block(h, step, info)
                info.key_ids = torch.arange(t + 1)  # memory of steps 0..t-1, then step t itself
                m = m + weights[info.index + 1] * h
            for n, block in enumerate(self.blocks):
                memory.slots[n].append(sublayer_input(block.res_attn, m))
            outputs.append(h)
            steps.append(step.layers)
        merged = merge_segments(steps, [1] * L)
        for info in merged:
            info.layer_mix = weights.detach()  # (n_layers + 1,) the memory's weights, for display
        ctx.layers.extend(merged)
        return torch.cat(outputs, dim=1)  # (B, L, d)


def check_feedback(cfg):
    if not cfg.causal:
        raise ConfigError(
            "causal",
            cfg.causal,
            "True with layer='feedback': each step reads the memory of "
            "earlier steps, so the model is causal by construction",
        )
    if cfg.attention != "full":
        raise ConfigError(
            "attention",
            cfg.attention,
            "'full' with layer='feedback': each step is one query "
            "attending to the whole memory of earlier steps; a "
            "pattern over the one-token step would be ignored",
        )
    if cfg.memory != "none":
        raise ConfigError(
            "memory", cfg.memory, "'none' with layer='feedback': the feedback memory is the structure's own memory"
        )
    if cfg.max_len > FEEDBACK_MAX_LEN:
        raise ConfigError(
            "max_len",
            cfg.max_len,
            f"an integer <= {FEEDBACK_MAX_LEN} with layer='feedback': tokens run one sequential "
            "step at a time and every step's keys are kept for backward, so time grows with L and "
            "activation memory with L^2",
        )


def feedback_params(cfg, parts: dict) -> int:
    """The standard blocks plus the ``n_layers + 1`` memory weights."""
    return stack_params(cfg, parts) + cfg.n_layers + 1


VARIANTS = (
    Variant(
        "feedback",
        "Fan et al. 2020 (Feedback Transformer)",
        "Tokens run one step at a time; every layer attends to a memory of earlier steps, each step's "
        "memory a learned softmax-weighted sum of all layers' states.",
        build=FeedbackStack,
        params=("max_len",),
        check=check_feedback,
        n_params=feedback_params,
    ),
)
