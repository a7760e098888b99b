"""Memory (CATALOGUE.md section 7): what the model carries from one segment to the next.

The input is processed in segments of ``segment_len`` (memories that carry state: ``xl``,
``compressive``, ``knn``). Whatever is carried lives in an explicit, immutable
:class:`MemoryState` that the caller passes in and gets back::

    out = model(tokens, state=state)   # state=None starts fresh (same as model.new_state())
    state = out.state                  # pass it to the next call; never mutated in place

Modules hold parameters only, so two users (two states) never see each other's memory; "reset"
is passing ``state=None`` (or ``model.new_state()``). Every stored tensor is detached.

- ``xl`` (Dai et al. 2019, Transformer-XL): per layer, the previous segments' attention inputs
  (the layer's hidden states, after its pre-norm if any), up to ``mem_len``, are prepended to the
  keys/values. Absolute positions continue across segments and calls (``MemoryState.pos``), so
  relative encodings see true distances; absolute encodings would give memory and segment the
  same positions and are rejected.
- ``compressive`` (Rae et al. 2019): as ``xl``; memories evicted from the ``mem_len`` FIFO are
  compressed by ``compression_rate`` (``mean`` pooling, or a learned per-layer ``Conv1d`` with
  kernel = stride = rate for ``compression="conv"``) into a FIFO of ``cmem_len`` slots prepended
  before the memory. Evictions happen in whole groups of ``rate`` (so the memory may hold up to
  ``rate - 1`` fewer than ``mem_len`` slots). The conv is trained by the paper's attention-
  reconstruction loss (content-based attention of the segment over the evicted memories vs over
  their compression, with the layer's projections and inputs detached so only the conv learns),
  added to ``aux_loss`` as ``info["memory_loss"]``; mean pooling has no parameters and no loss.
  Compressed slots take the positions just before the memory (contiguous slots, as in the paper).
- ``knn`` (Wu et al. 2022, Memorizing Transformer): see ``memory_knn.py``.
- ``tokens``: ``n_memory`` learned memory vectors per layer prepended to the keys/values
  (persistent memory, Sukhbaatar et al. 2019, "Augmenting Self-attention with Persistent
  Memory"; Burtsev et al. 2020, "Memory Transformer"). Every query sees them under every pattern
  and in causal and bidirectional models; they are read-only (they attend nothing), which in a
  causal model is what prepending learned tokens to the input amounts to (they could only attend
  each other, so their states would not depend on the input). They carry nothing between calls,
  so the input is not segmented. They sit at the positions just before the first token.

Per-layer info: ``memory_len`` (slots prepended / stored for that layer in the segment),
``memory`` (breakdown), ``reach`` ``(B, L)``: how many positions back each query can see.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

import kernels

from .attention.patterns import RULES
from .config import ConfigError
from .memory_view import local_reach
from .registry import Variant, register

MEMORY: dict = {}

_RELATIVE = ("none", "xl", "rope", "alibi", "t5", "shaw")


@dataclass(frozen=True)
class MemoryState:
    """Everything a memory carries between segments and calls (tensors detached, never mutated).

    ``mem[l]`` ``(B, M, d)`` / ``cmem[l]`` ``(B, C, d)``: layer ``l``'s memory and compressed memory;
    ``mem_pos (M,)`` their tokens' absolute positions, ``cmem_ids (C,)`` serial numbers of the
    compressed slots and ``cmem_first (C,)`` the first position each covers; ``knn_*`` the kNN
    store (``memory_knn.py``). ``pos``: absolute position of the next token.
    """
    kind: str
    batch_size: int
    pos: int = 0
    mem: tuple = ()
    mem_pos: Optional[torch.Tensor] = None
    cmem: tuple = ()
    cmem_ids: Optional[torch.Tensor] = None
    cmem_first: Optional[torch.Tensor] = None
    n_compressed: int = 0
    knn_keys: Optional[torch.Tensor] = None    # (B, h_kv, S, d_h), unit-normalised
    knn_values: Optional[torch.Tensor] = None  # (B, h_kv, S, d_h)
    knn_pos: Optional[torch.Tensor] = None     # (S,)

    def replace(self, **changes) -> "MemoryState":
        return dataclasses.replace(self, **changes)

    def memory_len(self) -> dict:
        """Slots held now: ``{"mem": M, "cmem": C, "knn": S}``."""
        return {"mem": 0 if self.mem_pos is None else int(self.mem_pos.numel()),
                "cmem": 0 if self.cmem_ids is None else int(self.cmem_ids.numel()),
                "knn": 0 if self.knn_pos is None else int(self.knn_pos.numel())}


class Memory(nn.Module):
    """Base class: no prefix, no hook; subclasses override what they carry."""

    records_input = False   # Attention stores its (detached) input in info["attn_input"]
    segmented = True        # process the input in segments of cfg.segment_len

    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg

    def new_state(self, batch_size: int = 1, device=None) -> MemoryState:
        empty = torch.zeros(0, dtype=torch.long, device=device)
        return MemoryState(kind=self.cfg.memory, batch_size=int(batch_size), mem_pos=empty,
                           cmem_ids=empty, cmem_first=empty)

    def check_state(self, state, batch_size: int, device) -> MemoryState:
        if state is None:
            return self.new_state(batch_size, device)
        if not isinstance(state, MemoryState) or state.kind != self.cfg.memory:
            raise ConfigError("state", type(state).__name__ if not isinstance(state, MemoryState) else state.kind,
                              f"None or a MemoryState of this model (memory={self.cfg.memory!r}): "
                              "pass out.state of a previous call or model.new_state()")
        if state.batch_size != batch_size:
            raise ConfigError("state", f"batch size {state.batch_size}",
                              f"the batch size of the tokens ({batch_size}); start a new state with state=None")
        return state

    def prefix(self, index: int, state, batch_size: int) -> Optional[torch.Tensor]:
        return None

    def prefix_ids(self, index: int, state) -> torch.Tensor:
        """Key ids of the prefix slots: positions >= 0 for tokens, ``-(serial + 1)`` for compressed."""
        return torch.zeros(0, dtype=torch.long)

    def hook(self, index: int):
        return None

    def update(self, state: MemoryState, ctx, attention_of) -> MemoryState:
        """The state after ``ctx``'s segment; also annotates ``ctx.layers`` for the memory view."""
        L = ctx.tokens.shape[1]
        for info in ctx.layers:
            self._annotate(info, state, ctx)
            info.pop("attn_input", None)
        return state.replace(pos=state.pos + L)

    def _annotate(self, info, state, ctx):
        P = self.prefix_ids(info["index"], state).numel()
        info["memory_len"] = P
        info["memory"] = {"prefix": P}
        reach = local_reach(self.cfg, ctx.positions.numel(), ctx.tokens.device)  # (L,)
        info["reach"] = reach.expand(ctx.tokens.shape[0], -1)


