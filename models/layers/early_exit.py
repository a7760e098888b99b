"""Early exit: Depth-adaptive Transformer (Elbayad et al. 2020) / CALM (Schuster et al. 2022).

After every layer the shared classifier (final norm + LM head, as in CALM) reads each token's
hidden state; its confidence is the top-1 softmax probability (CALM's "softmax response").
A token exits at the first layer ``n`` (1-based) whose confidence exceeds ``exit_threshold``
(strictly); tokens that never do exit at the last layer. An exited token's hidden state is frozen
and copied forward, so deeper layers (and later tokens attending to it) read that state, and its
logits are its exit layer's logits. The exit decision takes no gradient; the logits do, through
the layers up to the exit. ``exit_threshold = 1.0`` never exits early: the plain model.

Reported per layer: ``exit_confidence (B, L)`` and ``exited (B, L)`` (exited at or before it);
``out.layers[-1].exit_depth`` ``(B, L)`` in ``[1, n_layers]``.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ..blocks import Block
from ..errors import ConfigError
from ..variant import Param, Variant
from .stack import stack_params

EXIT_THRESHOLD = Param("exit_threshold", float, 0.9)


class EarlyExitStack(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.threshold = cfg.exit_threshold
        self.blocks = nn.ModuleList(Block(cfg, i) for i in range(cfg.n_layers))

    def attention(self, index: int):
        return self.blocks[index].attn

    def forward(self, x, ctx):
        B, L, _ = x.shape
        n = len(self.blocks)
        done = torch.zeros(B, L, dtype=torch.bool, device=x.device)
        depth = torch.full((B, L), n, dtype=torch.long, device=x.device)
        info = None
        for i, block in enumerate(self.blocks):
            info = ctx.begin_layer(x)
            x = torch.where(done[..., None], x, block(x, ctx, info))  # exited tokens stay frozen
            with torch.no_grad():
                conf = torch.softmax(ctx.classifier(x).float(), dim=-1).amax(dim=-1)  # (B, L)
            if i < n - 1:
                leave = ~done & (conf > self.threshold)
                depth = torch.where(leave, i + 1, depth)
                done = done | leave
            info.exit_confidence = conf
            info.exited = done.clone() if i < n - 1 else torch.ones_like(done)
        info.exit_depth = depth
        return x


def check_early_exit(cfg):
    t = cfg.exit_threshold
    if not (math.isfinite(t) and 0 < t <= 1):
        raise ConfigError("exit_threshold", t, "a number in (0, 1] (a top-1 probability; 1 never exits early)")


VARIANTS = (
    Variant(
        "early_exit",
        "Elbayad et al. 2020 (Depth-adaptive); Schuster et al. 2022 (CALM)",
        "The LM head reads every layer; a token stops at the first layer whose top-1 probability "
        "exceeds exit_threshold.",
        build=EarlyExitStack,
        params=(EXIT_THRESHOLD,),
        check=check_early_exit,
        n_params=stack_params,
    ),
)
