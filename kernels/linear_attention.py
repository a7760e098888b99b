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

On the GPU the sweeps are a chunk-parallel scan (kernels/triton/linear_attention.py): the
per-chunk increments of ``S, z`` (and of ``R, r`` in the backward) are computed by one program per
(chunk, head), prefix-summed over the chunks, and every chunk then finishes independently, so the
work spreads over ``n_chunks * B * h`` programs instead of ``B * h`` sequential ones.

The kernels compute in fp32 throughout (tf32x3 dots, fp32 state ``S``): the running sums would lose
too much in half precision. fp16 / bf16 inputs are therefore converted to fp32 once at the call
(one elementwise pass, small next to the O(L m d) work) instead of compiling every kernel per
input dtype: a third of the specialisations for kernels.tools.aot_check. Feature and value dims are
padded to one size (32 or 64), so the launcher can only pick the variants the AOT check compiles.
"""

from __future__ import annotations

from .backend import triton_reason
from .cpu.linear_attention import linear_attention_ref


def linear_attention(phi_q, phi_k, v, *, causal: bool = False, eps: float = 1e-6, force_triton: bool = False):
    """``phi_q [B, h, L, m]``, ``phi_k [B, h_kv, L, m]``, ``v [B, h_kv, L, d]`` -> ``[B, h, L, d]``.

    Triton on CUDA tensors (or when ``force_triton``) with feature / value dims <= 64 (a batch
    with ``B * h > 65535`` as several launches: kernels/triton/grid_limits.py); chunked torch prefix
    sums otherwise.
    """
    if phi_q.shape[1] % phi_k.shape[1] or phi_k.shape[:3] != v.shape[:3]:
        raise ValueError(f"linear_attention: bad shapes {tuple(phi_q.shape)} {tuple(phi_k.shape)} {tuple(v.shape)}")
    if triton_reason(phi_q.device, "linear_attention", phi_q, v, force=force_triton) is None:
        from .triton.linear_attention import linear_attention_triton

        return linear_attention_triton(phi_q, phi_k, v, causal=causal, eps=eps)
    return linear_attention_ref(phi_q, phi_k, v, causal=causal, eps=eps)
