"""Chunked linear attention (Katharopoulos et al., "Transformers are RNNs", 2020), fwd + bwd.

``out_i = phi_q_i . S_i / (phi_q_i . z_i + eps)`` with ``S_i = sum_j phi_k_j v_j^T`` and
``z_i = sum_j phi_k_j`` over all j, or over ``j <= i`` when causal. The feature map is applied
by the caller. Chunked form (chunk of C rows): ``num_c = Q_c S + tril(Q_c K_c^T) V_c``,
``den_c = Q_c z + rowsum tril(Q_c K_c^T) + eps``, then ``S += K_c^T V_c``, ``z += colsum K_c`` --
linear in L, never an L x L matrix. Non-causal: accumulate S, z over all chunks first.

Backward with ``dnum = dout / den`` and ``dden = -rowsum(dout * out) / den`` and
``G = dnum V^T + dden`` (C x C, masked like the forward):
``dq = G K + dnum S^T + dden z^T`` (forward-direction sweep);
``dk = G^T Q + V R^T + r``, ``dv = tril(Q K^T)^T dnum + K R`` with ``R = sum_{later} q dnum^T``,
``r = sum_{later} dden q`` (reverse sweep). K/V heads shared by a GQA group accumulate over
the group inside one program.

On the GPU the sweeps are a chunk-parallel scan (kernels/linear_attention_triton.py): the
per-chunk increments of ``S, z`` (and of ``R, r`` in the backward) are computed by one program per
(chunk, head), prefix-summed over the chunks, and every chunk then finishes independently, so the
work spreads over ``n_chunks * B * h`` programs instead of ``B * h`` sequential ones.

The kernels compute in fp32 throughout (tf32x3 dots, fp32 state ``S``): the running sums would lose
too much in half precision. fp16 / bf16 inputs are therefore converted to fp32 once at the call
(one elementwise pass, small next to the O(L m d) work) instead of compiling every kernel per
input dtype: a third of the specialisations for kernels.aot_check. Feature and value dims are
padded to one size (32 or 64), so the launcher can only pick the variants the AOT check compiles.
"""
from __future__ import annotations

import torch

from .linear_sizes import MAX_PAD, padded_dim


def linear_attention(phi_q, phi_k, v, *, causal: bool = False, eps: float = 1e-6,
                     force_triton: bool = False):
    """``phi_q [B, h, L, m]``, ``phi_k [B, h_kv, L, m]``, ``v [B, h_kv, L, d]`` -> ``[B, h, L, d]``.

    Triton on CUDA tensors (or when ``force_triton``) with feature / value dims <= 64 (a batch
    with ``B * h > 65535`` as several launches: kernels/grid_limits.py); chunked torch prefix
    sums otherwise.
    """
    if phi_q.shape[1] % phi_k.shape[1] or phi_k.shape[:3] != v.shape[:3]:
        raise ValueError(f"linear_attention: bad shapes {tuple(phi_q.shape)} {tuple(phi_k.shape)} "
                         f"{tuple(v.shape)}")
    if (phi_q.is_cuda or force_triton) and padded_dim(phi_q.shape[-1], v.shape[-1]) <= MAX_PAD:
        from .grid_limits import batch_slices
        from .linear_attention_triton import _LinearAttention  # triton only on this path
        # Grid y is B * h (at most 65535 on CUDA): a larger batch runs as several launches.
        outs = [_LinearAttention.apply(phi_q[s].float(), phi_k[s].float(), v[s].float(), bool(causal),
                                       float(eps)) for s in batch_slices(phi_q.shape[0], phi_q.shape[1])]
        return (outs[0] if len(outs) == 1 else torch.cat(outs, 0)).to(v.dtype)
    return linear_attention_ref(phi_q, phi_k, v, causal=causal, eps=eps)


def linear_attention_ref(phi_q, phi_k, v, *, causal: bool = False, eps: float = 1e-6,
                         chunk: int = 64):
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
        q, k, vc = qf[:, :, c0:c0 + chunk], kf[:, :, c0:c0 + chunk], vv[:, :, c0:c0 + chunk]
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
