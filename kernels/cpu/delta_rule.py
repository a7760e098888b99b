"""The gated delta rule in plain PyTorch: the chunked WY / UT form, one decoding step, and the dense map.

Recurrence (Yang, Kautz & Hatamizadeh, ICLR 2025, "Gated Delta Networks", eq. 10), per batch and head, with
``q_t, k_t`` of width ``K`` (normalised and scaled by the caller), ``v_t`` of width ``V``, ``beta_t`` in (0, 1),
``g_t <= 0`` the log decay, and the state ``S (K, V)``:

    S_t = exp(g_t) S_{t-1};   S_t += k_t (beta_t (v_t - S_t^T k_t))^T;   o_t = S_t^T q_t

Chunked form (Yang et al., NeurIPS 2024, "Parallelizing Linear Transformers with the Delta Rule over Sequence
Length", sections 3.2-3.3, with the gate of Gated DeltaNet section 3.3): in a chunk of ``C`` positions starting
from the state ``S0``, with ``G_t = sum_{r <= t} g_r`` (within the chunk), ``Gam[t, s] = exp(G_t - G_s)`` for
``s <= t``, ``Kb = diag(beta) K``:

    T = (I + strict_lower(Kb K^T o Gam))^{-1}                  (unit lower triangular; a triangular solve)
    U = T (diag(beta) V - diag(beta exp(G)) K S0)             (the "pseudo values" of the WY form)
    O = diag(exp(G)) Q S0 + (Q K^T o Gam_incl) U             (Gam_incl: Gam with its diagonal, s <= t)
    S_C = exp(G_C) S0 + (diag(exp(G_C - G)) K)^T U

so the work inside a chunk is matrix products and one triangular solve, and only the ``L / C`` chunk states are
sequential. Lengths that are not a multiple of ``C`` are padded with ``beta = 0, g = 0, k = 0`` (no update, no
decay). Everything accumulates in at least float32 (float64 stays float64); autograd gives the backward.

The dense map (for drawing; ``o = A v`` exactly with a zero initial state): ``A = (Q K^T o Gam_incl) T
diag(beta)`` over the whole sequence as one chunk, i.e. ``A[t, s] = beta_s k_s^T (prod_{r = s+1..t} exp(g_r)
(I - beta_r k_r k_r^T))^T q_t`` for ``s <= t``, 0 above the diagonal. ``A[t, s]`` reads tokens ``s .. t`` only.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def _acc(x: torch.Tensor) -> torch.dtype:
    return torch.promote_types(x.dtype, torch.float32)


def _decays(g: torch.Tensor) -> tuple:
    """``g (..., C)`` -> ``(G (..., C) the cumulative log decay, Gam_incl (..., C, C) = exp(G_t - G_s) for s <= t,
    else 0)``; the upper triangle is masked before the exp so it never overflows."""
    G = g.cumsum(-1)
    C = g.shape[-1]
    upper = torch.ones(C, C, dtype=torch.bool, device=g.device).triu(1)
    gam = (G[..., :, None] - G[..., None, :]).masked_fill(upper, float("-inf")).exp()  # (..., C, C)
    return G, gam


def _ut_solve(k, beta, gam, rhs):
    """``T rhs`` with ``T = (I + strict_lower(diag(beta) K K^T o Gam))^{-1}`` (a unit lower triangular solve)."""
    system = ((beta[..., None] * k) @ k.transpose(-1, -2) * gam).tril(-1)  # (..., C, C)
    eye = torch.eye(system.shape[-1], dtype=system.dtype, device=system.device)
    return torch.linalg.solve_triangular(system + eye, rhs, upper=False, unitriangular=True)


def gated_delta_chunked(q, k, v, beta, g, *, chunk: int = 64, initial_state=None, return_state: bool = False):
    """``q, k (B, h, L, K)``, ``v (B, h, L, V)``, ``beta, g (B, h, L)``, ``initial_state (B, h, K, V)`` or None
    (zeros) -> ``o (B, h, L, V)`` in ``v``'s dtype [, the final state (B, h, K, V) in the accumulation dtype]."""
    acc, out_dtype = _acc(v), v.dtype
    B, h, L, Kd = k.shape
    Vd = v.shape[-1]
    if L == 0:
        S = v.new_zeros(B, h, Kd, Vd, dtype=acc) if initial_state is None else initial_state.to(acc)
        return (v.new_zeros(B, h, 0, Vd), S) if return_state else v.new_zeros(B, h, 0, Vd)
    C = max(1, min(int(chunk), L))
    pad = (-L) % C
    q, k, v = (F.pad(t.to(acc), (0, 0, 0, pad)) for t in (q, k, v))
    beta, g = (F.pad(t.to(acc), (0, pad)) for t in (beta, g))
    N = (L + pad) // C
    q, k, v = (t.reshape(B, h, N, C, t.shape[-1]) for t in (q, k, v))  # (B, h, N, C, .)
    beta, g = beta.reshape(B, h, N, C), g.reshape(B, h, N, C)
    G, gam = _decays(g)  # (B, h, N, C), (B, h, N, C, C)
    eG = G.exp()
    # what every chunk needs from its start state S0, all chunks at once: U = u0 - w S0, O = o_intra + qg S0
    T = _ut_solve(k, beta, gam, torch.eye(C, dtype=acc, device=k.device))  # (B, h, N, C, C): one solve, then
    u0 = T @ (beta[..., None] * v)  # (B, h, N, C, V)     products, however wide the values (pooled maps: cells)
    w = T @ ((beta * eG)[..., None] * k)  # (B, h, N, C, K)
    attn = (q @ k.transpose(-1, -2)) * gam  # (B, h, N, C, C): Q K^T o Gam_incl
    qg = q * eG[..., None]  # (B, h, N, C, K)
    kd = k * (G[..., -1:] - G).exp()[..., None]  # (B, h, N, C, K): keys decayed to the chunk's end
    end = eG[..., -1, None, None]  # (B, h, N, 1, 1)
    S = q.new_zeros(B, h, Kd, Vd) if initial_state is None else initial_state.to(acc)
    outs = []
    for n in range(N):  # only the chunk states are sequential
        u = u0[:, :, n] - w[:, :, n] @ S  # (B, h, C, V)
        outs.append(qg[:, :, n] @ S + attn[:, :, n] @ u)
        S = end[:, :, n] * S + kd[:, :, n].transpose(-1, -2) @ u
    o = torch.stack(outs, dim=2).reshape(B, h, N * C, Vd)[:, :, :L].to(out_dtype)  # (B, h, L, V)
    return (o, S) if return_state else o


