"""Funnel-Transformer (Dai et al. 2020, "Funnel-Transformer: Filtering out Sequential Redundancy for
Efficient Language Processing").

The ``n_layers`` layers are split into ``funnel_blocks`` equal blocks. Between blocks the hidden
sequence is mean-pooled with window 2 and stride 2 (an odd last token is its own group), so block
``k`` (0-based) runs on ``ceil(L / 2^k)`` positions. The first layer of every pooled block is the
paper's pool-query-only attention: queries from the pooled sequence, keys and values from the
unpooled one, the residual stream continuing from the pooled sequence::

    x' = Pool(x);   x' = Res(x', h -> Attn(q = h, kv = T(x)))      T: the placement's input transform

(post-norm gives the paper's ``LayerNorm(x' + Attn(x', x))``). For token outputs the last block's
sequence is upsampled by repetition to length ``L`` and the first block's output is added (the
decoder's residual connection), then the final norm and LM head as usual. With one block there is
no pooling and no decoder: the standard model.

Causal models, without leaking the future: a pooled position stands for its group of tokens and
is placed at the group's *last* token. Pool-query attention lets pooled query ``p`` read keys
``j <= 2p + 1`` (the tokens of its own group and before), pooled self-attention is causal, and the
upsampling is shifted: token ``i`` reads the last pooled group that ends at or before ``i``,
``floor((i + 1) / S) - 1`` with ``S = 2^(funnel_blocks - 1)``, and nothing (zero) when no group has
ended yet, exactly as in the Hourglass transformer's shifted upsampling (Nawrot et al. 2021). The
token's own information reaches its output through the first block's residual.

Positions: absolute encodings are added to the embeddings (and pooled with them); a rotary one
(``rope``) rotates each layer at its own resolution, positions ``0 .. n - 1``, and in a pool-query
layer places pooled query ``p`` at its group's last token ``min(2p + 1, n - 1)`` of the key grid.
Limits (refused by the check with the reason): no score-bias / relative-vector encodings (they
assume queries that are the last keys, which pooled queries are not); attention is ``full`` (the paper's); no memory
(segment lengths change with depth); no token-routed FFN (``hash``: pooled positions have no token id). Records: one
``LayerInfo`` per layer; a pooled layer's ``input`` and attention map are at its own resolution (pool-query maps are
``(B, h, ceil(n / 2), n)``).
"""

from __future__ import annotations

from functools import lru_cache

import torch
from torch import nn

import kernels

from ..blocks import Block
from ..capabilities import ROTARY
from ..errors import ConfigError
from ..ffn import FFN
from ..output_gate import gate_heads
from ..positions import POSITION
from ..variant import Param, Variant
from .feedback import sublayer_input
from .stack import stack_params

FUNNEL_BLOCKS = Param("funnel_blocks", int, 2, range=(1, 512), cap=12)  # a divisor of n_layers: in the check

KERNEL_BLOCK = 64


