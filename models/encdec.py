"""Encoder-decoder assembly (Vaswani et al. 2017, "Attention Is All You Need", section 3.1).

``src -> embed + encoder positions -> encoder stack -> (final norm) = source memory``;
``tgt -> embed + decoder positions -> decoder stack -> (final norm) -> LM head``, where every
decoder layer is causal self-attention, cross-attention over the source memory, then the FFN,
each inside the chosen norm placement (post: ``x = Norm(x + F(x))``, pre: ``x = x + F(Norm(x))``).

- The token embedding is shared by source and target (one byte vocabulary, as the paper shares
  it); each stack has its own position module built from its own config, so ``learned`` gives
  two tables (BART) and ``t5`` a bidirectional bias table for the encoder and a causal one for the
  decoder, each shared by the layers of its stack (T5).
- The chosen attention runs both self-attention stacks (the encoder with ``causal=False``).
- Cross-attention is full softmax attention over the source; it honours no position encoding
  (relative positions between a target and a source token are not defined) and ``softcap`` only.
- ``src_mask [B, Ls]`` (True = real token): padding receives no attention, neither in the
  encoder's self-attention nor in cross-attention. Both then run the dense masked reference
  (``kernels.attention_ref``): the kernels take one pattern for the whole batch, padding differs
  per sequence. In the encoder this needs a softmax pattern attention (section 1).

The module imports neither the config nor ``models.model``; ``models.model.EncoderDecoderModel``
wraps :meth:`EncoderDecoder.run`'s fields in a ``ModelOutput``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

import kernels

from .architectures import ARCHITECTURE, decoder_config, encoder_config
from .attention import PATTERNS, pattern_mask
from .blocks import Block
from .context import ForwardContext, LayerInfo, layer_loss
from .dropout import Dropout
from .errors import ConfigError
from .layers import LAYER
from .layers.stack import BlockStack, init_weights
from .layers.standard import StandardStack
from .norms import NORM, NORM_PLACEMENT
from .positions import POSITION
from .qkv import QKVProjection
from .schedule import kind_configs


@dataclass
class StackContext(ForwardContext):
    """The forward context of one stack of an encoder-decoder."""

    stack_cfg: Any = None  # the config the stack was built from
    key_mask: torch.Tensor | None = None  # (B, L) True = real token: padding of the stack's own keys
    source: torch.Tensor | None = None  # (B, Ls, d) encoder output, read by cross-attention
    source_mask: torch.Tensor | None = None  # (B, Ls) True = real source token

    def attention_hook(self, index: int):
        return None if self.key_mask is None else self._padded_core

    def _padded_core(self, core, q, k, v, mods, ctx, q_raw=None, k_raw=None, info=None):
        """The stack's pattern AND the key padding, as the dense masked reference (exact softmax)."""
        cfg, L = core.cfg, q.shape[2]  # the layer's own config (a layer schedule's kind, else the stack's)
        allowed = pattern_mask(cfg, L).to(q.device)  # (L, L)
        mask = allowed & self.key_mask[:, None, None, :]  # (B, 1, L, L): padding keys never attended
        out, probs = kernels.attention_ref(q, k, v, causal=cfg.causal, mask=mask, softcap=cfg.softcap, **mods)
        return out, (probs if ctx.need_weights else None), {}


class CrossAttention(QKVProjection):
    """Queries from the decoder, keys / values from the source memory (``n_kv_heads`` K/V heads)."""

    def __init__(self, cfg, layer: int = 0):
        super().__init__(cfg)
        self.cfg, self.layer = cfg, layer

    def forward(self, x, ctx: StackContext, info: LayerInfo):
        cfg = self.cfg
        Lt = x.shape[1]
        q, k, v = self.project(x, ctx.source)  # (B, h, Lt, d_h), (B, h_kv, Ls, d_h) twice
        if ctx.need_weights or ctx.source_mask is not None:
            mask = None if ctx.source_mask is None else ctx.source_mask[:, None, None, :]  # (B, 1, 1, Ls)
            out, probs = kernels.attention_ref(q, k, v, causal=False, mask=mask, softcap=cfg.softcap)
            info.cross_attention = probs if ctx.need_weights else None
        else:
            # the kernels take queries as the last Lq of the keys (Lq <= Lk); without a causal mask or
            # relative terms every query is independent, so longer targets run in chunks of Ls queries
            ls = k.shape[2]
            if Lt <= ls:
                out = kernels.attention(q, k, v, causal=False, softcap=cfg.softcap)  # (B, h, Lt, d_h)
            else:
                out = torch.cat(
                    [
                        kernels.attention(q[:, :, i : i + ls].contiguous(), k, v, causal=False, softcap=cfg.softcap)
                        for i in range(0, Lt, ls)
                    ],
                    dim=2,
                )  # (B, h, Lt, d_h)
        if ctx.interventions is not None:  # cached / replaced cross-attention head results (models/interventions.py)
            out = ctx.interventions.at_cross(self, out, info)
        return self.merge(out)


