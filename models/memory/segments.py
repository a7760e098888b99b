"""Memories of earlier segments' hidden states: ``xl`` and ``compressive``.

- ``xl`` (Dai et al. 2019, Transformer-XL): per layer, the previous segments' attention inputs
  (the layer's hidden states, after its pre-norm if any), up to ``mem_len``, are prepended to the
  keys/values. Absolute positions continue across segments and calls (``MemoryState.pos``), so
  relative encodings see true distances; absolute encodings would give memory and segment the
  same positions and are rejected (``relative_only``).
- ``compressive`` (Rae et al. 2019): as ``xl``; memories evicted from the ``mem_len`` FIFO are
  compressed by ``compression_rate`` (``mean`` pooling, or a learned per-layer ``Conv1d`` with
  kernel = stride = rate for ``compression="conv"``) into a FIFO of ``cmem_len`` slots prepended
  before the memory. Evictions happen in whole groups of ``rate`` (so the memory may hold up to
  ``rate - 1`` fewer than ``mem_len`` slots). The conv is trained by the paper's attention-
  reconstruction loss (content-based attention of the segment over the evicted memories vs over
  their compression, with the layer's projections and inputs detached so only the conv learns),
  added to ``aux_loss`` as ``info.memory_loss``; mean pooling has no parameters and no loss.
  Compressed slots take the positions just before the memory (contiguous slots, as in the paper).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

import kernels

from ..capabilities import MemoryCaps
from ..errors import ConfigError
from ..variant import Param, Variant
from .base import SEGMENT_LEN, Memory

# per-layer state: memory and compressed-memory slots, and the compression's group size
MEM_LEN = Param("mem_len", int, 64, range=(1, 1 << 14), cap=4096)
CMEM_LEN = Param("cmem_len", int, 32, range=(1, 1 << 14), cap=4096)
COMPRESSION_RATE = Param("compression_rate", int, 2, range=(1, 1 << 14), cap=64)
COMPRESSION = Param("compression", str, "mean", choices=("mean", "conv"))


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
            self.conv = nn.ModuleList(
                nn.Conv1d(cfg.d_model, cfg.d_model, kernel_size=c, stride=c) for _ in range(cfg.n_layers)
            )

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
        return torch.cat([cmem, compressed.detach()], dim=1)[:, -self.cfg.cmem_len :]

    def _compressed_ids(self, state, evicted_pos):
        c = self.cfg.compression_rate
        n_new = evicted_pos.numel() // c
        serial = state.n_compressed + torch.arange(n_new, device=evicted_pos.device)
        first = evicted_pos.view(n_new, c).min(dim=1).values if n_new else evicted_pos[:0]
        keep = self.cfg.cmem_len
        return dict(
            cmem_ids=torch.cat([state.cmem_ids, serial])[-keep:],
            cmem_first=torch.cat([state.cmem_first, first])[-keep:],
            n_compressed=state.n_compressed + n_new,
        )


def _reconstruction_loss(attn, x, old, compressed):
    """Rae 2019's attention-reconstruction loss, gradients into the compression only.

    ``|| attn(x, old) - attn(x, compressed) ||^2`` with content-based multi-head attention using
    the layer's (detached) projections (``attn``: its ``QKVProjection``); ``x`` and ``old`` are
    detached memories already.
    """

    def heads(t, proj, which):  # the sublayer's projection (and q/k norm) with weights detached: (B, n, T, d_h)
        t = F.linear(t, proj.weight.detach())
        if which == "v":
            return attn.heads(t, attn.n_kv_heads)
        return attn.normed_heads(t, which, detach=True)

    q = heads(x, attn.q_proj, "q")
    target, _ = kernels.attention_ref(q, heads(old, attn.k_proj, "k"), heads(old, attn.v_proj, "v"))
    recon, _ = kernels.attention_ref(q, heads(compressed, attn.k_proj, "k"), heads(compressed, attn.v_proj, "v"))
    return (target.detach() - recon).pow(2).mean()


def check_compressive(cfg):
    if cfg.compression_rate > cfg.mem_len:
        raise ConfigError(
            "compression_rate",
            cfg.compression_rate,
            f"an integer <= mem_len={cfg.mem_len}: evictions are compressed in whole groups "
            "of compression_rate memories",
        )
    if cfg.compression not in COMPRESSION.choices:
        raise ConfigError("compression", cfg.compression, f"one of {list(COMPRESSION.choices)}")


def compressive_params(cfg) -> int:
    c = cfg.compression_rate
    return cfg.n_layers * (cfg.d_model * cfg.d_model * c + cfg.d_model) if cfg.compression == "conv" else 0


# Which attention accepts prepended keys and which positions restart per segment are capabilities
# (models.capabilities.check_combination); only each memory's own rules are here.
SEGMENT_CAPS = MemoryCaps(prepends_keys=True, relative_only=True)

VARIANTS = (
    Variant(
        "xl",
        "Dai et al. 2019 (Transformer-XL)",
        "Each layer also attends to the previous segments' hidden states (detached), up to mem_len.",
        build=XLMemory,
        params=(SEGMENT_LEN, MEM_LEN),
        caps=SEGMENT_CAPS,
    ),
    Variant(
        "compressive",
        "Rae et al. 2019 (Compressive Transformer)",
        "Transformer-XL memory plus older memories compressed by compression_rate into cmem_len slots.",
        build=CompressiveMemory,
        params=(SEGMENT_LEN, MEM_LEN, CMEM_LEN, COMPRESSION_RATE, COMPRESSION),
        check=check_compressive,
        caps=SEGMENT_CAPS,
        n_params=compressive_params,
    ),
)