def gated_delta_step(q_t, k_t, v_t, beta_t, g_t, state):
    """One decoding step: ``q_t, k_t (B, h, K)``, ``v_t (B, h, V)``, ``beta_t, g_t (B, h)``, ``state (B, h, K, V)``
    -> ``(o_t (B, h, V), the new state)`` (module docstring's recurrence, in the accumulation dtype)."""
    acc = torch.promote_types(_acc(v_t), state.dtype)
    q_t, k_t, v_t, beta_t, g_t = (t.to(acc) for t in (q_t, k_t, v_t, beta_t, g_t))
    S = state.to(acc) * g_t.exp()[..., None, None]  # (B, h, K, V)
    delta = beta_t[..., None] * (v_t - (k_t[..., None] * S).sum(-2))  # (B, h, V)
    S = S + k_t[..., None] * delta[..., None, :]
    return (q_t[..., None] * S).sum(-2), S


def gated_delta_map(q, k, beta, g):
    """The dense map ``A (B, h, L, L)`` with ``o = A v`` (zero initial state), in the accumulation dtype: the
    whole sequence as one chunk, ``A = (Q K^T o Gam_incl) T diag(beta)`` (module docstring)."""
    acc = _acc(q)
    q, k, beta, g = (t.to(acc) for t in (q, k, beta, g))
    L = q.shape[2]
    _, gam = _decays(g)  # (B, h, L, L)
    attn = (q @ k.transpose(-1, -2)) * gam
    eye = torch.eye(L, dtype=acc, device=q.device)
    T = _ut_solve(k, beta, gam, eye.expand(*q.shape[:2], L, L))  # (B, h, L, L)
    return attn @ T * beta[..., None, :]
