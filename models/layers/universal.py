"""Universal Transformer (Dehghani et al. 2019) with optional ACT halting (Graves 2016).

One block (``blocks[0]``, the configured norm placement and FFN) is applied ``n_layers`` times.
Before each step ``t`` the timing signal ``PE(position) + PE(t)`` (Vaswani sinusoids of the
token's absolute position and of the step) is added to the hidden states.

ACT (``cfg.act``), per token, as in the paper's batched implementation (tensor2tensor): a halting
unit ``p = sigmoid(w . s + b)`` (``b`` initialised to 1) reads the state ``s`` (timing signal
included); a token keeps running while its cumulative halting probability stays at or below
``act_threshold``; at the step it would cross it, it halts with weight equal to the remainder
``R = 1 - sum of its earlier p``, and at the last step every running token halts that way. The
output is updated as ``out = w_t * block(s_t) + (1 - w_t) * out`` with ``w_t = p`` while running,
``R`` at the halt and 0 after (tensor2tensor's ``ut_act``); all ``n_layers`` steps are computed for the whole batch
(halted tokens get weight 0 but still provide keys/values, as in the batched implementation). Ponder cost (Graves 2016):
``rho = N + R`` per token (``N`` the number of steps it took), ``ponder_weight * mean(rho)`` is
added to ``aux_loss`` as ``info.ponder_loss`` on the last step; gradients reach the halting
unit through ``R``.

Reported: ``act_halting (B, L)`` (cumulative halting probability) per step and
``act_steps (B, L)`` (``N``) on the last step; without ACT every token takes ``n_layers`` steps.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ..blocks import Block
from ..errors import ConfigError
from ..positions.absolute import sinusoid, table_dtype
from ..variant import Param, Variant
from .stack import block_params

ACT = Param("act", bool, False)
ACT_THRESHOLD = Param("act_threshold", float, 0.99)
PONDER_WEIGHT = Param("ponder_weight", float, 0.01)


class UniversalStack(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.n_steps, self.d = cfg.n_layers, cfg.d_model
        self.act, self.threshold, self.ponder_weight = cfg.act, cfg.act_threshold, cfg.ponder_weight
        self.blocks = nn.ModuleList([Block(cfg, 0)])  # the one shared block
        if cfg.act:
            self.halt = nn.Linear(cfg.d_model, 1, bias=False)
            self.halt_bias = nn.Parameter(torch.ones(()))  # tensor2tensor's act_halting_bias_init = 1

    @property
    def block(self):
        return self.blocks[0]

    def attention(self, index: int):
        return self.block.attn

    def _timing(self, ctx, t: int, x):
        step = torch.full_like(ctx.positions, t)
        dtype = table_dtype(x.dtype)
        signal = sinusoid(ctx.positions, self.d, dtype) + sinusoid(step, self.d, dtype)  # (L, d), broadcast over B
        return signal.to(device=x.device, dtype=x.dtype)

    def forward(self, x, ctx):
        if not self.act:
            for t in range(self.n_steps):
                x = self.block(x + self._timing(ctx, t, x), ctx, ctx.begin_layer(x))
            return x
        B, L, _ = x.shape
        halting = x.new_zeros(B, L)
        remainders = x.new_zeros(B, L)
        n_updates = x.new_zeros(B, L)
        state, out = x, torch.zeros_like(x)
        for t in range(self.n_steps):
            info = ctx.begin_layer(state)
            state = state + self._timing(ctx, t, state)
            p = torch.sigmoid(self.halt(state).squeeze(-1) + self.halt_bias)  # (B, L)
            running = (halting < 1.0).to(x.dtype)
            if t == self.n_steps - 1:  # the last step halts everyone still running
                new_halted, still = running, torch.zeros_like(running)
            else:
                new_halted = (halting + p * running > self.threshold).to(x.dtype) * running
                still = (halting + p * running <= self.threshold).to(x.dtype) * running
            halting = halting + p * still
            remainders = remainders + new_halted * (1 - halting)
            halting = halting + new_halted * remainders
            n_updates = n_updates + still + new_halted
            w = (p * still + new_halted * remainders).unsqueeze(-1)  # (B, L, 1)
            state = self.block(state, ctx, info)
            out = state * w + out * (1 - w)
            info.act_halting = halting.detach()
        info.act_steps = n_updates.detach()
        info.ponder_loss = self.ponder_weight * (n_updates + remainders).mean()
        return out


def check_universal(cfg):
    t = cfg.act_threshold
    if not (math.isfinite(t) and 0 < t < 1):
        raise ConfigError(
            "act_threshold",
            t,
            "a number in (0, 1): a token halts once its cumulative halting probability would pass it",
        )
    if not (math.isfinite(cfg.ponder_weight) and cfg.ponder_weight >= 0):
        raise ConfigError("ponder_weight", cfg.ponder_weight, "a finite number >= 0")


def universal_params(cfg, parts: dict) -> int:
    """One shared block (``stack.block_params``) plus the ACT halting unit ``w``, ``b``."""
    return block_params(parts) + (cfg.d_model + 1 if cfg.act else 0)


VARIANTS = (
    Variant(
        "universal",
        "Dehghani et al. 2019 (Universal Transformer); Graves 2016 (ACT)",
        "One shared block applied n_layers times with a position + step timing signal; optional ACT halting.",
        build=UniversalStack,
        params=(ACT, ACT_THRESHOLD, PONDER_WEIGHT),
        check=check_universal,
        n_params=universal_params,
    ),
)
