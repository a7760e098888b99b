"""Memory (docs/catalogue.md section 7): what the model carries from one segment to the next.

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
  added to ``aux_loss`` as ``info.memory_loss``; mean pooling has no parameters and no loss.
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

import torch
import torch.nn.functional as F
from torch import nn

import kernels

from .capabilities import MemoryCaps
from .errors import ConfigError
from .memory_base import Memory, MemoryState
from .memory_knn import KNNMemory
from .variant import Variant, register
from .memory_lmstore import VARIANTS as _LMSTORE

MEMORY: dict = {}

__all__ = ["MEMORY", "Memory", "MemoryState", "XLMemory", "CompressiveMemory", "TokenMemory", "KNNMemory"]


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
        info.memory = {"mem": int(state.mem_pos.numel()), "cmem": int(state.cmem_ids.numel())}
        first = torch.cat([state.cmem_first, state.mem_pos])
        if first.numel():  # memory is visible to every query: reach back to its oldest token
            back = (ctx.positions - first.min()).to(info.reach.device)  # (L,)
            info.reach = torch.maximum(info.reach, back.expand_as(info.reach))

    def update(self, state, ctx, attention_of):
        cfg = self.cfg
        pos = ctx.positions  # (L,)
        mems, cmems = [], []
        evict_pos = None
        for info in ctx.layers:
            i = info.index
            x = info.attn_input  # (B, L, d), detached
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
        index = info.index
        compressed = self.compress(index, evicted)
        if self.conv is not None and torch.is_grad_enabled():
            info.memory_loss = _reconstruction_loss(attn, x, evicted, compressed)
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
# Which attention accepts prepended keys and which positions restart per segment are capabilities
# (models.capabilities.check_combination); only each memory's own rules are here.
def _check_compressive(cfg):
    if cfg.compression_rate > cfg.mem_len:
        raise ConfigError("compression_rate", cfg.compression_rate,
                          f"an integer <= mem_len={cfg.mem_len}: evictions are compressed in whole groups "
                          "of compression_rate memories")
    if cfg.compression not in COMPRESSIONS:
        raise ConfigError("compression", cfg.compression, f"one of {list(COMPRESSIONS)}")


def _check_knn(cfg):
    if not cfg.causal:
        raise ConfigError("memory", "knn",
                          "a causal model (causal=True): the Memorizing Transformer's store holds the past "
                          "of a left-to-right model; a bidirectional model has no 'past' segments")


COMPRESSIONS = ("mean", "conv")
_SEGMENT_CAPS = MemoryCaps(prepends_keys=True, relative_only=True)


def _compressive_params(cfg) -> int:
    c = cfg.compression_rate
    return cfg.n_layers * (cfg.d_model * cfg.d_model * c + cfg.d_model) if cfg.compression == "conv" else 0


register(MEMORY, Variant("none", "Vaswani et al. 2017",
                         "No memory: each call sees only its own tokens.", build=None, caps=MemoryCaps()))
register(MEMORY, Variant(
    "xl", "Dai et al. 2019 (Transformer-XL)",
    "Each layer also attends to the previous segments' hidden states (detached), up to mem_len.",
    build=XLMemory, params=("segment_len", "mem_len"), caps=_SEGMENT_CAPS))
register(MEMORY, Variant(
    "compressive", "Rae et al. 2019 (Compressive Transformer)",
    "Transformer-XL memory plus older memories compressed by compression_rate into cmem_len slots.",
    build=CompressiveMemory,
    params=("segment_len", "mem_len", "cmem_len", "compression_rate", "compression"),
    check=_check_compressive, caps=_SEGMENT_CAPS, n_params=_compressive_params))
register(MEMORY, Variant(
    "knn", "Wu et al. 2022 (Memorizing Transformer)",
    "One layer retrieves the top-k past (key, value) pairs from a store of knn_size and gates them with local attention.",
    build=KNNMemory, params=("segment_len", "knn_size", "knn_k"), check=_check_knn, caps=MemoryCaps(),
    n_params=lambda c: 2 * c.n_heads))
register(MEMORY, Variant(
    "tokens", "Sukhbaatar et al. 2019; Burtsev et al. 2020",
    "n_memory learned memory slots per layer that every position can attend.",
    build=TokenMemory, params=("n_memory",), caps=MemoryCaps(prepends_keys=True),
    n_params=lambda c: c.n_layers * c.n_memory * c.d_model))

# issue 11: output-side retrieval memories (kNN-LM, SPALM)

for _v in _LMSTORE:
    register(MEMORY, _v)
