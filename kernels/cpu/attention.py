"""Block-sparse attention in plain PyTorch: the CPU path (and the fallback on any device).

Algorithm: query blocks are grouped by how many key blocks they visit; for each group the visited
key/value blocks are gathered into a contiguous ``(rows, c * block_k)`` strip and one batched
matmul computes the scores of exactly the visited tiles. Partial tiles are masked element-wise;
a group made only of full tiles runs unmasked. Work and memory therefore grow with the number of
visited (query block, key block) pairs, never with ``Lq * Lk`` (cf. BigBird's blocked
implementation and FlexAttention's block masks). Query heads that share a K/V head (GQA / MQA)
ride in the matmul's M dimension, so K/V are never copied per query head.

Sliding layouts (a sliding window's bulk, and the rows before it) skip the strips: each run is one
call of PyTorch's fused CPU attention kernel over overlapping strided views of K and V, with the
run's shared mask as an additive bias (Longformer's "sliding chunks", fused), so no score matrix and
no copy of K/V is made.

Layouts whose query blocks use a few keys scattered over many tiles (BigBird's random blocks of 16
keys, Longformer's global keys) gather finer: the keys each query block uses, by sub-blocks of 16 (or
8, 32) keys (``kernels/cpu/compact.py``), are copied into one row of a batch and one fused call runs
the batch with each row's element mask, so a random block costs its own keys, not the 64-key tile it
lies in. The plan (``kernels/cpu/plan.py``) gives every group its kind ("strips", "sliding",
"stacked", "gathered", "empty"), and one runner below computes each kind; it depends only on the
layout, so it is computed once per ``BlockMask`` and device and memoised on it. Score convention:
``kernels/reference.py``.

Learned sinks (``sinks [h]``): every group runs as strips, whose softmax takes the sink logit as one
more column (dropped after it), so a sink joins exactly the rows' full denominators; the fused kernel
has no such term.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from ..block_mask import BlockMask
from ..reference import clipped_index
from .plan import EMPTY, GATHERED, SLIDING, STACKED, STRIPS, Group, plan

_CHUNK_BYTES = 2 << 20  # scores of one chunk: cache-sized, so the elementwise passes stay in cache
_MIN_ROWS = 4  # ... but never fewer query blocks than this, or per-op overhead dominates
_GATHER_BYTES = 16 << 20  # keys and values a gathered chunk copies without autograd (_run_gathered)


def _pad(x, n: int):
    """Pad the sequence dim by ``n`` zero rows (no copy when ``n == 0``)."""
    return F.pad(x, (0, 0, 0, n)) if n else x


def _windows(x, first: int, n: int, size: int, step: int):
    """``n`` overlapping windows of ``size`` rows, ``step`` apart, from block ``first``: a view
    (B, h_kv, n, d, size). The range is cut before unfolding, so the backward's zero gradient is the
    size of that range, not of every window of the sequence."""
    lo = first * step
    return x[:, :, lo : lo + (n - 1) * step + size].unfold(2, size, step)


def _window_batch(x, first: int, n: int, size: int, step: int):
    """:func:`_windows` as the K/V of a batched attention call: (B * h_kv, n, size, d)."""
    B, hkv, _, d = x.shape
    return _windows(x, first, n, size, step).transpose(-1, -2).reshape(B * hkv, n, size, d)


def _rel_bias_at(rel_bias, rel, lk: int):
    """``rel_bias[:, rel + Lk - 1]`` (indices clamped to the table): (h, *rel.shape)."""
    return rel_bias[:, (rel + lk - 1).clamp(0, rel_bias.shape[-1] - 1)]


def _call_mask(grp: Group, window, rel, c: _Call, g: int):
    """The additive mask of a fused call (0 allowed, -inf not), or None when causality empties a
    row (the strips zero such rows). Without score modifiers it is the kernel's whole
    ``(P * g * sq, K)`` mask, rows ordered as the call's queries; with them, the ``(P, sq, K)`` base
    the modifiers are added to. Memoised in the group: it depends only on the layout, the dtype,
    causality and ``g``, so the layers and calls that reuse a plan build it once. ``rel()``: the
    ``j - i`` of ``window``'s rows, made only when needed (a gathered group's is as large as its scores)."""
    plain = c.alibi_slopes is None and c.rel_bias is None
    key = (c.dtype, c.causal, g, plain)
    if key not in grp.masks:
        allowed = window & (rel() <= 0) if c.causal else window  # (P, sq, K); rel: j - i
        mask = None
        if bool(allowed.any(-1).all()):
            # An additive float mask: a boolean one costs the kernel a conversion per call.
            mask = torch.zeros(allowed.shape, dtype=c.dtype, device=allowed.device).masked_fill(~allowed, float("-inf"))
            if plain:
                P, sq, K = mask.shape
                mask = mask[:, None].expand(P, g, sq, K).reshape(P * g * sq, K)
        grp.masks.setdefault(key, mask)
    return grp.masks[key]


def _fused(qg, kw, vw, grp: Group, window, rel, c: _Call, rows=None):
    """One fused attention call of queries ``qg (B*h_kv, P', P*g*sq, d)`` against key windows
    ``kw, vw (B*h_kv, P', K, d)``, with ``window``'s mask and the score modifiers as one additive
    mask; PyTorch's fused CPU kernel streams the scores without storing them. The ``P`` rows of
    ``window`` are one mask for every problem (P = 1), or stacked along the queries of one problem (a
    stacked prefix); with ``rows = (r0, r1)``, rows ``r0:r1`` are the masks of the call's problems,
    one each (a gathered group). ``rel(r0, r1)``: ``j - i`` of those rows. None: see :func:`_call_mask`."""
    B, hkv, g = c.B, c.hkv, c.g
    mask = _call_mask(grp, window, rel, c, g)
    if mask is None:
        return None
    P, K = window.shape[0], window.shape[-1]
    r0, r1 = (0, P) if rows is None else rows
    n = 1 if rows is None else r1 - r0  # masks in the call's batch dim
    if c.alibi_slopes is not None or c.rel_bias is not None:
        base, rel = mask[r0:r1], rel(r0, r1)  # (P', sq, K)
        P, sq, _ = base.shape
        bias = base.expand(hkv * g, P, sq, K)
        if c.rel_bias is not None:
            bias = bias + _rel_bias_at(c.rel_bias, rel, c.lk).to(bias.dtype)
        if c.alibi_slopes is not None:
            bias = bias - c.alibi_slopes.view(-1, 1, 1, 1).to(bias.dtype) * rel.abs().to(bias.dtype)
        bias = bias.view(hkv, g, P, sq, K).transpose(1, 2).reshape(1, hkv, P, g * sq, K)
        return F.scaled_dot_product_attention(
            qg, kw, vw, scale=c.scale, attn_mask=bias.expand(B, hkv, P, g * sq, K).reshape(B * hkv, n, -1, K)
        )
    # A 4-D mask: with a 3-D one the CPU kernel ran 3x slower (torch 2.13).
    mask = mask.view(P, -1, K)[r0:r1] if rows is not None else mask
    return F.scaled_dot_product_attention(qg, kw, vw, attn_mask=mask.view(1, n, -1, K), scale=c.scale)


def _run_sliding(c: _Call, grp: Group) -> list:
    """A sliding run: a batch of (query block, key window) pairs whose windows are overlapping
    strided views of K and V (no copy). With one query head per K/V head and a window that both
    halves of a block share (``grp.half``), the pairs are half blocks, which read ``bq / 2``
    fewer keys each."""
    if not c.fusable:
        return _run_strips(c, grp)
    B, hkv, g, d = c.B, c.hkv, c.g, c.d
    R, n_kb = grp.idx.shape
    _, bq, K = grp.window.shape
    bk = K // n_kb
    qrun = c.qp[:, :, grp.row_start : grp.row_start + R]  # (B, h_kv, R, g*bq, d)
    if grp.half is not None and g == 1:
        _, sq, K = grp.half.shape  # windows of sq = bq / 2 queries, sq keys apart
        qg = qrun.reshape(B * hkv, 2 * R, sq, d)
        kw = _window_batch(c.kflat, 2 * grp.key_start, 2 * R, K, sq)
        vw = _window_batch(c.vflat, 2 * grp.key_start, 2 * R, K, sq)
        o = _fused(qg, kw, vw, grp, grp.half, lambda *_: grp.rel(0, 1)[:, :sq, :K], c)
    else:
        qg = qrun.reshape(B * hkv, R, g * bq, d)
        kw = _window_batch(c.kflat, grp.key_start, R, K, bk)
        vw = _window_batch(c.vflat, grp.key_start, R, K, bk)
        o = _fused(qg, kw, vw, grp, grp.window, lambda *_: grp.rel(0, 1), c)
    return _run_strips(c, grp) if o is None else [o.view(B, hkv, R, g, bq, d)]


def _run_stacked(c: _Call, grp: Group) -> list:
    """A stacked prefix: every row's query block against one common key range, as one query block
    of ``R * g * bq`` queries in one fused call with an ``(R, bq, K)`` mask."""
    if not c.fusable:
        return _run_strips(c, grp)
    B, hkv, g, d = c.B, c.hkv, c.g, c.d
    R, n_kb = grp.idx.shape
    _, bq, K = grp.window.shape
    k0 = int(grp.idx[0, 0]) * (K // n_kb)
    qg = c.qp[:, :, grp.row_start : grp.row_start + R].reshape(B * hkv, 1, R * g * bq, d)
    kw = c.kflat[:, :, k0 : k0 + K].reshape(B * hkv, 1, K, d)
    vw = c.vflat[:, :, k0 : k0 + K].reshape(B * hkv, 1, K, d)
    o = _fused(qg, kw, vw, grp, grp.window, grp.rel, c)
    return _run_strips(c, grp) if o is None else [o.view(B, hkv, R, g, bq, d)]


def _run_gathered(c: _Call, grp: Group) -> list:
    """Gathered sub-blocks (``kernels/cpu/compact.py``): each query block's kept keys, ``grp.bk`` a
    sub-block, copied into one row of a batch, and one fused call over the batch with each row's
    ``(bq, K)`` element mask: the work is the keys the pattern uses, not the tiles they lie in.
    Without autograd the rows run in chunks of at most ``_GATHER_BYTES`` of copied keys and values,
    so the copies stay a few times K's size at any length (BigBird at 16384 tokens: 36 MiB allocated,
    the 64-key strips took 130); chunks much smaller (2 MiB) made each call's threads wait on one
    another so often that two threads on two busy cores ran 2x slower. Under autograd the kernel keeps
    the copies for the backward whatever the chunking: one call."""
    if not c.fusable:
        return _run_strips(c, grp)
    B, hkv, g, d, bq, s = c.B, c.hkv, c.g, c.d, grp.bq, grp.bk
    R, n = grp.idx.shape
    kf, vf = c.flat_blocks(s)
    if grp.row_start is not None:
        qg = c.qp[:, :, grp.row_start : grp.row_start + R]
    else:
        qg = c.qp.index_select(2, grp.rows)
    qg = qg.reshape(B * hkv, R, g * bq, d)
    step = R if c.track else max(1, _GATHER_BYTES // (2 * B * hkv * n * s * d * c.qp.element_size()))
    parts = []
    for r0 in range(0, R, step):
        r1 = min(R, r0 + step)
        idx = grp.idx[r0:r1].flatten()  # index_select: its backward is an index_add
        kw = kf.index_select(1, idx).view(B * hkv, r1 - r0, n * s, d)
        vw = vf.index_select(1, idx).view(B * hkv, r1 - r0, n * s, d)
        o = _fused(qg[:, r0:r1], kw, vw, grp, grp.window, grp.rel, c, rows=(r0, r1))
        if o is None:
            return _run_strips(c, grp)
        parts.append(o.view(B, hkv, r1 - r0, g, bq, d))
    return parts


def _strips(qp, kflat, vflat, kp, vp, qr, grp: Group, r0: int, r1: int):
    """Inputs of query blocks ``grp.rows[r0:r1]``: queries, key strips (transposed), value strips and
    the gathered ``q . rel_k`` table (or None), each with the rows in dim 2."""
    B, hkv, _, gbq, d = qp.shape
    bk = kp.shape[3]
    R, c = r1 - r0, grp.idx.shape[1]
    if grp.key_start is not None:  # sliding strips: overlapping windows of the key sequence, no gather
        kt = _windows(kflat, grp.key_start + r0, R, c * bk, bk)  # (B, h_kv, R, d, c*bk)
        vg = _windows(vflat, grp.key_start + r0, R, c * bk, bk).transpose(-1, -2)  # (B, h_kv, R, c*bk, d)
    else:
        idx = grp.idx[r0:r1].flatten()  # index_select: its backward is an index_add (fast)
        kt = kp.index_select(2, idx).view(B, hkv, R, c * bk, d).transpose(-1, -2)
        vg = vp.index_select(2, idx).view(B, hkv, R, c * bk, d)
    if grp.row_start is not None:
        qg = qp[:, :, grp.row_start + r0 : grp.row_start + r1]
    else:
        qg = qp.index_select(2, grp.rows[r0:r1])
    return qg, kt, vg, None if qr is None else qr.index_select(2, grp.rows[r0:r1])


class _Gather(torch.autograd.Function):
    """Row gathers ``src.index_select(2, i)`` for every chunk of a group, as one autograd node.

    Separate gathers (or slices) per chunk would each give the full source a gradient of its own
    size, zero-filled and summed by autograd: quadratic in the length. Here the backward makes one
    zero gradient and index-adds every chunk's into it."""

    @staticmethod
    def forward(ctx, src, *idxs):
        ctx.save_for_backward(*idxs)
        ctx.shape = src.shape
        return tuple(src.index_select(2, i) for i in idxs)

    @staticmethod
    def backward(ctx, *grads):
        idxs = ctx.saved_tensors
        ref = next(g for g in grads if g is not None)
        out = ref.new_zeros(ctx.shape)
        for i, g in zip(idxs, grads):
            if g is not None:
                out.index_add_(2, i, g)
        return (out,) + (None,) * len(idxs)


def _chunks(qp, kflat, vflat, kp, vp, qr, grp: Group, step: int, track: bool):
    """``(r0, r1, (qg, kt, vg, qrg))`` per chunk of ``step`` query blocks.

    Without autograd each chunk's strips are made as the chunk runs (views where possible). Under
    autograd every chunk's rows and key/value blocks come from one :class:`_Gather` per source,
    which keeps the backward linear in the length."""
    R, c = grp.idx.shape
    bounds = [(r0, min(R, r0 + step)) for r0 in range(0, R, step)]
    if not track:
        return [(r0, r1, _strips(qp, kflat, vflat, kp, vp, qr, grp, r0, r1)) for r0, r1 in bounds]
    B, hkv, _, gbq, d = qp.shape
    bk = kp.shape[3]
    rows = [grp.rows[r0:r1] for r0, r1 in bounds]
    blocks = [grp.idx[r0:r1].flatten() for r0, r1 in bounds]
    qs = _Gather.apply(qp, *rows)
    ks = _Gather.apply(kp, *blocks)
    vs = _Gather.apply(vp, *blocks)
    qrs = _Gather.apply(qr, *rows) if qr is not None else [None] * len(bounds)
    out = []
    for n, (r0, r1) in enumerate(bounds):
        kt = ks[n].view(B, hkv, r1 - r0, c * bk, d).transpose(-1, -2)
        vg = vs[n].view(B, hkv, r1 - r0, c * bk, d)
        out.append((r0, r1, (qs[n], kt, vg, qrs[n])))
    return out


def _attend(qg, kt, vg, qrg, grp: Group, r0, r1, causal, scale, softcap, rel_bias, alibi_slopes, rel_v, lk, sinks=None):
    """Attention of query blocks ``grp.rows[r0:r1]`` over their key strips -> (B, h_kv, R, g, bq, d)."""
    B, hkv, R, gbq, d = qg.shape
    c = grp.idx.shape[1]
    bk = vg.shape[3] // c
    bq = grp.bq
    g = gbq // bq
    # j - i of every pair (R, bq, c*bk), made only when a score term reads it
    rel = grp.rel(r0, r1) if (qrg is not None or rel_bias is not None or rel_v is not None) else None
    s = ((qg * scale) @ kt).view(B, hkv, R, g, bq, c * bk)  # (B, h_kv, R, g, bq, c*bk)
    masked = None if grp.masked is None else grp.masked[r0:r1]
    if causal:
        future = grp.future(r0, r1)[:, None]
        masked = future if masked is None else masked | future
    if qrg is not None:
        ridx = clipped_index(rel, qrg.shape[-1])[:, None].expand(B, hkv, R, g, bq, c * bk)
        s = s + qrg.gather(-1, ridx)
    if softcap is not None:
        s = softcap * torch.tanh(s / softcap)
    if rel_bias is not None:
        s = s + _rel_bias_at(rel_bias, rel, lk).view(hkv, g, R, bq, c * bk).permute(0, 2, 1, 3, 4).to(s.dtype)
    if alibi_slopes is not None:
        s = s - alibi_slopes.view(1, hkv, 1, g, 1, 1).to(s.dtype) * grp.rel(r0, r1, s.dtype).abs_()[:, None]
    if masked is not None:
        s = s.masked_fill_(masked, float("-inf"))  # in place: no op before needs its output
    if sinks is not None:  # one more softmax column per row, the head's sink logit (no value): dropped
        sink = sinks.view(1, hkv, 1, g, 1, 1).to(s.dtype).expand(B, hkv, R, g, bq, 1)
        p = torch.softmax(torch.cat([s, sink], dim=-1), dim=-1)[..., :-1]
    else:
        p = torch.softmax(s, dim=-1)
    if sinks is None and (grp.has_empty_rows or causal):
        # rows with no allowed key give NaN; zero them (masked_fill's backward zeroes their grads)
        p = p.nan_to_num(0.0)
    o = (p.view(B, hkv, R, gbq, c * bk) @ vg).view(B, hkv, R, g, bq, d)
    if rel_v is not None:
        n_rel = rel_v.shape[-2]
        ridx = clipped_index(rel, n_rel)[:, None].expand(B, hkv, R, g, bq, c * bk)
        w = p.new_zeros(B, hkv, R, g, bq, n_rel).scatter_add(-1, ridx, p)  # (B, h_kv, R, g, bq, R_rel)
        rv = rel_v.view(1, hkv, 1, g, n_rel, d) if rel_v.shape[0] > 1 else rel_v.view(1, 1, 1, 1, n_rel, d)
        o = o + w @ rv
    return o


@dataclass
class _Call:
    """The inputs of one ``block_sparse_attention`` call, as every runner reads them."""

    qp: torch.Tensor  # (B, h_kv, n_qb, g*bq, d): query heads of one K/V head side by side
    kflat: torch.Tensor  # (B, h_kv, n_kb*bk, d), zero-padded; padded keys are never allowed
    vflat: torch.Tensor
    kp: torch.Tensor  # (B, h_kv, n_kb, bk, d): kflat by key block
    vp: torch.Tensor
    qr: torch.Tensor | None  # (B, h_kv, n_qb, g, bq, R_rel): q . rel_k, or None
    g: int  # query heads per K/V head
    causal: bool
    scale: float
    softcap: float | None
    alibi_slopes: torch.Tensor | None
    rel_bias: torch.Tensor | None
    rel_v: torch.Tensor | None
    lk: int
    track: bool  # autograd records this call
    sources: tuple  # every tensor argument, for the empty kind's gradient
    sinks: torch.Tensor | None = None  # (h,) learned sink logits, or None
    flat: dict = field(default_factory=dict)  # flat_blocks' K/V by sub-block width, made on first use

    @property
    def B(self) -> int:
        return self.qp.shape[0]

    @property
    def hkv(self) -> int:
        return self.qp.shape[1]

    @property
    def d(self) -> int:
        return self.qp.shape[-1]

    @property
    def dtype(self) -> torch.dtype:
        return self.qp.dtype

    def blocks(self, bk: int | None) -> tuple:
        """K and V by blocks of ``bk`` keys (None: the layout's tiles): (B, h_kv, n, bk, d) views."""
        if bk is None or bk == self.kp.shape[3]:
            return self.kp, self.vp
        B, hkv, n, d = self.kflat.shape
        return self.kflat.view(B, hkv, n // bk, bk, d), self.vflat.view(B, hkv, n // bk, bk, d)

    def flat_blocks(self, bk: int) -> tuple:
        """K and V as ``(B * h_kv, n, bk * d)``, made once per call (a copy only when K / V are views of
        another layout, as a model's heads are): PyTorch's CPU ``index_select`` gathers dim 1 of this
        3-D form ~4x faster than dim 2 of the 5-D blocks."""
        if bk not in self.flat:
            B, hkv, n, d = self.kflat.shape
            self.flat[bk] = tuple(x.reshape(B * hkv, n // bk, bk * d) for x in (self.kflat, self.vflat))
        return self.flat[bk]

    @property
    def fusable(self) -> bool:
        """The fused kernel takes a mask and additive biases only: a softcap and relative tables
        act on the scores, which only the strips materialise."""
        return self.softcap is None and self.qr is None and self.rel_v is None and self.sinks is None


def _run_strips(c: _Call, grp: Group) -> list:
    """Gathered strips, in chunks of query blocks whose scores fit in cache: the elementwise
    passes (mask, softmax) are memory-bound, and a cache-sized chunk runs them several times
    faster."""
    R, n_kb = grp.idx.shape
    kp, vp = c.blocks(grp.bk)
    bq, bk = grp.bq, kp.shape[3]
    step = max(_MIN_ROWS, _CHUNK_BYTES // (c.B * c.hkv * c.g * bq * n_kb * bk * c.qp.element_size()))
    return [
        _attend(
            qg,
            kt,
            vg,
            qrg,
            grp,
            r0,
            r1,
            c.causal,
            c.scale,
            c.softcap,
            c.rel_bias,
            c.alibi_slopes,
            c.rel_v,
            c.lk,
            c.sinks,
        )
        for r0, r1, (qg, kt, vg, qrg) in _chunks(c.qp, c.kflat, c.vflat, kp, vp, c.qr, grp, step, c.track)
    ]


class _Zeros(torch.autograd.Function):
    """Zeros of a given shape that stay on the autograd graph of ``sources``, whose gradients are
    zeros: the output of query blocks with no allowed key, as the reference (and SDPA, and the
    Triton path) give it, so ``backward()`` works even when a mask allows nothing at all."""

    @staticmethod
    def forward(ctx, shape, like, *sources):
        ctx.metas = [(t.shape, t.dtype, t.device) for t in sources]
        return like.new_zeros(shape)

    @staticmethod
    def backward(ctx, grad):
        return (None, None) + tuple(torch.zeros(s, dtype=dt, device=dev) for s, dt, dev in ctx.metas)


def _run_empty(c: _Call, grp: Group) -> list:
    """Query blocks that visit no key block: output zeros."""
    shape = (c.B, c.hkv, grp.rows.numel(), c.g, grp.bq, c.d)
    if not c.track:
        return [c.qp.new_zeros(shape)]
    return [_Zeros.apply(shape, c.qp, *[t for t in c.sources if t.requires_grad])]


# One runner per kind of group (``kernels/cpu/plan.py``): each returns parts (B, h_kv, R, g, bq, d).
_RUNNERS = {
    STRIPS: _run_strips,
    SLIDING: _run_sliding,
    STACKED: _run_stacked,
    GATHERED: _run_gathered,
    EMPTY: _run_empty,
}


def block_sparse_attention(
    q,
    k,
    v,
    bm: BlockMask,
    *,
    causal=False,
    scale=1.0,
    alibi_slopes=None,
    rel_bias=None,
    softcap=None,
    rel_k=None,
    rel_v=None,
    sinks=None,
):
    """``q [B, h, Lq, d]``, ``k, v [B, h_kv, Lk, d]`` -> ``out [B, h, Lq, d]`` over the visited tiles;
    ``sinks [h]``: learned sink logits (``kernels/reference.py``)."""
    B, h, lq, d = q.shape
    hkv, lk = k.shape[1], k.shape[2]
    g = h // hkv
    bq, bk = bm.block_q, bm.block_k
    nqb, nkb = bm.n_q_blocks, bm.n_k_blocks
    groups, inverse = plan(bm, lq, lk, q.device)
    # Query heads of one K/V head side by side: (B, h_kv, n_qb, g*bq, d).
    qp = _pad(q, nqb * bq - lq).view(B, hkv, g, nqb, bq, d)
    qp = qp.permute(0, 1, 3, 2, 4, 5).reshape(B, hkv, nqb, g * bq, d)
    kflat = _pad(k, nkb * bk - lk)  # (B, h_kv, n_kb*bk, d); padded keys are never allowed
    vflat = _pad(v, nkb * bk - lk)
    kp, vp = kflat.view(B, hkv, nkb, bk, d), vflat.view(B, hkv, nkb, bk, d)
    qr = None
    if rel_k is not None:  # q . rel_k for every table row, gathered per pair below
        qr = F.pad((q * scale) @ rel_k.transpose(-1, -2), (0, 0, 0, nqb * bq - lq)).view(B, hkv, g, nqb, bq, -1)
        qr = qr.permute(0, 1, 3, 2, 4, 5)  # (B, h_kv, n_qb, g, bq, R_rel)
    sources = tuple(t for t in (q, k, v, rel_bias, rel_k, rel_v, alibi_slopes, sinks) if isinstance(t, torch.Tensor))
    track = torch.is_grad_enabled() and any(t.requires_grad for t in sources)
    c = _Call(
        qp,
        kflat,
        vflat,
        kp,
        vp,
        qr,
        g,
        causal,
        scale,
        softcap,
        alibi_slopes,
        rel_bias,
        rel_v,
        lk,
        track,
        sources,
        sinks=sinks,
    )
    parts = [part for grp in groups for part in _RUNNERS[grp.kind](c, grp)]
    out = parts[0] if len(parts) == 1 else torch.cat(parts, dim=2)
    if inverse is not None:
        out = out[:, :, inverse]  # back to query-block order: (B, h_kv, n_qb, g, bq, d)
    out = out.permute(0, 1, 3, 2, 4, 5).reshape(B, h, nqb * bq, d)
    return out[:, :, :lq]
