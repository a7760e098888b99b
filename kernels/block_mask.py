"""Block-sparse layout of a boolean attention pattern.

A pattern ``M[i, j]`` (True = query ``i`` may attend key ``j``) over ``[Lq, Lk]`` is cut into tiles of
``block_q x block_k``. For every query block we keep the ascending list of key blocks that hold at
least one allowed pair; a key block whose whole tile is allowed (and inside the sequence) is *full*
and runs unmasked, any other visited block is *partial* and carries its element mask. Work and
memory of every consumer (the CPU path, the Triton kernel) are proportional to the visited blocks,
as in BigBird / FlexAttention block masks.

Layout (all tensors on one device, int32 indices):
    kv_counts  [n_qb]             key blocks visited by each query block
    kv_indices [n_qb, max_kb]     key-block ids, ascending, padded with 0 past kv_counts
    kv_tile    [n_qb, max_kb]     -1 for a full block, else the row of ``tiles`` with its mask
    tiles      [n_tiles, bq, bk]  element masks of partial blocks (False outside the sequence)
"""
from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class BlockMask:
    q_len: int
    k_len: int
    block_q: int
    block_k: int
    kv_counts: torch.Tensor
    kv_indices: torch.Tensor
    kv_tile: torch.Tensor
    tiles: torch.Tensor

    @property
    def n_q_blocks(self) -> int:
        return self.kv_counts.numel()

    @property
    def n_k_blocks(self) -> int:
        return -(-self.k_len // self.block_k)

    @property
    def n_visited(self) -> int:
        """Number of (query block, key block) pairs that are computed."""
        return int(self.kv_counts.sum())

    @property
    def density(self) -> float:
        """Visited blocks over all blocks: the fraction of dense work that is done."""
        return self.n_visited / max(1, self.n_q_blocks * self.n_k_blocks)

    def to(self, device) -> "BlockMask":
        return BlockMask(self.q_len, self.k_len, self.block_q, self.block_k,
                         self.kv_counts.to(device), self.kv_indices.to(device),
                         self.kv_tile.to(device), self.tiles.to(device))

    def to_dense(self) -> torch.Tensor:
        """The boolean pattern ``[q_len, k_len]`` this layout encodes (for tests and plots)."""
        nqb, bq, bk = self.n_q_blocks, self.block_q, self.block_k
        dense = torch.zeros(nqb, bq, self.n_k_blocks, bk, dtype=torch.bool, device=self.kv_counts.device)
        for qb in range(nqb):
            for s in range(int(self.kv_counts[qb])):
                kb, t = int(self.kv_indices[qb, s]), int(self.kv_tile[qb, s])
                dense[qb, :, kb] = True if t < 0 else self.tiles[t]
        dense = dense.reshape(nqb * bq, self.n_k_blocks * bk)
        return dense[: self.q_len, : self.k_len]


def block_mask(mask: torch.Tensor, block: int | tuple[int, int] = 64) -> BlockMask:
    """Build the :class:`BlockMask` of a boolean pattern ``mask [Lq, Lk]``.

    ``block`` is the tile size (one int for square tiles, or ``(block_q, block_k)``).
    """
    if mask.dim() != 2 or mask.dtype != torch.bool:
        raise ValueError(f"block_mask expects a 2-D bool tensor, got {tuple(mask.shape)} {mask.dtype}")
    bq, bk = (block, block) if isinstance(block, int) else block
    if bq <= 0 or bk <= 0:
        raise ValueError(f"block sizes must be positive, got {(bq, bk)}")
    lq, lk = mask.shape
    nqb, nkb = -(-lq // bq), -(-lk // bk)
    padded = torch.zeros(nqb * bq, nkb * bk, dtype=torch.bool, device=mask.device)
    padded[:lq, :lk] = mask
    tiles4 = padded.view(nqb, bq, nkb, bk).permute(0, 2, 1, 3)  # (n_qb, n_kb, bq, bk)
    n_allowed = tiles4.sum(dim=(2, 3))
    visited = n_allowed > 0
    full = n_allowed == bq * bk
    counts = visited.sum(dim=1)
    max_kb = max(1, int(counts.max()) if counts.numel() else 1)
    # Stable sort puts visited key blocks first, keeping ascending block order.
    order = torch.sort((~visited).to(torch.int8), dim=1, stable=True).indices[:, :max_kb]
    slot_valid = torch.arange(max_kb, device=mask.device)[None, :] < counts[:, None]
    kv_indices = torch.where(slot_valid, order, torch.zeros_like(order))
    partial = visited & ~full
    tile_id = torch.full((nqb, nkb), -1, dtype=torch.long, device=mask.device)
    tile_id[partial] = torch.arange(int(partial.sum()), device=mask.device)
    kv_tile = torch.where(slot_valid, tile_id.gather(1, order), torch.full_like(order, -1))
    tiles = tiles4[partial].contiguous()
    return BlockMask(lq, lk, bq, bk, counts.to(torch.int32), kv_indices.to(torch.int32),
                     kv_tile.to(torch.int32), tiles)
