"""``kernels.selected_attention``: attention over per-position selected key blocks, NSA's selected branch (Yuan et
al. 2025, "Native Sparse Attention", DeepSeek-AI, ACL 2025, eqs. 10-12), on every device.

With blocks of ``l'`` keys (block ``j``: keys ``j l' .. j l' + l' - 1``) and ``sel (B, h_kv, L, n_s)`` the blocks
each position ``t`` of each (batch, K/V head) selects, query head ``n`` (K/V head ``n // G``, ``G = h / h_kv``)
at ``t`` reads the tokens ``i <= t`` of its selected blocks:

    o_t = sum_i softmax_i(scale q_t . k_i) v_i  over  {i <= t : sel[b, n // G, t, i // l']},  scale = 1 / sqrt(d)

(no key: output 0). The query heads of a GQA group share the blocks (eq. 10).

Dispatch, decided once per call by ``backend.triton_reason``:
- CUDA tensors the Triton kernel takes (fp32, head width in 16 / 32 / 64 / 128) -> ``kernels/triton/selected.py``
  (the paper's kernel: one program per position and K/V head, the group's query heads as tile rows);
- everything else -> the block-sparse PyTorch path: ``selection_layout(sel)`` as one ``BlockMask`` through
  ``kernels.attention`` (each query a one-row query block, ``1 x l'`` tiles; on CUDA the flash kernel takes no
  such tile, so that runs the PyTorch block-sparse path there too).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from .attention import _FLOPS, _ran, attention
from .backend import triton_backend_name, triton_reason
from .block_mask import BlockMask

__all__ = ["selected_attention", "selected_backend", "selection_layout"]


def selection_layout(sel: torch.Tensor, slc_block: int) -> BlockMask:
    """The selected blocks ``sel (B, h_kv, L, n_s)`` (bool) as one ``BlockMask`` over the sequences of the
    ``S = B h_kv`` (batch, K/V head) pairs laid end to end, each padded to ``L_p = n_s l'``: query row
    ``s L_p + t`` is one query block (``block_q = 1``) visiting key blocks ``s n_s + j`` of its selected ``j``,
    ascending; its own block ``floor(t / l')`` is a partial tile of the keys ``<= t``, the others are full
    (they must end before ``t``: blocks after ``t``'s own are not read); padding rows visit nothing."""
    B, hkv, L, n_s = sel.shape
    S, Lp, dev = B * hkv, n_s * slc_block, sel.device
    sel = sel.reshape(S, L, n_s)
    counts = sel.sum(-1)  # (S, L)
    order = torch.sort((~sel).to(torch.int8), dim=-1, stable=True).indices  # selected blocks first, ascending
    max_kb = max(1, int(counts.max()) if counts.numel() else 1)
    order = order[..., :max_kb]
    valid = torch.arange(max_kb, device=dev) < counts[..., None]
    t = torch.arange(L, device=dev)
    own = order == (t // slc_block)[None, :, None]  # (S, L, max_kb): the query's own block
    row = torch.arange(S * L, device=dev).view(S, L, 1)
    tile = torch.where(own & valid, row, torch.full_like(row, -1).expand_as(own))
    idx = torch.where(valid, order + (torch.arange(S, device=dev) * n_s).view(S, 1, 1), torch.zeros_like(order))
    keys = (t // slc_block * slc_block)[:, None] + torch.arange(slc_block, device=dev)  # (L, l')
    tiles = (keys <= t[:, None]).expand(S, L, slc_block).reshape(S * L, 1, slc_block)

    def padded(x, fill):  # (S, L, ...) -> (S * L_p, ...), padding rows filled
        out = torch.full((S, Lp, *x.shape[2:]), fill, dtype=x.dtype, device=dev)
        out[:, :L] = x
        return out.reshape(S * Lp, *x.shape[2:])

    return BlockMask(
        S * Lp,
        S * Lp,
        1,
        slc_block,
        padded(counts, 0).to(torch.int32),
        padded(idx, 0).to(torch.int32),
        padded(tile, -1).to(torch.int32),
        tiles.contiguous(),
    )


def _check(q, k, v, sel, block):
    if q.dim() != 4 or k.shape != v.shape or k.dim() != 4 or sel.dim() != 4:
        raise ValueError(
            f"selected_attention expects 4-D q, k, v, sel; got {q.shape}, {k.shape}, {v.shape}, {sel.shape}"
        )
    B, h, L, d = q.shape
    if k.shape[0] != B or k.shape[2:] != (L, d) or h % k.shape[1]:
        raise ValueError(f"q {tuple(q.shape)} and k/v {tuple(k.shape)} do not match")
    if sel.dtype != torch.bool or sel.shape[:3] != (B, k.shape[1], L):
        raise ValueError(
            f"sel must be bool (B, h_kv, L, n_s) = ({B}, {k.shape[1]}, {L}, n_s); got {sel.dtype} {sel.shape}"
        )
    if block < 1 or sel.shape[3] * block < L:
        raise ValueError(f"{sel.shape[3]} blocks of {block} keys do not cover L = {L}")


def _reason(q, k, v, sel, block, force: bool = False) -> str | None:
    return triton_reason(q.device, "selected", q, k, v, sel, block, force=force)


def selected_backend(q, k, v, sel, block: int) -> str:
    """Name of the backend :func:`selected_attention` runs for these arguments."""
    if _reason(q, k, v, sel, block) is None:
        return triton_backend_name(q.device) + " nsa-selected"
    return f"torch-{q.device.type} block-sparse"


def selected_torch(q, k, v, sel, block: int, *, scale: float | None = None):
    """The PyTorch path: the batch and K/V heads laid end to end (each padded to ``n_s l'``) with the group's
    query heads as heads, through ``kernels.attention`` with ``selection_layout(sel)``."""
    B, h, L, dh = q.shape
    hkv = k.shape[1]
    G, Lp = h // hkv, sel.shape[-1] * block
    pad = (0, 0, 0, Lp - L)
    qf = F.pad(q, pad).view(B, hkv, G, Lp, dh).permute(2, 0, 1, 3, 4).reshape(1, G, B * hkv * Lp, dh)
    kf = F.pad(k, pad).reshape(1, 1, B * hkv * Lp, dh)
    vf = F.pad(v, pad).reshape(1, 1, B * hkv * Lp, dh)
    of = attention(qf, kf, vf, block_mask=selection_layout(sel, block), scale=scale)  # (1, G, B h_kv L_p, d_h)
    return of.view(G, B, hkv, Lp, dh).permute(1, 2, 0, 3, 4).reshape(B, h, Lp, dh)[:, :, :L]


def selected_flops(q, sel, block: int) -> int:
    """Forward FLOPs, ``kernels.attention_flops``' convention: ``4 d`` per (query head, allowed query-key pair)
    (a host synchronisation: only for ``record_kernel_flops``)."""
    B, h, L, d = q.shape
    G = h // sel.shape[1]
    keys = torch.arange(L, device=sel.device)[:, None] - torch.arange(sel.shape[-1], device=sel.device) * block + 1
    pairs = (sel * keys.clamp(0, block)).sum()  # the keys <= t of each selected block
    return 4 * G * d * int(pairs)


def selected_attention(
    q, k, v, sel, block: int, *, max_blocks: int | None = None, scale: float | None = None, force_triton: bool = False
):
    """Differentiable ``q (B, h, L, d)``, ``k, v (B, h_kv, L, d)``, ``sel (B, h_kv, L, n_s)`` bool (blocks of
    ``block`` keys; the selection is not differentiated) -> ``(B, h, L, d)`` (module docstring). ``max_blocks``:
    at most that many blocks selected per position (the Triton path keeps no more index columns);
    ``force_triton``: the Triton kernels on CPU tensors (the interpreter; tests)."""
    _check(q, k, v, sel, block)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    if _reason(q, k, v, sel, block, force=force_triton) is None:
        from .triton.selected import selected_triton

        _ran(lambda: triton_backend_name(q.device) + " nsa-selected")
        if (flops := _FLOPS.get()) is not None:
            flops.append(selected_flops(q, sel, block))
        return selected_triton(q, k, v, sel, block, max_blocks=max_blocks, scale=scale)
    return selected_torch(q, k, v, sel, block, scale=scale)
