"""Model assembly: embeddings -> position -> layer stack -> (final norm) -> LM head.

``build_model(cfg)`` validates the config, seeds a private RNG with ``cfg.seed`` (the global RNG is
left untouched) and returns a ``TransformerModel``. ``model(tokens, return_attention=False)``
returns a ``ModelOutput``: logits ``(B, L, vocab)``, per-layer effective attention when asked,
``aux_loss`` (0 unless a variant adds one), each layer's input hidden states, per-layer info.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

import torch
from torch import nn

from .config import ConfigError, ModelConfig
from .context import ForwardContext
from .layers import LAYER
from .memory import MEMORY
from .norms import NORM, NORM_PLACEMENT
from .positions import POSITION


@dataclass
class ModelOutput:
    logits: torch.Tensor                       # (B, L, vocab_size)
    attentions: Optional[list] = None          # one (B, h, L, L_k) per layer, or None
    aux_loss: torch.Tensor = None              # scalar
    hidden_states: list = field(default_factory=list)  # input of each applied layer, (B, L, d)
    layers: list = field(default_factory=list)  # per-layer info dicts (stats of the variants)
    state: Any = None                          # memory state to pass to the next call


class TransformerModel(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.position = POSITION[cfg.position].build(cfg)
        self.drop = nn.Dropout(cfg.dropout)
        self.stack = LAYER[cfg.layer].build(cfg)
        mem = MEMORY[cfg.memory].build
        self.memory = mem(cfg) if mem is not None else None
        final = NORM_PLACEMENT[cfg.norm_placement].build.final_norm
        self.final_norm = NORM[cfg.norm].build(cfg.d_model, cfg) if final else nn.Identity()
        self.head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        self._init_weights()

    def _init_weights(self):
        """Xavier for projections (the 2017 paper), N(0, 0.02) for the token embedding."""
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.xavier_uniform_(m.weight)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
        nn.init.normal_(self.embed.weight, std=0.02)

    def check_tokens(self, tokens):
        if not isinstance(tokens, torch.Tensor) or tokens.dim() != 2 or tokens.dtype not in (torch.long, torch.int32, torch.int64):
            raise ConfigError("tokens", getattr(tokens, "shape", type(tokens).__name__),
                              "a LongTensor of shape [batch, length]")
        if tokens.shape[1] == 0:
            raise ConfigError("tokens", "length 0", "at least one token")
        lo, hi = int(tokens.min()), int(tokens.max())
        if lo < 0 or hi >= self.cfg.vocab_size:
            raise ConfigError("tokens", f"ids in [{lo}, {hi}]", f"integer ids in [0, {self.cfg.vocab_size - 1}]")

    def forward(self, tokens, return_attention: bool = False, state=None) -> ModelOutput:
        self.check_tokens(tokens)
        tokens = tokens.long()
        B, L = tokens.shape
        ctx = ForwardContext(tokens=tokens, position=self.position, need_weights=return_attention)
        pos = torch.arange(L, device=tokens.device)
        x = self.position.embed(self.embed(tokens), pos)  # (B, L, d)
        x = self.stack(self.drop(x), ctx)
        logits = self.head(self.final_norm(x))
        return self._output(logits, ctx, return_attention, state)

    def _output(self, logits, ctx, return_attention, state):
        aux = logits.new_zeros(())
        for info in ctx.layers:
            for part in (info, info.get("ffn") or {}):
                if isinstance(part.get("loss"), torch.Tensor):
                    aux = aux + part["loss"]
        attentions = [info.get("attention") for info in ctx.layers] if return_attention else None
        return ModelOutput(logits=logits, attentions=attentions, aux_loss=aux,
                           hidden_states=[info["input"] for info in ctx.layers], layers=ctx.layers,
                           state=state)


def build_model(cfg: ModelConfig) -> TransformerModel:
    """Validate ``cfg`` and build its model, seeded with ``cfg.seed`` (global RNG untouched)."""
    if isinstance(cfg, dict):
        cfg = ModelConfig.from_dict(cfg)
    cfg.validate()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(cfg.seed)
        return TransformerModel(cfg)
