"""Model assembly: embeddings -> position -> layer stack -> (final norm) -> LM head.

``build_model(cfg)`` validates the config, seeds a private RNG with ``cfg.seed`` (the global RNG is
left untouched) and returns a ``TransformerModel``. ``model(tokens, return_attention=False)``
returns a ``ModelOutput``: logits ``(B, L, vocab)``, per-layer effective attention when asked,
``aux_loss`` (0 unless a variant adds one), each layer's input hidden states, per-layer info.

With a memory (``cfg.memory != "none"``) the call is ``model(tokens, state=state)``: the input is
processed in segments of ``segment_len`` (``xl``, ``compressive``, ``knn``), each segment seeing
the memory left by the previous ones, and ``out.state`` is the memory after the call, to pass to
the next call. ``state=None`` starts from an empty memory (``model.new_state(batch_size)`` is
the same, explicitly); states are immutable, so several users / streams can each keep their own.
For several segments the per-layer info is merged as ``memory.view.merge_segments`` describes
(attention maps over all keys used in the call, per-token entries concatenated).

``cfg.architecture`` (``models/architectures.py``) picks the model: ``decoder_only`` and
``encoder_only`` are this ``TransformerModel`` with the record's head (LM head / masked-LM head);
``encoder_decoder`` is ``EncoderDecoderModel`` (``models/encdec.py``), called as
``model(src, tgt, src_mask=None, return_attention=False, interventions=None)``, whose output also carries
``encoder_attentions`` and ``cross_attentions``.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from .architectures import ARCHITECTURE
from .config import ModelConfig
from .context import ForwardContext, layer_loss
from .dropout import Dropout, RandomSource, use_random_source
from .encdec import EncoderDecoder
from .errors import ConfigError
from .layers import LAYER
from .layers.stack import init_weights
from .memory import MEMORY
from .memory.view import merge_segments
from .norms import NORM, NORM_PLACEMENT
from .positions import POSITION


@dataclass
class ModelOutput:
    logits: torch.Tensor  # (B, L, vocab_size)
    attentions: list | None = None  # one (B, h, L, L_k) per layer, or None
    aux_loss: torch.Tensor = None  # scalar
    hidden_states: list = field(default_factory=list)  # input of each applied layer, (B, L, d)
    layers: list = field(default_factory=list)  # one LayerInfo per applied layer (stats of the variants)
    state: Any = None  # memory state to pass to the next call
    # encoder_decoder only (None for the single-stack architectures); ``attentions`` is then the decoder's
    encoder_attentions: list | None = None  # one (B, h, Ls, Ls) per encoder layer, or None
    cross_attentions: list | None = None  # one (B, h, Lt, Ls) per decoder layer, or None


class TransformerModel(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.position = POSITION[cfg.position].build(cfg)
        # a norm of the summed embeddings before the first layer (BERT); cfg.embed_norm=False: none
        self.embed_norm = NORM[cfg.norm].build(cfg.d_model, cfg) if cfg.embed_norm else nn.Identity()
        self.drop = Dropout(cfg.dropout)
        self.stack = LAYER[cfg.layer].build(cfg)
        mem = MEMORY[cfg.memory].build
        self.memory = mem(cfg) if mem is not None else None
        final = NORM_PLACEMENT[cfg.norm_placement].build.final_norm
        self.final_norm = NORM[cfg.norm].build(cfg.d_model, cfg) if final else nn.Identity()
        self.head = ARCHITECTURE[cfg.architecture].build(cfg)  # LM head; encoder_only: masked-LM head
        init_weights(self, self.embed)  # Xavier projections, N(0, 0.02) embedding

    def check_tokens(self, tokens):
        if (
            not isinstance(tokens, torch.Tensor)
            or tokens.dim() != 2
            or tokens.dtype not in (torch.long, torch.int32, torch.int64)
        ):
            raise ConfigError(
                "tokens", getattr(tokens, "shape", type(tokens).__name__), "a LongTensor of shape [batch, length]"
            )
        if tokens.shape[1] == 0:
            raise ConfigError("tokens", "length 0", "at least one token")
        lo, hi = int(tokens.min()), int(tokens.max())
        if lo < 0 or hi >= self.cfg.vocab_size:
            raise ConfigError("tokens", f"ids in [{lo}, {hi}]", f"integer ids in [0, {self.cfg.vocab_size - 1}]")

    def new_state(self, batch_size: int = 1, device=None):
        """A fresh (empty) memory state: the explicit reset. ``None`` when the model has no memory."""
        if self.memory is None:
            return None
        return self.memory.new_state(batch_size, device if device is not None else self.head.weight.device)

    def forward(self, tokens, return_attention: bool = False, state=None, interventions=None) -> ModelOutput:
        """Logits for ``tokens (B, L)``; with a memory, ``state`` is the memory so far (None: fresh)
        and ``out.state`` the memory after these tokens (the input is unchanged). ``interventions``
        (``models.interventions.Interventions``) caches or replaces head, FFN and residual activations."""
        self.check_tokens(tokens)
        tokens = tokens.long()
        B, L = tokens.shape
        if interventions is not None:
            interventions.check(self.cfg, B, L)
        mem = self.memory
        if mem is None:
            if state is not None:
                raise ConfigError("state", type(state).__name__, "None: this model has no memory (memory='none')")
            logits, ctx = self._segment(tokens, return_attention, None, 0, interventions)
            return self._output(logits, ctx.layers, return_attention, None)
        state = mem.check_state(state, B, tokens.device)
        seg = self.cfg.segment_len if mem.segmented else L
        logits, segments, lengths = [], [], []
        for s0 in range(0, L, seg):
            part = tokens[:, s0 : s0 + seg]
            out, ctx = self._segment(part, return_attention, state, state.pos)
            for info in ctx.layers:  # the key columns this segment's attention map covers
                info.key_ids = torch.cat([mem.prefix_ids(info.index, state), ctx.positions.cpu()])
            state = mem.update(state, ctx, self.stack.attention)
            logits.append(out)
            segments.append(ctx.layers)
            lengths.append(part.shape[1])
        layers = merge_segments(segments, lengths)
        return self._output(torch.cat(logits, dim=1), layers, return_attention, state)

    def _segment(self, tokens, return_attention, state, k_start, interventions=None):
        """One pass of the stack over one segment whose first token sits at ``k_start``."""
        L = tokens.shape[1]
        ctx = ForwardContext(
            tokens=tokens,
            position=self.position,
            need_weights=return_attention,
            k_start=k_start,
            memory=self.memory,
            state=state,
            positions=torch.arange(k_start, k_start + L, device=tokens.device),
            classifier=self.classify,
            interventions=interventions,
        )
        # absolute encodings number positions within the segment (memory keys carry no position
        # for them: only kNN / token memories allow absolute encodings); relative ones use k_start
        pos = torch.arange(L, device=tokens.device)
        x = self.embed(tokens)
        if self.cfg.embed_scale:  # Gemma: sqrt(d_model) in the embedding's dtype, as transformers rounds it
            x = x * torch.tensor(self.cfg.d_model**0.5, dtype=x.dtype)
        x = self.embed_norm(self.position.embed(x, pos))  # (B, L, d)
        x = self.stack(self.drop(x), ctx)
        if self.memory is None:
            return self.classify(x), ctx
        x = self.memory.head_input(x, ctx)  # output-side memories (spalm) mix into the final hidden state
        return self.memory.final_logits(x, self.classify(x), ctx), ctx  # and (knn_lm) into the logits

    def classify(self, x):
        """Final norm + LM head (+ Gemma's final soft cap): the model's classifier, also the early-exit classifier
        (CALM)."""
        logits = self.head(self.final_norm(x))
        cap = self.cfg.final_softcap
        return logits if cap is None else cap * torch.tanh(logits / cap)

    def _output(self, logits, layers, return_attention, state):
        aux = logits.new_zeros(())
        for info in layers:
            loss = layer_loss(info)
            if loss is not None:
                aux = aux + loss
        attentions = [info.attention for info in layers] if return_attention else None
        return ModelOutput(
            logits=logits,
            attentions=attentions,
            aux_loss=aux,
            hidden_states=[info.input for info in layers],
            layers=layers,
            state=state,
        )


class EncoderDecoderModel(EncoderDecoder):
    """``model(src, tgt, src_mask=None, return_attention=False)`` (models/encdec.py) -> ``ModelOutput``."""

    def forward(self, src, tgt=None, src_mask=None, return_attention: bool = False, interventions=None) -> ModelOutput:
        return ModelOutput(
            **self.run(src, tgt, src_mask=src_mask, return_attention=return_attention, interventions=interventions)
        )


def build_model(cfg: ModelConfig) -> nn.Module:
    """Validate ``cfg`` and build its model, seeded with ``cfg.seed`` (global RNG untouched)."""
    if isinstance(cfg, dict):
        cfg = ModelConfig.from_dict(cfg)
    cfg.validate()
    # Module constructors draw from torch's process-wide RNG; builds on several threads (a served
    # app) would interleave their draws, so a build holds the RNG to itself. Nothing else in a model
    # touches it: its dropouts draw from the model's own source.
    with _BUILD_LOCK, torch.random.fork_rng(devices=[]):
        torch.manual_seed(cfg.seed)
        cross = ARCHITECTURE[cfg.architecture].caps.cross_attention
        model = (EncoderDecoderModel if cross else TransformerModel)(cfg)
    use_random_source(model, RandomSource(cfg.seed))  # dropout never draws from the global RNG
    return model


_BUILD_LOCK = threading.Lock()
