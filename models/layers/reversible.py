"""Reversible layers: RevNet (Gomez et al. 2017) as used by the Reformer (Kitaev et al. 2020).

Two streams start as copies of the input, ``X1 = X2 = x`` (the Reformer duplicates the
embedding rather than splitting it, so each sublayer keeps width ``d``). Each layer computes::

    Y1 = X1 + F(X2)      F = the attention sublayer with its norm placement, e.g. Attn(Norm(.))
    Y2 = X2 + G(Y1)      G = the FFN sublayer likewise (G = 0 with ffn="none")

and the stack returns ``(Y1 + Y2) / 2`` (the Reformer concatenates and projects; the mean keeps
width ``d`` without a new parameter). The whole stack is one ``torch.autograd.Function``: its
forward runs without building a graph and saves only the last layer's ``(Y1, Y2)``; backward
walks the layers from the top, reconstructs ``X2 = Y2 - G(Y1)`` and ``X1 = Y1 - F(X2)`` while
recomputing each sublayer with gradients, so activation memory does not grow with depth. Dropout
is replayed by restoring the state of the model's random source (``models.dropout``) recorded before each
sublayer.

Inversion needs residuals that *add* a function of the stream: ``pre`` (``x + F(Norm(x))``),
``sandwich``, ``rezero`` and ``none``; ``post`` (``Norm(x + F(x))``) cannot be inverted and is
rejected. The ``LayerInfo.input`` of a layer is ``(X1 + X2) / 2``. Auxiliary losses of the sublayers
(e.g. MoE balance) are recomputed with gradients in backward and reported as ``info.loss_total``.
"""

from __future__ import annotations

from contextlib import contextmanager

import torch
from torch import nn

from ..blocks import Block
from ..context import LayerInfo, layer_loss
from ..dropout import random_sources
from ..errors import ConfigError
from ..variant import Variant
from .stack import stack_params

# the residual branch of each additive placement: y = x + branch(res, fn, x)
_BRANCH = {
    "pre": lambda res, fn, x: res.drop(fn(res.norm(x))),
    "sandwich": lambda res, fn, x: res.drop(res.norm_out(fn(res.norm_in(x)))),
    "res_post": lambda res, fn, x: res.drop(res.norm(fn(x))),
    "rezero": lambda res, fn, x: res.alpha * res.drop(fn(x)),
    "none": lambda res, fn, x: res.drop(fn(x)),
}


def check_reversible(cfg):
    if cfg.norm_placement not in _BRANCH:
        raise ConfigError(
            "norm_placement",
            cfg.norm_placement,
            f"one of {list(_BRANCH)} with layer='reversible': reconstructing a layer's input from its output "
            "needs residuals of the form y = x + F(x); post-norm's Norm(x + F(x)) cannot be inverted",
        )


def _rng_state(sources: list) -> list:
    """The state of the random sources the stack's dropouts draw from (``models.dropout``)."""
    return [source.state() for source in sources]


@contextmanager
def _replay(states: list, sources: list):
    """Recompute with the sources as they were in the forward pass, then put them back: the recomputed
    dropout masks equal the first ones, and later draws continue where the forward left off."""
    now = _rng_state(sources)
    for source, state in zip(sources, states):
        source.set_state(state)
    try:
        yield
    finally:
        for source, state in zip(sources, now):
            source.set_state(state)


