"""Chunked linear attention in plain PyTorch (the CPU path, and the tests' references).

Algorithm and notation: kernels/linear_attention.py.
"""

from __future__ import annotations

import torch


def linear_attention_ref(phi_q, phi_k, v, *, causal: bool = False, eps: float = 1e-6, chunk: int = 64):
    """Plain PyTorch chunked linear attention (the CPU path): O(L) memory, no L x L matrix."""
    h = phi_q.shape[1]
    rep = h // phi_k.shape[1]
    kf = phi_k.repeat_interleave(rep, 1) if rep > 1 else phi_k  # (B, h, L, m)
    vv = v.repeat_interleave(rep, 1) if rep > 1 else v  # (B, h, L, d)
    qf, kf, vv = phi_q.float(), kf.float(), vv.float()
    if not causal:
        S = kf.transpose(-1, -2) @ vv  # (B, h, m, d)
        z = kf.sum(-2)  # (B, h, m)
        out = (qf @ S) / ((qf * z[..., None, :]).sum(-1, keepdim=True) + eps)
        return out.to(v.dtype)
    B, _, L, m = qf.shape
    S = qf.new_zeros(B, h, m, vv.shape[-1])
    z = qf.new_zeros(B, h, m)
    outs = []
    for c0 in range(0, L, chunk):
        q, k, vc = qf[:, :, c0 : c0 + chunk], kf[:, :, c0 : c0 + chunk], vv[:, :, c0 : c0 + chunk]
        a = (q @ k.transpose(-1, -2)).tril()  # (B, h, C, C)
        num = q @ S + a @ vc
        den = (q * z[..., None, :]).sum(-1) + a.sum(-1) + eps
        outs.append(num / den[..., None])
        S = S + k.transpose(-1, -2) @ vc
        z = z + k.sum(-2)
    return torch.cat(outs, dim=2).to(v.dtype)


def linear_attention_dense(phi_q, phi_k, v, *, causal: bool = False, eps: float = 1e-6):
    """The definition with the ``L x L`` matrix, computed in the inputs' dtype (float64 inputs give a
    reference for tests and benchmarks; ``linear_attention_ref`` always computes in float32)."""
    rep = phi_q.shape[1] // phi_k.shape[1]
    k, vv = phi_k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
    a = phi_q @ k.transpose(-1, -2)  # (B, h, L, L)
    a = a.tril() if causal else a
    return (a @ vv) / (a.sum(-1, keepdim=True) + eps)
