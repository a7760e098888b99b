"""Per-call state threaded through one forward pass (never stored on a module between calls)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

import torch


@dataclass
class ForwardContext:
    tokens: torch.Tensor              # (B, L) token ids of the current segment
    position: Any                     # the model's PositionEncoding module
    need_weights: bool = False        # materialise effective attention for display
    k_start: int = 0                  # absolute position of the segment's first token
    memory: Any = None                # memory module of the model (or None)
    state: Any = None                 # memory state for this call (or None)
    layers: list = field(default_factory=list)  # one info dict per layer, filled during the pass

    def prefix(self, layer: int) -> Optional[torch.Tensor]:
        """Hidden states ``(B, P, d)`` prepended to this layer's keys/values, or None."""
        if self.memory is None:
            return None
        return self.memory.prefix(layer, self.state)
