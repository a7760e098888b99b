"""Mamba-2's state-space dual (SSD) in plain PyTorch: the chunked form, the one-step recurrence and the dense map
(Dao & Gu 2024, "Transformers are SSMs: Generalized Models and Efficient Algorithms Through Structured State Space
Duality", ICML 2024, section 6; the chunked algorithm is their ``ssd_minimal.py``).

Shapes: ``x (B, h, L, P)``, ``dt (B, h, L)`` positive, ``a (h,)`` negative, ``b, c (B, g, L, N)``; head ``i`` reads
group ``i // (h / g)``. With the state ``S_t (P, N)`` per (batch, head):

    S_t = exp(dt_t a) S_{t-1} + dt_t x_t b_t^T,   y_t = S_t c_t,   S_{-1} = h0 (zero by default)

that is ``y_t = sum_{s <= t} (c_t . b_s) exp(sum_{r=s+1..t} dt_r a) dt_s x_s + (c_t . exp(sum_{r<=t} dt_r a) h0)``:
no skip term ``D x`` and no gate (the layer adds them, ``models/attention/mamba2.py``).

Chunked form (chunks of ``Q`` positions, the last one zero-padded: a padded step has ``dt = 0``, so it decays by
``exp(0) = 1`` and writes nothing, and the final state is exact), with ``A_t = cumsum(dt a)`` inside a chunk:
1. intra-chunk (quadratic, the "attention" half of the duality): ``Y_diag = (C B^T * exp(segsum(dt a))) (dt x)``;
2. chunk states: ``S_k = sum_s exp(A_{Q-1} - A_s) dt_s x_s b_s^T``, what chunk ``k`` adds to the state at its end;
3. inter-chunk recurrence over the ``L / Q`` states: ``H_{k+1} = exp(A_{Q-1}) H_k + S_k`` from ``H_0 = h0``;
4. state to output: ``Y_off = exp(A_t) c_t H_k`` for the positions of chunk ``k``.
Linear in ``L`` (one ``Q x Q`` block per chunk), accumulated in at least float32, differentiated by autograd.
``segsum`` sums the strictly-later steps by a masked cumulative sum (never a difference of two long cumulative
sums, which would cancel), and ``-inf`` above the diagonal so the ``exp`` is exactly zero there.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def segsum(la: torch.Tensor) -> torch.Tensor:
    """``la (..., T)`` -> ``(..., T, T)`` with ``[t, s] = sum_{r=s+1..t} la_r`` for ``s <= t``, ``-inf`` above."""
    T = la.shape[-1]
    x = la[..., :, None].expand(*la.shape, T)  # (..., T, T): entry [r, s] = la_r
    strict = torch.ones(T, T, dtype=torch.bool, device=la.device).tril(-1)  # r > s
    out = x.masked_fill(~strict, 0).cumsum(-2)  # [t, s] = sum_{s < r <= t} la_r
    causal = torch.ones(T, T, dtype=torch.bool, device=la.device).tril()
    return out.masked_fill(~causal, float("-inf"))


def _groups(t: torch.Tensor, h: int) -> torch.Tensor:
    """``(B, g, ...)`` -> ``(B, h, ...)``: head ``i`` reads group ``i // (h / g)``."""
    g = t.shape[1]
    return t if g == h else t.repeat_interleave(h // g, dim=1)


def _check(x, dt, a, b, c):
    if x.dim() != 4 or dt.shape != x.shape[:3] or a.shape != (x.shape[1],):
        raise ValueError(f"ssd expects x (B, h, L, P), dt (B, h, L), a (h,); got {x.shape}, {dt.shape}, {a.shape}")
    B, h, L, _ = x.shape
    if b.shape != c.shape or b.dim() != 4 or b.shape[0] != B or b.shape[2] != L or h % b.shape[1]:
        raise ValueError(f"b, c must be (B, g, L, N) with g dividing h = {h}; got {b.shape}, {c.shape}")


def ssd_chunked(x, dt, a, b, c, *, chunk: int = 64, initial_state=None, return_state: bool = False):
    """``y (B, h, L, P)`` (module docstring), in ``x``'s dtype; with ``return_state`` also the final state
    ``(B, h, P, N)`` (in the accumulation dtype). ``chunk`` changes the speed, never the function."""
    _check(x, dt, a, b, c)
    B, h, L, P = x.shape
    N = b.shape[-1]
    acc = torch.promote_types(x.dtype, torch.float32)
    Q = max(1, min(int(chunk), L)) if L else 1
    pad = (-L) % Q
    n = (L + pad) // Q
    xdt = x.to(acc) * dt.to(acc)[..., None]  # (B, h, L, P): the discretised input dt_s x_s
    la = dt.to(acc) * a.to(acc)[:, None]  # (B, h, L): log of each step's decay, dt_t a
    bh, ch = _groups(b.to(acc), h), _groups(c.to(acc), h)  # (B, h, L, N)
    xdt = F.pad(xdt, (0, 0, 0, pad)).view(B, h, n, Q, P)  # (B, h, n, Q, P)
    la = F.pad(la, (0, pad)).view(B, h, n, Q)
    bh = F.pad(bh, (0, 0, 0, pad)).view(B, h, n, Q, N)
    ch = F.pad(ch, (0, 0, 0, pad)).view(B, h, n, Q, N)
    cum = la.cumsum(-1)  # (B, h, n, Q): A_t inside each chunk
    # 1. intra-chunk: the masked "attention" C B^T weighted by the decays between s and t
    scores = (ch @ bh.transpose(-1, -2)) * torch.exp(segsum(la))  # (B, h, n, Q_t, Q_s)
    y = scores @ xdt  # (B, h, n, Q, P)
    # 2. what each chunk adds to the state at its end
    to_end = torch.exp(cum[..., -1:] - cum)  # (B, h, n, Q)
    adds = (xdt * to_end[..., None]).transpose(-1, -2) @ bh  # (B, h, n, P, N)
    # 3. the recurrence over chunk boundaries: a loop of n steps, each an (P, N) update per head
    state = x.new_zeros(B, h, P, N, dtype=acc) if initial_state is None else initial_state.to(acc)
    chunk_decay = torch.exp(cum[..., -1])  # (B, h, n)
    starts = []
    for k in range(n):
        starts.append(state)
        state = state * chunk_decay[..., k, None, None] + adds[:, :, k]
    start = torch.stack(starts, dim=2)  # (B, h, n, P, N): the state entering each chunk
    # 4. the entering state read out at each position, decayed to it
    y = y + (ch @ start.transpose(-1, -2)) * torch.exp(cum)[..., None]  # (B, h, n, Q, P)
    y = y.reshape(B, h, n * Q, P)[:, :, :L].to(x.dtype)
    return (y, state) if return_state else y


def ssd_step(x_t, dt_t, a, b_t, c_t, state):
    """One step of the recurrence, for decoding: ``x_t (B, h, P)``, ``dt_t (B, h)``, ``a (h,)``, ``b_t, c_t
    (B, g, N)``, ``state (B, h, P, N)`` -> ``(y_t (B, h, P), state)``, the state in at least float32."""
    h = x_t.shape[1]
    acc = torch.promote_types(x_t.dtype, torch.float32)
    dt_t = dt_t.to(acc)
    bh, ch = _groups(b_t.to(acc), h), _groups(c_t.to(acc), h)  # (B, h, N)
    decay = torch.exp(dt_t * a.to(acc))[..., None, None]  # (B, h, 1, 1)
    state = state.to(acc) * decay + (dt_t[..., None] * x_t.to(acc))[..., None] * bh[:, :, None, :]
    y = (state @ ch[..., None])[..., 0]  # (B, h, P)
    return y.to(x_t.dtype), state


def ssd_map(dt, a, b, c) -> torch.Tensor:
    """The dense map ``M (B, h, L, L)`` with ``y = M x`` (no initial state): ``M[t, s] = (c_t . b_s)
    exp(sum_{r=s+1..t} dt_r a) dt_s`` for ``s <= t``, 0 above the diagonal; in at least float32. Quadratic in
    ``L``: for maps and tests, never the forward."""
    h = dt.shape[1]
    acc = torch.promote_types(dt.dtype, torch.float32)
    bh, ch = _groups(b.to(acc), h), _groups(c.to(acc), h)  # (B, h, L, N)
    decay = torch.exp(segsum(dt.to(acc) * a.to(acc)[:, None]))  # (B, h, L, L), 0 above the diagonal
    return (ch @ bh.transpose(-1, -2)) * decay * dt.to(acc)[:, :, None, :]