class DecoderBlock(Block):
    """``Residual(self-attention) -> Residual(cross-attention) -> Residual(FFN)``."""

    def __init__(self, cfg, layer: int):
        super().__init__(cfg, layer)
        self.cross = CrossAttention(cfg, layer)
        self.res_cross = NORM_PLACEMENT[cfg.norm_placement].build(cfg, lambda: NORM[cfg.norm].build(cfg.d_model, cfg))

    def forward(self, x, ctx, info: LayerInfo):
        x = self.res_attn(x, lambda h: self.attn(h, ctx, info))
        x = self.res_cross(x, lambda h: self.cross(h, ctx, info))
        if self.ffn is not None:
            x = self.res_ffn(x, lambda h: self._ffn(h, ctx, info))
        return x


class DecoderStack(StandardStack):
    """``n_layers`` decoder blocks (the standard layer structure with a cross-attention sublayer; its
    ``forward`` applies an ``Interventions`` record as the standard stack does)."""

    def __init__(self, cfg):
        BlockStack.__init__(self, (DecoderBlock(cfg, i) for i in range(cfg.n_layers)))


def _embed_norm(cfg) -> nn.Module:
    """Each stack's norm of its summed embeddings (BART's ``layernorm_embedding``) when ``cfg.embed_norm``."""
    return NORM[cfg.norm].build(cfg.d_model, cfg) if cfg.embed_norm else nn.Identity()


def _final_norm(cfg) -> nn.Module:
    final = NORM_PLACEMENT[cfg.norm_placement].build.final_norm
    return NORM[cfg.norm].build(cfg.d_model, cfg) if final else nn.Identity()


