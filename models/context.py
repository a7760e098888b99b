"""Per-call state threaded through one forward pass (never stored on a module between calls).

A ``ForwardContext`` lives for one segment of one call. Layer stacks open one info dict per applied
layer with :meth:`ForwardContext.begin_layer`; the dict carries ``"input"`` (the hidden states
entering that layer) and ``"index"`` (which layer / step it is, used to pick that layer's memory),
and variants add their statistics to it. :func:`layer_loss` is the one place that says which info
entries are auxiliary losses.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import torch

# info keys whose (scalar tensor) values are added to ``ModelOutput.aux_loss``
LOSS_KEYS = ("loss", "memory_loss", "ponder_loss")


@dataclass
class ForwardContext:
    tokens: torch.Tensor              # (B, L) token ids of the current segment
    position: Any                     # the model's PositionEncoding module
    need_weights: bool = False        # materialise effective attention for display
    k_start: int = 0                  # absolute position of the segment's first token
    memory: Any = None                # memory module of the model (or None)
    state: Any = None                 # memory state for this segment (or None)
    positions: Optional[torch.Tensor] = None  # (L,) absolute positions of the segment's tokens
    classifier: Optional[Callable] = None     # hidden (B, L, d) -> logits (final norm + LM head)
    layers: list = field(default_factory=list)  # one info dict per layer, filled during the pass

    def begin_layer(self, x: torch.Tensor) -> dict:
        """Open (and record) the info dict of the next applied layer, whose input is ``x``."""
        info = {"input": x, "index": len(self.layers)}
        self.layers.append(info)
        return info

    def prefix(self, index: int) -> Optional[torch.Tensor]:
        """Hidden states ``(B, P, d)`` prepended to layer ``index``'s keys/values, or None."""
        if self.memory is None:
            return None
        return self.memory.prefix(index, self.state, self.tokens.shape[0])

    def attention_hook(self, index: int) -> Optional[Callable]:
        """A replacement for the attention core call of layer ``index`` (kNN memory), or None."""
        if self.memory is None:
            return None
        return self.memory.hook(index)


def layer_loss(info: dict) -> Optional[torch.Tensor]:
    """Sum of the auxiliary losses one layer's info dict reports (None when it reports none).

    ``"loss_total"`` (set by the reversible stack, whose sublayer losses are recomputed with
    gradients in backward) replaces the sublayer losses ``"loss"`` and ``info["ffn"]["loss"]``.
    """
    terms = []
    if "loss_total" in info:
        terms.append(info["loss_total"])
    else:
        terms.append(info.get("loss"))
        terms.append((info.get("ffn") or {}).get("loss"))
    terms += [info.get(k) for k in LOSS_KEYS if k != "loss"]
    terms = [t for t in terms if isinstance(t, torch.Tensor)]
    if not terms:
        return None
    return sum(terms[1:], terms[0])
