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

A layout is built once (models memoise it) and reused by every layer of every call, so what is
derived from it is memoised on it too: ``plans`` holds execution plans (the CPU path's under keys
starting with "cpu", the Triton path's under "triton"), and ``to(device)`` returns the mask itself
on its own device and one cached copy per other device, so those memos survive the ``to()`` a layer
makes every forward. Both memos are filled compute-then-``setdefault`` (atomic on a dict): two
threads may both compute an entry, but they get the same one back and the dict is never torn.
"""

from __future__ import annotations

from dataclasses import dataclass, field

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
    # Per-layout memo of derived execution plans (e.g. the CPU path's gather groups), so a layout
    # reused across layers and calls is analysed once. Not part of the layout's identity.
    plans: dict = field(default_factory=dict, compare=False, repr=False)
    # Copies of this layout on other devices, by device key: see ``to``.
    copies: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def device(self) -> torch.device:
        return self.kv_counts.device

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

    def to(self, device) -> BlockMask:
        """This layout on ``device``: the mask itself when it is already there, else one copy per
        device, made on the first call and returned by every later one (with its own plans)."""
        key = _device_key(device)
        if key == _device_key(self.device):
            return self
        copy = self.copies.get(key)
        if copy is None:
            copy = self.copies.setdefault(
                key,
                BlockMask(
                    self.q_len,
                    self.k_len,
                    self.block_q,
                    self.block_k,
                    self.kv_counts.to(device),
                    self.kv_indices.to(device),
                    self.kv_tile.to(device),
                    self.tiles.to(device),
                ),
            )
        return copy

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


def _device_key(device) -> str:
    """``device`` with its index resolved ("cuda" is the current CUDA device), as a string key."""
    device = torch.device(device)
    if device.index is None and device.type == "cuda":
        device = torch.device("cuda", torch.cuda.current_device())
    elif device.index is None and device.type not in ("cpu", "meta"):
        device = torch.device(device.type, 0)
    return str(device)


def block_mask(mask: torch.Tensor, block: int | tuple[int, int] = 64) -> BlockMask:
    """Build the :class:`BlockMask` of a boolean pattern ``mask [Lq, Lk]``.

    ``block`` is the tile size (one int for square tiles, or ``(block_q, block_k)``).
    """
    if mask.dim() != 2 or mask.dtype != torch.bool:
        raise ValueError(f"block_mask expects a 2-D bool tensor, got {tuple(mask.shape)} {mask.dtype}")
    return block_mask_from_rows(lambda a, b: mask[a:b], mask.shape[0], mask.shape[1], block, mask.device)


def block_mask_from_rows(
    rows, q_len: int, k_len: int, block: int | tuple[int, int] = 64, device=None, chunk_rows: int = 1024
) -> BlockMask:
    """Build a :class:`BlockMask` from ``rows(start, stop) -> bool [stop - start, k_len]``.

    The pattern is evaluated a band of query rows at a time, so a long sequence never needs the
    dense ``q_len x k_len`` matrix in memory; only the partial tiles are kept.
    """
    bq, bk = (block, block) if isinstance(block, int) else block
    if bq <= 0 or bk <= 0:
        raise ValueError(f"block sizes must be positive, got {(bq, bk)}")
    nqb, nkb = -(-q_len // bq), -(-k_len // bk)
    step = max(1, chunk_rows // bq) * bq
    counts, idx_rows, tile_rows, tiles, n_tiles = [], [], [], [], 0
    for start in range(0, nqb * bq, step):
        stop = min(nqb * bq, start + step)
        band = torch.zeros(stop - start, nkb * bk, dtype=torch.bool, device=device)
        real = min(stop, q_len) - start
        if real > 0:
            band[:real, :k_len] = rows(start, start + real)
        t4 = band.view(-1, bq, nkb, bk).permute(0, 2, 1, 3)  # (n_qb in band, n_kb, bq, bk)
        n_allowed = t4.sum(dim=(2, 3))
        visited = n_allowed > 0
        partial = visited & (n_allowed < bq * bk)
        tile_id = torch.full(visited.shape, -1, dtype=torch.long, device=device)
        tile_id[partial] = torch.arange(n_tiles, n_tiles + int(partial.sum()), device=device)
        n_tiles += int(partial.sum())
        tiles.append(t4[partial])
        # Stable sort puts visited key blocks first, keeping ascending block order.
        order = torch.sort((~visited).to(torch.int8), dim=1, stable=True).indices
        counts.append(visited.sum(dim=1))
        idx_rows.append(order)
        tile_rows.append(tile_id.gather(1, order))
    tiles = torch.cat(tiles) if tiles else torch.zeros(0, bq, bk, dtype=torch.bool, device=device)
    return _assemble(q_len, k_len, bq, bk, torch.cat(counts), torch.cat(idx_rows), torch.cat(tile_rows), tiles)


def block_mask_from_tiles(
    q_len: int, k_len: int, bq: int, bk: int, visited: torch.Tensor, full: torch.Tensor, tiles: torch.Tensor
) -> BlockMask:
    """Assemble a :class:`BlockMask` from per-tile flags ``visited, full [n_qb, n_kb]`` and the
    element masks ``tiles [n_partial, bq, bk]`` of the partial tiles in row-major order."""
    partial = visited & ~full
    tile_id = torch.full(visited.shape, -1, dtype=torch.long, device=visited.device)
    tile_id[partial] = torch.arange(int(partial.sum()), device=visited.device)
    order = torch.sort((~visited).to(torch.int8), dim=1, stable=True).indices
    return _assemble(q_len, k_len, bq, bk, visited.sum(dim=1), order, tile_id.gather(1, order), tiles)


def _assemble(q_len, k_len, bq, bk, counts, order, tile, tiles) -> BlockMask:
    """``order``: per query block the key blocks, visited ones first in ascending order."""
    device = counts.device
    max_kb = max(1, int(counts.max()) if counts.numel() else 1)
    order, tile = order[:, :max_kb], tile[:, :max_kb]
    slot_valid = torch.arange(max_kb, device=device)[None, :] < counts[:, None]
    kv_indices = torch.where(slot_valid, order, torch.zeros_like(order))
    kv_tile = torch.where(slot_valid, tile, torch.full_like(tile, -1))
    return BlockMask(
        q_len,
        k_len,
        bq,
        bk,
        counts.to(torch.int32),
        kv_indices.to(torch.int32),
        kv_tile.to(torch.int32),
        tiles.contiguous(),
    )