class XLMemory(Memory):
    """Transformer-XL: the previous segments' attention inputs, per layer, up to ``mem_len``."""

    records_input = True

    def prefix(self, index, state, batch_size):
        parts = [t[index] for t in (state.cmem, state.mem) if len(t) > index and t[index].shape[1]]
        return torch.cat(parts, dim=1) if parts else None  # (B, C + M, d)

    def prefix_ids(self, index, state):
        return torch.cat([-(state.cmem_ids + 1), state.mem_pos]).cpu()

    def _annotate(self, info, state, ctx):
        super()._annotate(info, state, ctx)
        info["memory"] = {"mem": int(state.mem_pos.numel()), "cmem": int(state.cmem_ids.numel())}
        first = torch.cat([state.cmem_first, state.mem_pos])
        if first.numel():  # memory is visible to every query: reach back to its oldest token
            back = (ctx.positions - first.min()).to(info["reach"].device)  # (L,)
            info["reach"] = torch.maximum(info["reach"], back.expand_as(info["reach"]))

    def update(self, state, ctx, attention_of):
        cfg = self.cfg
        pos = ctx.positions  # (L,)
        mems, cmems = [], []
        evict_pos = None
        for info in ctx.layers:
            i = info["index"]
            x = info["attn_input"]  # (B, L, d), detached
            old = state.mem[i] if len(state.mem) > i else x.new_zeros(x.shape[0], 0, x.shape[2])
            cat = torch.cat([old, x], dim=1)  # (B, M + L, d)
            n_evict = self._n_evict(cat.shape[1])
            cmem = state.cmem[i] if len(state.cmem) > i else x.new_zeros(x.shape[0], 0, x.shape[2])
            if n_evict:
                cmem = self._compress_into(cmem, cat[:, :n_evict], x, info, attention_of(i))
            mems.append(cat[:, n_evict:].detach())
            cmems.append(cmem.detach())
            evict_pos = n_evict
        all_pos = torch.cat([state.mem_pos, pos])
        n_evict = evict_pos or 0
        new = dict(mem=tuple(mems), mem_pos=all_pos[n_evict:], cmem=tuple(cmems))
        new.update(self._compressed_ids(state, all_pos[:n_evict]))
        out = super().update(state, ctx, attention_of)
        return out.replace(**new)

    def _n_evict(self, total: int) -> int:
        return max(0, total - self.cfg.mem_len)

    def _compress_into(self, cmem, evicted, x, info, attn):
        return cmem  # plain Transformer-XL discards evicted memories

    def _compressed_ids(self, state, evicted_pos) -> dict:
        return {}