class ReversibleStack(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.blocks = nn.ModuleList(Block(cfg, i) for i in range(cfg.n_layers))
        self.branch = _BRANCH[cfg.norm_placement]

    def attention(self, index: int):
        return self.blocks[index].attn

    def f(self, block, x, ctx, info):
        return self.branch(block.res_attn, lambda h: block.attn(h, ctx, info), x)

    def g(self, block, x, ctx, info):
        if block.ffn is None:
            return None
        return self.branch(block.res_ffn, lambda h: block._ffn(h, ctx, info), x)

    def forward(self, x, ctx):
        params, seen = [], set()
        for module in (self, ctx.position, ctx.memory):
            for p in module.parameters() if module is not None else ():
                if p.requires_grad and id(p) not in seen:
                    seen.add(id(p))
                    params.append(p)
        first = len(ctx.layers)
        has_loss = []
        out, losses = _Reversible.apply(x, self, ctx, has_loss, *params)
        for n, flag in enumerate(has_loss):
            if flag:
                ctx.layers[first + n].loss_total = losses[n]
        return out


class _Reversible(torch.autograd.Function):
    @staticmethod
    def forward(fctx, x, stack, ctx, has_loss, *params):
        x1 = x2 = x
        rng, losses = [], []
        sources = random_sources(stack)
        for block in stack.blocks:
            info = ctx.begin_layer((x1 + x2) / 2)
            s_f = _rng_state(sources)
            y1 = x1 + stack.f(block, x2, ctx, info)
            s_g = _rng_state(sources)
            g = stack.g(block, y1, ctx, info)
            y2 = x2 if g is None else x2 + g
            rng.append((s_f, s_g))
            loss = layer_loss(info)
            has_loss.append(loss is not None)
            losses.append(x.new_zeros(()) if loss is None else loss.detach().to(x.dtype))
            x1, x2 = y1, y2
        fctx.save_for_backward(x1, x2)
        fctx.stack, fctx.ctx, fctx.rng, fctx.params, fctx.sources = stack, ctx, rng, params, sources
        return (x1 + x2) / 2, torch.stack(losses)

    @staticmethod
    def backward(fctx, g_out, g_losses):
        y1, y2 = fctx.saved_tensors
        stack, ctx, params = fctx.stack, fctx.ctx, fctx.params
        gy1 = gy2 = g_out / 2
        grads = [None] * len(params)

        def backprop(outputs, grad_outputs, wrt):
            pairs = [(o, g) for o, g in zip(outputs, grad_outputs) if o is not None and o.requires_grad]
            got = torch.autograd.grad([o for o, _ in pairs], [wrt, *params], [g for _, g in pairs], allow_unused=True)
            for n, gp in enumerate(got[1:]):
                if gp is not None:
                    grads[n] = gp if grads[n] is None else grads[n] + gp
            return got[0] if got[0] is not None else torch.zeros_like(wrt)

        for i in reversed(range(len(stack.blocks))):
            block = stack.blocks[i]
            s_f, s_g = fctx.rng[i]
            with torch.enable_grad():
                x2 = y2
                if block.ffn is not None:
                    y1d = y1.detach().requires_grad_(True)
                    info = LayerInfo(index=i)
                    with _replay(s_g, fctx.sources):
                        g = stack.g(block, y1d, ctx, info)
                    loss = info.ffn_loss
                    gy1 = gy1 + backprop([g, loss], [gy2, g_losses[i]], y1d)
                    x2 = y2 - g.detach()
                x2d = x2.detach().requires_grad_(True)
                info = LayerInfo(index=i)
                with _replay(s_f, fctx.sources):
                    f = stack.f(block, x2d, ctx, info)
                gx2 = gy2 + backprop([f, info.loss], [gy1, g_losses[i]], x2d)
                x1 = y1 - f.detach()
            y1, y2, gy2 = x1, x2, gx2  # gy1 (dL/dX1) is unchanged: X1 enters Y1 additively
        return (gy1 + gy2, None, None, None, *grads)


VARIANTS = (
    Variant(
        "reversible",
        "Gomez et al. 2017 (RevNet); Kitaev et al. 2020 (Reformer)",
        "Two residual streams; each layer's input is recomputed from its output in backward, so "
        "activation memory does not grow with depth.",
        build=ReversibleStack,
        params=("norm_placement", "dropout"),
        check=check_reversible,
        n_params=stack_params,
    ),
)