def mean_pool(x):
    """``(B, n, d) -> (B, ceil(n / 2), d)``: mean of tokens ``2p, 2p + 1`` (an odd last one alone)."""
    if x.shape[1] % 2:
        x = torch.cat([x, x[:, -1:]], dim=1)  # the lone last token averages with itself
    B, n, d = x.shape
    return x.view(B, n // 2, 2, d).mean(dim=2)  # (B, n / 2, 2, d) -> (B, n / 2, d)


def upsample(x, length: int, factor: int, causal: bool):
    """``(B, n, d) -> (B, length, d)`` by repetition; causal: shifted to the last group ended by ``i``."""
    i = torch.arange(length, device=x.device)
    if not causal:
        return x[:, i // factor]
    src = (i + 1) // factor - 1  # (length,): the last pooled group whose tokens are all <= i
    out = x[:, src.clamp(min=0)]
    return out * (src >= 0).to(x.dtype)[None, :, None]


def pool_query_mask(lq: int, lk: int, device=None):
    """``[lq, lk]`` causal pool-query pattern: pooled query ``p`` (tokens ``2p, 2p+1``) sees ``j <= 2p+1``."""
    p = torch.arange(lq, device=device)[:, None]
    return torch.arange(lk, device=device)[None, :] <= 2 * p + 1


@lru_cache(maxsize=16)
def pool_query_block_mask(lq: int, lk: int) -> kernels.BlockMask:
    """The memoised ``BlockMask`` of ``pool_query_mask(lq, lk)``, built on the CPU a band of rows at a
    time; ``.to(device)`` keeps one copy per device with its execution plans. So a forward builds no
    layout, runs no host sync for it and plans nothing after the first call at a length."""

    def rows(start: int, stop: int):  # (stop - start, lk) bool
        p = torch.arange(start, stop)[:, None]
        return torch.arange(lk)[None, :] <= 2 * p + 1

    return kernels.block_mask_from_rows(rows, int(lq), int(lk), KERNEL_BLOCK, torch.device("cpu"))


def pool_query_attention(attn, xq, xkv, causal: bool, ctx, info):
    """The ``Attention`` module's projections with queries ``xq (B, n', d)`` and keys/values ``xkv (B, n, d)``."""
    cfg = attn.cfg
    B, lq, _ = xq.shape
    lk = xkv.shape[1]
    h, dh = attn.n_heads, attn.d_head
    q, k, v = attn.project(xq, xkv)  # (B, h, n', d_h), (B, h_kv, n, d_h) twice
    # a rotary encoding sees pooled query p at its group's last token: spread the queries onto the key
    # grid (rows min(2p + 1, n - 1)), let the encoding rotate that grid, and gather them back
    rows = (2 * torch.arange(lq, device=xq.device) + 1).clamp(max=lk - 1)  # (n',)
    grid = q.new_zeros(B, h, lk, dh).index_copy(2, rows, q)  # (B, h, n, d_h)
    grid, k, mods = ctx.position.modify(grid, k, attn.layer, k_start=ctx.k_start, scale=dh**-0.5)
    if mods:  # the check admits only encodings without score modifiers; never drop one silently
        raise ConfigError(
            "position", cfg.position, f"an encoding without score modifiers with layer='funnel' (got {sorted(mods)})"
        )
    q = grid.index_select(2, rows)  # (B, h, n', d_h)
    sinks = attn.sink_mods()  # the layer's learned sinks (models/sinks.py), as in Attention.forward
    if ctx.need_weights:
        mask = pool_query_mask(lq, lk, xq.device) if causal else None
        out, probs = kernels.attention_ref(q, k, v, mask=mask, softcap=cfg.softcap, **sinks)
        info.attention = probs  # (B, h, n', n)
    else:  # block-sparse on the exact pattern (partial tiles keep their element mask)
        bm = pool_query_block_mask(lq, lk).to(xq.device) if causal else None
        out = kernels.attention(q, k, v, block_mask=bm, softcap=cfg.softcap, **sinks)
    out = gate_heads(attn.gate_proj, xq, out)  # the output gate reads the queries' input, as in Attention
    return attn.merge(out)  # (B, n', d)


class FunnelStack(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.causal = bool(cfg.causal)
        self.n_blocks = cfg.funnel_blocks
        self.per_block = cfg.n_layers // cfg.funnel_blocks
        self.blocks = nn.ModuleList(Block(cfg, i) for i in range(cfg.n_layers))

    def attention(self, index: int):
        return self.blocks[index].attn

    def forward(self, x, ctx):
        L = x.shape[1]
        first = None
        for n, block in enumerate(self.blocks):
            if n % self.per_block == 0 and n > 0:  # first layer of a pooled block: pool-query attention
                pooled = mean_pool(x)
                info = ctx.begin_layer(pooled)
                kv = sublayer_input(block.res_attn, x)
                x = block.res_attn(pooled, lambda h: pool_query_attention(block.attn, h, kv, self.causal, ctx, info))
                if block.ffn is not None:
                    x = block.res_ffn(x, lambda h: block._ffn(h, ctx, info))
            else:
                x = block(x, ctx, ctx.begin_layer(x))
            if n == self.per_block - 1:
                first = x  # the first block's output: the decoder's residual
        if self.n_blocks == 1:
            return x
        return first + upsample(x, L, 2 ** (self.n_blocks - 1), self.causal)  # (B, L, d)


def check_funnel(cfg):
    positions = POSITION
    if cfg.funnel_blocks > cfg.n_layers or cfg.n_layers % cfg.funnel_blocks:
        divisors = [b for b in range(1, cfg.n_layers + 1) if cfg.n_layers % b == 0]
        raise ConfigError(
            "funnel_blocks",
            cfg.funnel_blocks,
            f"a divisor of n_layers={cfg.n_layers}: {divisors} (the layers split in equal blocks)",
        )
    if not positions[cfg.position].caps.produces <= {ROTARY}:
        ok = [k for k, v in positions.items() if v.caps.produces <= {ROTARY}]
        raise ConfigError(
            "position",
            cfg.position,
            f"one of {ok} with layer='funnel': a pool-query layer has pooled queries and unpooled "
            "keys; rotations place each pooled query at its group's last token, but a score "
            "bias or relative vectors assume queries that are the last keys",
        )
    if cfg.attention != "full":
        raise ConfigError(
            "attention",
            cfg.attention,
            "'full' with layer='funnel' (the paper's attention; a pattern's window has no meaning across resolutions)",
        )
    if cfg.memory != "none":
        raise ConfigError(
            "memory",
            cfg.memory,
            "'none' with layer='funnel': the sequence length changes with "
            "depth, so no per-layer memory of a fixed length fits",
        )
    if cfg.ffn == "hash":
        raise ConfigError(
            "ffn",
            cfg.ffn,
            f"one of {[k for k in FFN if k != 'hash']} with layer='funnel': "
            "hash routing reads token ids, which pooled positions do not have",
        )


VARIANTS = (
    Variant(
        "funnel",
        "Dai et al. 2020 (Funnel-Transformer)",
        "Equal blocks of layers with the sequence mean-pooled by 2 between them (pooled queries read the "
        "unpooled keys); tokens get the upsampled last block plus the first block's output.",
        build=FunnelStack,
        params=(FUNNEL_BLOCKS,),
        check=check_funnel,
        n_params=stack_params,
    ),
)
