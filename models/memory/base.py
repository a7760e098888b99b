"""What every memory shares: the immutable ``MemoryState``, the ``Memory`` base class, the
``segment_len`` every segmented memory reads, and the ``none`` choice.

Every memory module of this package builds on this one and none imports another's internals. See
the package docstring for the conventions.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch
from torch import nn

from ..capabilities import MemoryCaps
from ..errors import ConfigError
from ..variant import Param, Variant
from .view import local_reach

# the length of the segments a memory that carries state processes the input in
SEGMENT_LEN = Param("segment_len", int, 64, range=(1, 1 << 20), cap=8192)


@dataclass(frozen=True)
class MemoryState:
    """Everything a memory carries between segments and calls (tensors detached, never mutated).

    ``mem[l]`` ``(B, M, d)`` / ``cmem[l]`` ``(B, C, d)``: layer ``l``'s memory and compressed memory;
    ``mem_pos (M,)`` their tokens' absolute positions, ``cmem_ids (C,)`` serial numbers of the
    compressed slots and ``cmem_first (C,)`` the first position each covers; ``knn_*`` the kNN
    store (``knn.py``). ``pos``: absolute position of the next token.
    """

    kind: str
    batch_size: int
    pos: int = 0
    mem: tuple = ()
    mem_pos: torch.Tensor | None = None
    cmem: tuple = ()
    cmem_ids: torch.Tensor | None = None
    cmem_first: torch.Tensor | None = None
    n_compressed: int = 0
    knn_keys: torch.Tensor | None = None  # (B, h_kv, S, d_h), unit-normalised
    knn_values: torch.Tensor | None = None  # (B, h_kv, S, d_h)
    knn_pos: torch.Tensor | None = None  # (S,)

    def replace(self, **changes) -> MemoryState:
        return dataclasses.replace(self, **changes)

    def memory_len(self) -> dict:
        """Slots held now: ``{"mem": M, "cmem": C, "knn": S}``."""
        return {
            "mem": 0 if self.mem_pos is None else int(self.mem_pos.numel()),
            "cmem": 0 if self.cmem_ids is None else int(self.cmem_ids.numel()),
            "knn": 0 if self.knn_pos is None else int(self.knn_pos.numel()),
        }


class Memory(nn.Module):
    """Base class: no prefix, no hook; subclasses override what they carry."""

    records_input = False  # Attention stores its (detached) input in info.attn_input
    segmented = True  # process the input in segments of cfg.segment_len

    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg

    def new_state(self, batch_size: int = 1, device=None) -> MemoryState:
        empty = torch.zeros(0, dtype=torch.long, device=device)
        return MemoryState(
            kind=self.cfg.memory, batch_size=int(batch_size), mem_pos=empty, cmem_ids=empty, cmem_first=empty
        )

    def check_state(self, state, batch_size: int, device) -> MemoryState:
        if state is None:
            return self.new_state(batch_size, device)
        if not isinstance(state, MemoryState) or state.kind != self.cfg.memory:
            raise ConfigError(
                "state",
                type(state).__name__ if not isinstance(state, MemoryState) else state.kind,
                f"None or a MemoryState of this model (memory={self.cfg.memory!r}): "
                "pass out.state of a previous call or model.new_state()",
            )
        if state.batch_size != batch_size:
            raise ConfigError(
                "state",
                f"batch size {state.batch_size}",
                f"the batch size of the tokens ({batch_size}); start a new state with state=None",
            )
        return state

    def prefix(self, index: int, state, batch_size: int) -> torch.Tensor | None:
        return None

    def prefix_ids(self, index: int, state) -> torch.Tensor:
        """Key ids of the prefix slots: positions >= 0 for tokens, ``-(serial + 1)`` for compressed."""
        return torch.zeros(0, dtype=torch.long)

    def hook(self, index: int):
        return None

    def head_input(self, x, ctx):
        """The final hidden states ``(B, L, d)`` the head reads (output-side memories mix into them)."""
        return x

    def final_logits(self, x, logits, ctx):
        """The segment's logits ``(B, L, V)`` (kNN-LM interpolates them with its retrieval)."""
        return logits

    def update(self, state: MemoryState, ctx, attention_of) -> MemoryState:
        """The state after ``ctx``'s segment; also annotates ``ctx.layers`` for the memory view."""
        L = ctx.tokens.shape[1]
        for info in ctx.layers:
            self._annotate(info, state, ctx)
            info.attn_input = None
        return state.replace(pos=state.pos + L)

    def _annotate(self, info, state, ctx):
        P = self.prefix_ids(info.index, state).numel()
        info.memory_len = P
        info.memory = {"prefix": P}
        reach = local_reach(self.cfg, ctx.positions.numel(), ctx.tokens.device)  # (L,)
        info.reach = reach.expand(ctx.tokens.shape[0], -1)


VARIANTS = (
    Variant(
        "none", "Vaswani et al. 2017", "No memory: each call sees only its own tokens.", build=None, caps=MemoryCaps()
    ),
)
