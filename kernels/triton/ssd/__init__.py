"""Mamba-2's state-space duality (SSD) in Triton, chunked, forward and backward (Dao & Gu, ICML 2024, "Transformers
are SSMs", section 6 and its ``ssd_minimal``; the decomposition of mamba_ssm's chunked kernels).

Convention (the same as ``kernels/cpu/ssd.py::ssd_chunked``): ``x [B, h, L, P]``, ``dt [B, h, L]`` (> 0),
``a [h]`` (< 0), ``b, c [B, g, L, N]``, head i reading group ``i // (h / g)``;
``y_t = sum_{s <= t} (c_t . b_s) exp(sum_{r = s+1..t} dt_r a) dt_s x_s`` ``[B, h, L, P]``, plus
``exp(sum_{r <= t} dt_r a) h0 c_t`` when an initial state ``h0 [B, h, P, N]`` is given; the state after the last
step is ``h_L = sum_s exp(sum_{r > s} dt_r a) dt_s x_s b_s^T (+ decayed h0)`` ``[B, h, P, N]``. No D skip, no gate.

The algorithm, over chunks of ``C`` positions (``A_t``: the inclusive cumsum of ``dt a`` inside the chunk, computed
by each kernel from ``dt``; a masked tail has ``dt = 0``, so it neither decays nor adds):
1. ``_ssd_chunk_state`` (grid: chunk x B h): ``S_c = sum_s exp(A_last - A_s) dt_s x_s b_s^T`` and ``A_last``;
2. ``_ssd_state_pass`` (grid: state block x B h, sequential over chunks): ``h_{c+1} = exp(A_last,c) h_c + S_c``,
   storing the state ``h_c`` each chunk starts from and the final state;
3. ``_ssd_chunk_scan`` (grid: chunk x B h): ``y = exp(A) (c h_c^T) + (mask(c b^T) * exp(A_t - A_s) dt_s) x``.
Backward, mirrored: ``_ssd_chunk_dstate`` (what each chunk's outputs ask of its entering state), the reverse pass
``_ssd_state_pass_bwd`` (``dS_c``, the gradient of each chunk's state, and ``dh0``), ``_ssd_chunk_bwd_dx`` (dx,
d dt, da per chunk) and ``_ssd_chunk_bwd_dbdc`` (db, dc per head); ``bwd.py`` gives the formulas. db, dc of the
heads sharing a group and da over batch and chunks are summed in torch in a fixed order: no atomics, bitwise
reproducible.

Everything is computed in fp32 (fp16 / bf16 inputs are widened, the outputs cast back); ``tl.dot`` in tf32x3
(about fp32 accuracy). Any head width ``P`` and state width ``N``: the kernels walk them in blocks of ``BP`` / ``BN``
columns (``fwd.py``); the chunk is one of ``CHUNKS``. ``aot_specs`` lists every specialisation for
kernels.tools.aot_check.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
import triton

from ..grid_limits import batch_slices
from .bwd import _ssd_chunk_bwd_dbdc, _ssd_chunk_bwd_dx, _ssd_chunk_dstate, _ssd_state_pass_bwd
from .fwd import _ssd_chunk_scan, _ssd_chunk_state, _ssd_state_pass

CHUNKS = (16, 32, 64)
BP = BN = 16  # columns of the head / state width per block (fwd.py): any P and N, registers set by the chunk
BLOCK = 256  # state entries per program of the sequential passes (PR * NR is a multiple of it)


def warps(chunk: int) -> int:
    """Warps of the chunk kernels (fewest spills in kernels.tools.aot_check)."""
    return 8 if chunk >= 32 else 4


def unsupported_reason(x, chunk: int = 64) -> str | None:
    """Why these kernels cannot run these arguments (None if they can). For the dispatcher."""
    if chunk not in CHUNKS:
        return f"chunk {chunk} not in {CHUNKS}"
    return None


def _meta(chunk):
    return dict(C=chunk, BP=BP, BN=BN, num_warps=warps(chunk))


def _pad_state(h, pr, nr):
    """``[B, h, P, N]`` -> ``[B h, PR, NR]`` fp32, zero padded (the kernels' layout of a state)."""
    B, H, P, N = h.shape
    return F.pad(h.float(), (0, nr - N, 0, pr - P)).reshape(B * H, pr, nr).contiguous()


class _SSD(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, dt, a, b, c, h0, chunk):
        B, H, L, P = x.shape
        G, N = b.shape[1], b.shape[-1]
        meta = _meta(chunk)
        pr, nr, n_c = triton.cdiv(P, BP) * BP, triton.cdiv(N, BN) * BN, triton.cdiv(L, chunk)
        sizes = (H, G, L, P, N, pr, nr)
        f32 = dict(dtype=torch.float32, device=x.device)
        s = torch.empty(B * H, n_c, pr, nr, **f32)  # (B h, n_c, PR, NR): each chunk's own state
        ach = torch.empty(B * H, n_c, **f32)  # each chunk's total log decay A_last
        _ssd_chunk_state[(n_c, B * H)](x, dt, a, b, s, ach, *sizes, **meta)
        hs, hf = torch.empty_like(s), torch.empty(B * H, pr, nr, **f32)
        h0p = _pad_state(h0, pr, nr) if h0 is not None else hf  # hf: a placeholder pointer, not read
        grid = (pr * nr // BLOCK, B * H)
        _ssd_state_pass[grid](s, ach, h0p, hs, hf, n_c, pr * nr, HAS_H0=h0 is not None, BLOCK=BLOCK)
        y = torch.empty_like(x)
        _ssd_chunk_scan[(n_c, B * H)](x, dt, a, b, c, hs, y, *sizes, **meta)
        ctx.save_for_backward(x, dt, a, b, c, hs, ach)
        ctx.chunk, ctx.has_h0 = chunk, h0 is not None
        ctx.set_materialize_grads(False)
        return y, hf.view(B, H, pr, nr)[..., :P, :N]

    @staticmethod
    def backward(ctx, dy, dhf):
        x, dt, a, b, c, hs, ach = ctx.saved_tensors
        B, H, L, P = x.shape
        G, N = b.shape[1], b.shape[-1]
        meta = _meta(ctx.chunk)
        n_c, pr, nr = hs.shape[1:]
        sizes = (H, G, L, P, N, pr, nr)
        dy = torch.zeros_like(x) if dy is None else dy.float().contiguous()
        f32 = dict(dtype=torch.float32, device=x.device)
        gs = torch.empty_like(hs)
        _ssd_chunk_dstate[(n_c, B * H)](dy, dt, a, c, gs, *sizes, **meta)
        ds, dh0 = torch.empty_like(hs), torch.empty(B * H, pr, nr, **f32)
        dhfp = _pad_state(dhf, pr, nr) if dhf is not None else dh0  # dh0: a placeholder pointer, not read
        grid = (pr * nr // BLOCK, B * H)
        _ssd_state_pass_bwd[grid](gs, ach, dhfp, ds, dh0, n_c, pr * nr, HAS_DHF=dhf is not None, BLOCK=BLOCK)
        dx, ddt, da = torch.empty_like(x), torch.empty_like(dt), torch.empty(B, H, n_c, **f32)
        _ssd_chunk_bwd_dx[(n_c, B * H)](x, dt, a, b, c, hs, ds, dy, dx, ddt, da, *sizes, **meta)
        dbh, dch = torch.empty(B, H, L, N, **f32), torch.empty(B, H, L, N, **f32)  # per head
        _ssd_chunk_bwd_dbdc[(n_c, B * H)](x, dt, a, b, c, hs, ds, dy, dbh, dch, *sizes, **meta)
        # (B, h, L, N) -> (B, g, L, N): the heads of a group share b and c; a fixed-order sum.
        db = dbh.view(B, G, H // G, L, N).sum(2)
        dc = dch.view(B, G, H // G, L, N).sum(2)
        dh0 = dh0.view(B, H, pr, nr)[..., :P, :N] if ctx.has_h0 else None
        return dx, ddt, da.sum((0, 2)), db, dc, dh0, None


def _check(x, dt, a, b, c, chunk, initial_state):
    B, H, L, P = x.shape
    if dt.shape != (B, H, L) or a.shape != (H,):
        raise ValueError(f"dt {tuple(dt.shape)} / a {tuple(a.shape)}: want dt (B, h, L) = {(B, H, L)}, a ({H},)")
    if b.shape != c.shape or b.shape[0] != B or b.shape[2] != L or H % b.shape[1]:
        raise ValueError(f"b / c {tuple(b.shape)} / {tuple(c.shape)}: want (B, g, L, N) with h = {H} a multiple of g")
    if initial_state is not None and initial_state.shape != (B, H, P, b.shape[-1]):
        raise ValueError(f"initial_state {tuple(initial_state.shape)}: want (B, h, P, N) = {(B, H, P, b.shape[-1])}")
    reason = unsupported_reason(x, chunk)
    if reason is not None:
        raise ValueError(f"ssd_triton: {reason}")


def ssd_triton(x, dt, a, b, c, *, chunk=64, initial_state=None, return_state=False):
    """:func:`kernels.cpu.ssd.ssd_chunked` in these kernels: ``y [B, h, L, P]`` (and the final state
    ``[B, h, P, N]`` with ``return_state``), computed in fp32, returned in ``x``'s dtype; differentiable in
    ``x, dt, a, b, c, initial_state``. A batch with ``B h > 65535`` runs as several launches (grid y is ``B h``)."""
    _check(x, dt, a, b, c, chunk, initial_state)
    f = lambda t: t.float().contiguous()  # noqa: E731
    ys, states = [], []
    for sl in batch_slices(x.shape[0], x.shape[1]):
        h0 = None if initial_state is None else f(initial_state[sl])
        y, hf = _SSD.apply(f(x[sl]), f(dt[sl]), f(a), f(b[sl]), f(c[sl]), h0, int(chunk))
        ys.append(y)
        states.append(hf)
    y = (ys[0] if len(ys) == 1 else torch.cat(ys, 0)).to(x.dtype)
    if not return_state:
        return y
    return y, (states[0] if len(states) == 1 else torch.cat(states, 0)).to(x.dtype)


def ssd_ref(x, dt, a, b, c, *, chunk=64, initial_state=None, return_state=False):
    """Plain PyTorch, the same chunked algorithm (``ssd_minimal``'s segment sums), in the inputs' dtype."""
    B, H, L, P = x.shape
    rep = H // b.shape[1]
    bb, cc = b.repeat_interleave(rep, 1), c.repeat_interleave(rep, 1)  # (B, h, L, N)
    pad = (-L) % chunk
    xs, dts = F.pad(x, (0, 0, 0, pad)), F.pad(dt, (0, pad))  # dt = 0 past L: no decay, no input
    bb, cc = F.pad(bb, (0, 0, 0, pad)), F.pad(cc, (0, 0, 0, pad))
    n_c = (L + pad) // chunk
    xs, bb, cc = (t.reshape(B, H, n_c, chunk, -1) for t in (xs, bb, cc))  # (B, h, n_c, C, .)
    dts = dts.reshape(B, H, n_c, chunk)
    cum = torch.cumsum(dts * a[:, None, None], -1)  # (B, h, n_c, C)
    tri = torch.ones(chunk, chunk, dtype=torch.bool, device=x.device).tril()
    seg = torch.exp((cum[..., :, None] - cum[..., None, :]).masked_fill(~tri, float("-inf")))  # (.., C, C)
    y = ((cc @ bb.transpose(-1, -2)) * seg * dts[..., None, :]) @ xs
    s = (xs * (torch.exp(cum[..., -1:] - cum) * dts)[..., None]).transpose(-1, -2) @ bb  # (B, h, n_c, P, N)
    h = initial_state if initial_state is not None else x.new_zeros(B, H, P, b.shape[-1])
    entering = []
    for i in range(n_c):
        entering.append(h)
        h = torch.exp(cum[:, :, i, -1])[..., None, None] * h + s[:, :, i]
    hs = torch.stack(entering, 2)  # (B, h, n_c, P, N)
    y = y + torch.exp(cum)[..., None] * (cc @ hs.transpose(-1, -2))
    y = y.reshape(B, H, n_c * chunk, P)[:, :, :L]
    return (y, h) if return_state else y


def aot_specs(quick: bool):
    """Specialisations kernels.tools.aot_check compiles: the chunk kernels at every chunk of ``CHUNKS`` (any head
    and state width: run-time loops), the two sequential passes with and without their optional input; fp32."""
    ptrs = {
        n: "*fp32"
        for n in ("X", "DT", "A", "Bm", "Cm", "S", "ACH", "H0", "HS", "HF", "Y")
        + ("DY", "GS", "DHF", "DS", "DH0", "DX", "DDT", "DB", "DC", "DA")
    }
    out = []
    for flag, fn in (("HAS_H0", _ssd_state_pass), ("HAS_DHF", _ssd_state_pass_bwd)):
        for on in (True,) if quick else (False, True):
            out.append((f"{fn.__name__} fp32 {flag}={on}", fn, ptrs, {flag: on, "BLOCK": BLOCK}, 4, 2))
    kernels = (_ssd_chunk_state, _ssd_chunk_scan, _ssd_chunk_dstate, _ssd_chunk_bwd_dx, _ssd_chunk_bwd_dbdc)
    for chunk in (64,) if quick else CHUNKS:
        for fn in kernels:
            consts = {"C": chunk, "BP": BP, "BN": BN}
            out.append((f"{fn.__name__} fp32 c{chunk}", fn, ptrs, consts, warps(chunk), 2))
    return out