class EncoderDecoder(nn.Module):
    """Shared embedding, encoder (positions, stack, final norm), decoder (same + cross-attention), head."""

    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.enc_cfg, self.dec_cfg = encoder_config(cfg), decoder_config(cfg)
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.drop = Dropout(cfg.dropout)
        self.enc_position = POSITION[cfg.position].build(self.enc_cfg)
        self.enc_embed_norm = _embed_norm(self.enc_cfg)
        self.encoder = LAYER[cfg.layer].build(self.enc_cfg)
        self.enc_norm = _final_norm(self.enc_cfg)
        self.dec_position = POSITION[cfg.position].build(self.dec_cfg)
        self.dec_embed_norm = _embed_norm(self.dec_cfg)
        self.decoder = DecoderStack(self.dec_cfg)
        self.dec_norm = _final_norm(self.dec_cfg)
        self.head = ARCHITECTURE[cfg.architecture].build(cfg)
        init_weights(self, self.embed)  # Xavier projections, N(0, 0.02) embedding

    def stack_parts(self) -> dict:
        """``{stack name: (layers, modules)}``: each stack's depth and the modules only it owns
        (positions, layers, final norm; the shared embedding and the head belong to neither)."""
        return {
            "encoder": (
                len(self.encoder.blocks),
                [self.enc_position, self.enc_embed_norm, self.encoder, self.enc_norm],
            ),
            "decoder": (
                len(self.decoder.blocks),
                [self.dec_position, self.dec_embed_norm, self.decoder, self.dec_norm],
            ),
        }

    def classify(self, x):
        """Decoder final norm + LM head."""
        return self.head(self.dec_norm(x))

    def _check_tokens(self, name, tokens):
        if not isinstance(tokens, torch.Tensor) or tokens.dim() != 2 or tokens.dtype not in (torch.long, torch.int32):
            raise ConfigError(
                name, getattr(tokens, "shape", type(tokens).__name__), "a LongTensor of shape [batch, length]"
            )
        if tokens.shape[1] == 0:
            raise ConfigError(name, "length 0", "at least one token")
        lo, hi = int(tokens.min()), int(tokens.max())
        if lo < 0 or hi >= self.cfg.vocab_size:
            raise ConfigError(name, f"ids in [{lo}, {hi}]", f"integer ids in [0, {self.cfg.vocab_size - 1}]")

    def _check_mask(self, src, src_mask):
        """``None`` when there is no padding; else the Bool mask, checked against the encoder's attention."""
        if src_mask is None:
            return None
        if not isinstance(src_mask, torch.Tensor) or src_mask.dtype != torch.bool or src_mask.shape != src.shape:
            raise ConfigError(
                "src_mask",
                getattr(src_mask, "shape", type(src_mask).__name__),
                f"None or a BoolTensor of the source's shape {tuple(src.shape)} (True = real token)",
            )
        if bool(src_mask.all()):
            return None
        if any(c.attention not in PATTERNS for c in kind_configs(self.cfg)):  # every layer kind of a schedule
            raise ConfigError(
                "src_mask",
                "with padding",
                f"None (or all True) with attention={self.cfg.attention!r}: padding is kept out of the "
                f"encoder by a per-sequence key mask, which only the softmax pattern attentions "
                f"({', '.join(PATTERNS)}) take; {self.cfg.attention} mixes keys before any "
                "score is formed. Batch sources of equal length instead",
            )
        return src_mask.to(src.device)

    def run(self, src, tgt=None, src_mask=None, return_attention: bool = False, interventions=None) -> dict:
        """The ``ModelOutput`` fields for source ``src [B, Ls]`` and target ``tgt [B, Lt]``; ``interventions``
        (``models.interventions.Interventions``: the decoder's points, ``.encoder`` the encoder's) caches or
        replaces head, cross-attention head, FFN and residual activations."""
        if tgt is None:
            raise ConfigError(
                "tgt",
                None,
                "a target LongTensor [batch, length]: an encoder-decoder is called as "
                "model(src, tgt, src_mask=None) (source and target)",
            )
        self._check_tokens("src", src)
        self._check_tokens("tgt", tgt)
        if src.shape[0] != tgt.shape[0]:
            raise ConfigError("tgt", tuple(tgt.shape), f"the source's batch size {src.shape[0]}")
        mask = self._check_mask(src, src_mask)
        src, tgt = src.long(), tgt.long()
        (B, Ls), Lt = src.shape, tgt.shape[1]
        if interventions is not None:
            interventions.check(self.cfg, B, Lt, source_length=Ls)
        dev = src.device
        enc_ctx = StackContext(
            tokens=src,
            position=self.enc_position,
            need_weights=return_attention,
            positions=torch.arange(Ls, device=dev),
            stack_cfg=self.enc_cfg,
            key_mask=mask,
            interventions=None if interventions is None else interventions.for_encoder(),
        )
        x = self.enc_embed_norm(self.enc_position.embed(self.embed(src), torch.arange(Ls, device=dev)))  # (B, Ls, d)
        memory = self.enc_norm(self.encoder(self.drop(x), enc_ctx))  # (B, Ls, d)
        dec_ctx = StackContext(
            tokens=tgt,
            position=self.dec_position,
            need_weights=return_attention,
            positions=torch.arange(Lt, device=dev),
            classifier=self.classify,
            stack_cfg=self.dec_cfg,
            source=memory,
            source_mask=mask,
            interventions=interventions,
        )
        y = self.dec_embed_norm(self.dec_position.embed(self.embed(tgt), torch.arange(Lt, device=dev)))  # (B, Lt, d)
        logits = self.classify(self.decoder(self.drop(y), dec_ctx))  # (B, Lt, vocab)
        for info in enc_ctx.layers:
            info.stack = "encoder"
        for info in dec_ctx.layers:
            info.stack = "decoder"
        layers = enc_ctx.layers + dec_ctx.layers
        aux = logits.new_zeros(())
        for info in layers:
            loss = layer_loss(info)
            if loss is not None:
                aux = aux + loss
        want = return_attention
        return dict(
            logits=logits,
            aux_loss=aux,
            layers=layers,
            hidden_states=[info.input for info in layers],
            attentions=[i.attention for i in dec_ctx.layers] if want else None,
            encoder_attentions=[i.attention for i in enc_ctx.layers] if want else None,
            cross_attentions=[i.cross_attention for i in dec_ctx.layers] if want else None,
        )