class CompressiveMemory(XLMemory):
    """Compressive Transformer: evicted memories are compressed by ``compression_rate``."""

    def __init__(self, cfg):
        super().__init__(cfg)
        c = cfg.compression_rate
        self.conv = None
        if cfg.compression == "conv":  # one learned compression per layer
            self.conv = nn.ModuleList(nn.Conv1d(cfg.d_model, cfg.d_model, kernel_size=c, stride=c)
                                      for _ in range(cfg.n_layers))

    def _n_evict(self, total):
        over = total - self.cfg.mem_len
        if over <= 0:
            return 0
        c = self.cfg.compression_rate
        return -(-over // c) * c  # whole groups; <= total because compression_rate <= mem_len

    def compress(self, index: int, evicted: torch.Tensor) -> torch.Tensor:
        """``(B, n, d) -> (B, n / rate, d)``: mean pooling or the layer's Conv1d."""
        c = self.cfg.compression_rate
        if self.conv is None:
            B, n, d = evicted.shape
            return evicted.view(B, n // c, c, d).mean(dim=2)  # (B, n/c, d)
        return self.conv[index](evicted.transpose(1, 2)).transpose(1, 2)  # (B, n/c, d)

    def _compress_into(self, cmem, evicted, x, info, attn):
        index = info["index"]
        compressed = self.compress(index, evicted)
        if self.conv is not None and torch.is_grad_enabled():
            info["memory_loss"] = _reconstruction_loss(attn, x, evicted, compressed)
        return torch.cat([cmem, compressed.detach()], dim=1)[:, -self.cfg.cmem_len:]

    def _compressed_ids(self, state, evicted_pos):
        c = self.cfg.compression_rate
        n_new = evicted_pos.numel() // c
        serial = state.n_compressed + torch.arange(n_new, device=evicted_pos.device)
        first = evicted_pos.view(n_new, c).min(dim=1).values if n_new else evicted_pos[:0]
        keep = self.cfg.cmem_len
        return dict(cmem_ids=torch.cat([state.cmem_ids, serial])[-keep:],
                    cmem_first=torch.cat([state.cmem_first, first])[-keep:],
                    n_compressed=state.n_compressed + n_new)


def _reconstruction_loss(attn, x, old, compressed):
    """Rae 2019's attention-reconstruction loss, gradients into the compression only.

    ``|| attn(x, old) - attn(x, compressed) ||^2`` with content-based multi-head attention using
    the layer's (detached) projections; ``x`` and ``old`` are detached memories already.
    """
    B, L, _ = x.shape
    h, hkv = attn.cfg.n_heads, attn.cfg.kv_heads

    def heads(t, proj, n):
        return F.linear(t, proj.weight.detach()).view(B, t.shape[1], n, -1).transpose(1, 2)  # (B, n, T, d_h)

    q = heads(x, attn.q_proj, h)
    target, _ = kernels.attention_ref(q, heads(old, attn.k_proj, hkv), heads(old, attn.v_proj, hkv))
    recon, _ = kernels.attention_ref(q, heads(compressed, attn.k_proj, hkv), heads(compressed, attn.v_proj, hkv))
    return (target.detach() - recon).pow(2).mean()


class TokenMemory(Memory):
    """``n_memory`` learned vectors per layer, prepended to that layer's keys/values."""

    segmented = False

    def __init__(self, cfg):
        super().__init__(cfg)
        # in the space of the attention input; N(0, 0.02) like the token embeddings
        self.tokens = nn.Parameter(torch.randn(cfg.n_layers, cfg.n_memory, cfg.d_model) * 0.02)

    def prefix(self, index, state, batch_size):
        return self.tokens[index].unsqueeze(0).expand(batch_size, -1, -1)  # (B, n_memory, d)

    def prefix_ids(self, index, state):
        return -(torch.arange(self.cfg.n_memory) + 1)


# ---------------------------------------------------------------------------- checks
def _needs_pattern(cfg, what):
    if cfg.attention not in RULES:
        raise ConfigError(
            "memory", cfg.memory,
            f"{what} prepends memory to the keys (more keys than queries), which needs a softmax "
            f"pattern attention ({', '.join(RULES)}); attention={cfg.attention!r} does not support it")


def _check_xl(cfg):
    if cfg.position not in _RELATIVE:
        raise ConfigError(
            "position", cfg.position,
            f"memory={cfg.memory!r} needs relative or no positions ({', '.join(_RELATIVE)}): an absolute "
            "encoding restarts at every segment, so memory and current tokens would share positions")
    _needs_pattern(cfg, f"memory={cfg.memory!r}")


def _check_compressive(cfg):
    _check_xl(cfg)
    if cfg.compression_rate > cfg.mem_len:
        raise ConfigError("compression_rate", cfg.compression_rate,
                          f"an integer <= mem_len={cfg.mem_len}: evictions are compressed in whole groups "
                          "of compression_rate memories")


def _check_tokens(cfg):
    _needs_pattern(cfg, "memory='tokens'")


def _check_knn(cfg):
    if not cfg.causal:
        raise ConfigError("memory", "knn",
                          "a causal model (causal=True): the Memorizing Transformer's store holds the past "
                          "of a left-to-right model; a bidirectional model has no 'past' segments")


from .memory_knn import KNNMemory  # noqa: E402  (builds on the classes above)

register(MEMORY, Variant("none", "Vaswani et al. 2017",
                         "No memory: each call sees only its own tokens.", build=None))
register(MEMORY, Variant(
    "xl", "Dai et al. 2019 (Transformer-XL)",
    "Each layer also attends to the previous segments' hidden states (detached), up to mem_len.",
    build=XLMemory, params=("segment_len", "mem_len"), check=_check_xl))
register(MEMORY, Variant(
    "compressive", "Rae et al. 2019 (Compressive Transformer)",
    "Transformer-XL memory plus older memories compressed by compression_rate into cmem_len slots.",
    build=CompressiveMemory,
    params=("segment_len", "mem_len", "cmem_len", "compression_rate", "compression"),
    check=_check_compressive))
register(MEMORY, Variant(
    "knn", "Wu et al. 2022 (Memorizing Transformer)",
    "One layer retrieves the top-k past (key, value) pairs from a store of knn_size and gates them with local attention.",
    build=KNNMemory, params=("segment_len", "knn_size", "knn_k"), check=_check_knn))
register(MEMORY, Variant(
    "tokens", "Sukhbaatar et al. 2019; Burtsev et al. 2020",
    "n_memory learned memory slots per layer that every position can attend.",
    build=TokenMemory, params=("n_memory",), check=_check_tokens))
