"""The chunked gated delta rule (kernels/cpu/delta_rule.py) against a plain float64 recurrence: outputs, final
states and gradients for several chunk sizes and lengths that are not multiples of them; the decoding step; the
dense map against materialising the recurrence's transition products."""

import pytest
import torch
import torch.nn.functional as F

from kernels import gated_delta_map, gated_delta_rule, gated_delta_step


def recurrence(q, k, v, beta, g, state=None):
    """The paper's recurrence, one position at a time, in the inputs' dtype (float64 in these tests)."""
    B, h, L, K = k.shape
    S = torch.zeros(B, h, K, v.shape[-1], dtype=v.dtype) if state is None else state
    outs = []
    for t in range(L):
        S = S * g[:, :, t].exp()[..., None, None]
        pred = torch.einsum("bhk,bhkv->bhv", k[:, :, t], S)
        S = S + torch.einsum("bhk,bhv->bhkv", k[:, :, t], beta[:, :, t, None] * (v[:, :, t] - pred))
        outs.append(torch.einsum("bhk,bhkv->bhv", q[:, :, t], S))
    return torch.stack(outs, 2), S


def draw(B=2, h=3, L=13, K=5, V=4, seed=0, dtype=torch.float64):
    gen = torch.Generator().manual_seed(seed)
    q = F.normalize(torch.randn(B, h, L, K, generator=gen, dtype=dtype), dim=-1) / K**0.5
    k = F.normalize(torch.randn(B, h, L, K, generator=gen, dtype=dtype), dim=-1)
    v = torch.randn(B, h, L, V, generator=gen, dtype=dtype)
    beta = torch.rand(B, h, L, generator=gen, dtype=dtype)
    g = -torch.rand(B, h, L, generator=gen, dtype=dtype) * 0.7
    s0 = torch.randn(B, h, K, V, generator=gen, dtype=dtype)
    return q, k, v, beta, g, s0


@pytest.mark.parametrize("chunk,L", [(4, 13), (5, 13), (64, 13), (1, 7), (8, 16), (3, 1)])
def test_chunked_equals_recurrence(chunk, L):
    q, k, v, beta, g, s0 = draw(L=L)
    ref, ref_state = recurrence(q, k, v, beta, g, s0)
    out, state = gated_delta_rule(q, k, v, beta, g, chunk=chunk, initial_state=s0, return_state=True)
    torch.testing.assert_close(out, ref, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(state, ref_state, rtol=1e-10, atol=1e-10)
    out0 = gated_delta_rule(q, k, v, beta, g, chunk=chunk)  # zero initial state
    torch.testing.assert_close(out0, recurrence(q, k, v, beta, g)[0], rtol=1e-10, atol=1e-10)


def test_float32_inputs_accumulate_in_float32():
    q, k, v, beta, g, s0 = draw(L=21)
    ref = recurrence(q, k, v, beta, g, s0)[0]
    out = gated_delta_rule(*(t.float() for t in (q, k, v, beta, g)), chunk=8, initial_state=s0.float())
    assert out.dtype == torch.float32
    torch.testing.assert_close(out.double(), ref, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("chunk", [4, 6])
def test_gradients_equal_recurrence(chunk):
    """Gradients of every input (q, k, v, beta, g, the initial state) through the chunks (L = 11, not a multiple)."""
    inputs = [t.requires_grad_() for t in draw(L=11, seed=1)]
    w = torch.randn(2, 3, 11, 4, dtype=torch.float64)
    w_s = torch.randn(2, 3, 5, 4, dtype=torch.float64)

    def loss(fn):
        out, state = fn()
        return (out * w).sum() + (state * w_s).sum()

    ref = torch.autograd.grad(loss(lambda: recurrence(*inputs)), inputs)
    q, k, v, beta, g, s0 = inputs
    got = torch.autograd.grad(
        loss(lambda: gated_delta_rule(q, k, v, beta, g, chunk=chunk, initial_state=s0, return_state=True)), inputs
    )
    for name, a, b in zip(("q", "k", "v", "beta", "g", "state"), got, ref, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-9, msg=name)


def test_step_continues_parallel():
    """Decoding: the step, token by token from the chunked form's state, equals the chunked form on the whole."""
    q, k, v, beta, g, s0 = draw(L=10, seed=2)
    full = gated_delta_rule(q, k, v, beta, g, chunk=4, initial_state=s0)
    _, S = gated_delta_rule(*(t[:, :, :6] for t in (q, k, v, beta, g)), chunk=4, initial_state=s0, return_state=True)
    for t in range(6, 10):
        o, S = gated_delta_step(q[:, :, t], k[:, :, t], v[:, :, t], beta[:, :, t], g[:, :, t], S)
        torch.testing.assert_close(o, full[:, :, t], rtol=1e-10, atol=1e-10)


def materialised_map(q, k, beta, g):
    """``A[t, s] = beta_s k_s^T (prod_{r=s+1..t} exp(g_r) (I - beta_r k_r k_r^T))^T q_t``, the products built
    one transition at a time (independent of the UT form)."""
    B, h, L, K = k.shape
    A = torch.zeros(B, h, L, L, dtype=q.dtype)
    eye = torch.eye(K, dtype=q.dtype)
    for b in range(B):
        for n in range(h):
            for s in range(L):
                P = eye.clone()  # transition from just after s's write up to t
                for t in range(s, L):
                    if t > s:
                        kt = k[b, n, t]
                        P = g[b, n, t].exp() * (eye - beta[b, n, t] * torch.outer(kt, kt)) @ P
                    A[b, n, t, s] = beta[b, n, s] * (P @ k[b, n, s]) @ q[b, n, t]
    return A


def test_dense_map_equals_materialised_recurrence():
    q, k, v, beta, g, _ = draw(B=1, h=2, L=9, seed=3)
    A = gated_delta_map(q, k, beta, g)
    torch.testing.assert_close(A, materialised_map(q, k, beta, g), rtol=1e-10, atol=1e-12)
    assert torch.all(A.triu(1) == 0)
    torch.testing.assert_close(A @ v, recurrence(q, k, v, beta, g)[0], rtol=1e-10, atol=1e-10)


def test_dense_map_band_reads_its_tokens_only():
    """``A[t, s]`` reads tokens s..t only: the map of a window equals that window of the whole map."""
    q, k, v, beta, g, _ = draw(B=1, h=2, L=12, seed=4)
    A = gated_delta_map(q, k, beta, g)
    sub = gated_delta_map(*(t[:, :, 4:10] for t in (q, k, beta, g)))
    torch.testing.assert_close(sub, A[:, :, 4:10, 4:10], rtol=1e-10, atol=1e-12)
