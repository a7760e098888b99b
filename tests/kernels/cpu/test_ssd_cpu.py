"""Mamba-2's SSD scan (kernels/cpu/ssd.py, kernels.ssd) against the plain float64 recurrence
``S_t = exp(dt_t a) S_{t-1} + dt_t x_t b_t^T, y_t = S_t c_t``: outputs, final states and gradients, chunk sizes
that do and do not divide the length, one and two groups, an initial state; the one-step form and the dense map."""

import pytest
import torch

import kernels
from kernels.cpu.ssd import segsum, ssd_chunked, ssd_map, ssd_step


def recurrence(x, dt, a, b, c, h0=None):
    """``(y (B, h, L, P), final state (B, h, P, N))``, one position at a time."""
    B, h, L, P = x.shape
    g, N = b.shape[1], b.shape[-1]
    group = torch.arange(h) // (h // g)
    S = x.new_zeros(B, h, P, N) if h0 is None else h0
    ys = []
    for t in range(L):
        bt, ct = b[:, group, t], c[:, group, t]  # (B, h, N)
        S = (
            S * torch.exp(dt[:, :, t] * a)[..., None, None]
            + (dt[:, :, t, None] * x[:, :, t])[..., None] * bt[:, :, None, :]
        )
        ys.append((S @ ct[..., None])[..., 0])  # (B, h, P)
    return torch.stack(ys, dim=2), S


def draw(B=2, h=4, L=23, P=3, N=5, g=2, seed=0, dtype=torch.float64):
    gen = torch.Generator().manual_seed(seed)

    def r(*shape):
        return torch.randn(*shape, generator=gen, dtype=torch.float64).to(dtype)

    x, b, c = r(B, h, L, P), r(B, g, L, N), r(B, g, L, N)
    dt = (torch.rand(B, h, L, generator=gen, dtype=torch.float64) * 0.6 + 0.01).to(dtype)
    a = (-torch.rand(h, generator=gen, dtype=torch.float64) * 4 - 0.1).to(dtype)
    h0 = r(B, h, P, N)
    return x, dt, a, b, c, h0


@pytest.mark.parametrize("g", [1, 2])
@pytest.mark.parametrize("L,chunk", [(23, 1), (23, 5), (23, 8), (24, 8), (23, 64), (1, 4)])
def test_chunked_matches_recurrence(g, L, chunk):
    x, dt, a, b, c, h0 = draw(L=L, g=g, seed=L + chunk)
    ref, ref_state = recurrence(x, dt, a, b, c)
    torch.testing.assert_close(ssd_chunked(x, dt, a, b, c, chunk=chunk), ref, atol=1e-12, rtol=1e-10)
    y, state = ssd_chunked(x, dt, a, b, c, chunk=chunk, initial_state=h0, return_state=True)
    ref, ref_state = recurrence(x, dt, a, b, c, h0)
    torch.testing.assert_close(y, ref, atol=1e-12, rtol=1e-10)
    torch.testing.assert_close(state, ref_state, atol=1e-12, rtol=1e-10)


@pytest.mark.parametrize("g,chunk", [(1, 4), (2, 7)])
def test_chunked_gradients_match_recurrence(g, chunk):
    inputs = [t.requires_grad_() for t in draw(L=19, g=g, seed=3)]
    x, dt, a, b, c, h0 = inputs
    y, s = ssd_chunked(x, dt, a, b, c, chunk=chunk, initial_state=h0, return_state=True)
    ry, rs = recurrence(x, dt, a, b, c, h0)
    gen = torch.Generator().manual_seed(9)
    dy = torch.randn(y.shape, generator=gen, dtype=y.dtype)
    ds = torch.randn(s.shape, generator=gen, dtype=s.dtype)
    got = torch.autograd.grad((y * dy).sum() + (s * ds).sum(), inputs)
    want = torch.autograd.grad((ry * dy).sum() + (rs * ds).sum(), inputs)
    for name, gv, wv in zip(("x", "dt", "a", "b", "c", "h0"), got, want):
        torch.testing.assert_close(gv, wv, atol=1e-10, rtol=1e-9, msg=lambda m, n=name: f"d{n}: {m}")


def test_float32_inputs_accumulate_in_float32_close_to_float64():
    x, dt, a, b, c, _ = draw(L=150, g=1, seed=5)
    ref, _ = recurrence(x, dt, a, b, c)
    y = ssd_chunked(*(t.float() for t in (x, dt, a, b, c)), chunk=64)
    assert y.dtype == torch.float32
    torch.testing.assert_close(y.double(), ref, atol=2e-5, rtol=2e-5)


@pytest.mark.parametrize("g", [1, 2])
def test_step_by_step_equals_parallel(g):
    x, dt, a, b, c, h0 = draw(L=11, g=g, seed=7)
    state = h0
    ys = []
    for t in range(x.shape[2]):
        y_t, state = ssd_step(x[:, :, t], dt[:, :, t], a, b[:, :, t], c[:, :, t], state)
        ys.append(y_t)
    y, final = ssd_chunked(x, dt, a, b, c, chunk=4, initial_state=h0, return_state=True)
    torch.testing.assert_close(torch.stack(ys, dim=2), y, atol=1e-12, rtol=1e-10)
    torch.testing.assert_close(state, final, atol=1e-12, rtol=1e-10)


def test_dense_map_is_the_formula_and_times_x_gives_y():
    x, dt, a, b, c, _ = draw(B=1, h=2, L=9, g=1, seed=11)
    M = ssd_map(dt, a, b, c)  # (B, h, L, L)
    for n in range(2):
        for t in range(9):
            for s in range(9):
                want = (c[0, 0, t] @ b[0, 0, s]) * torch.exp(dt[0, n, s + 1 : t + 1].sum() * a[n]) * dt[0, n, s]
                torch.testing.assert_close(M[0, n, t, s], want if s <= t else torch.zeros((), dtype=M.dtype))
    torch.testing.assert_close(M @ x, recurrence(x, dt, a, b, c)[0], atol=1e-12, rtol=1e-10)


def test_segsum_above_the_diagonal_is_minus_infinity():
    la = torch.tensor([1.0, 2.0, 4.0])
    s = segsum(la)
    assert torch.equal(s, torch.tensor([[0.0, -torch.inf, -torch.inf], [2.0, 0.0, -torch.inf], [6.0, 4.0, 0.0]]))


def test_dispatcher_runs_the_chunked_path_and_checks_shapes():
    x, dt, a, b, c, h0 = draw(L=13, g=2, seed=2)
    y, s = kernels.ssd(x, dt, a, b, c, chunk=4, initial_state=h0, return_state=True)
    ry, rs = recurrence(x, dt, a, b, c, h0)
    torch.testing.assert_close(y, ry, atol=1e-12, rtol=1e-10)
    assert kernels.ssd_backend(x) == "torch-cpu chunked"
    with pytest.raises(ValueError, match="g dividing h"):
        three = torch.zeros(2, 3, 13, 5, dtype=x.dtype)  # 3 groups do not divide 4 heads
        kernels.ssd(x, dt, a, three, three, chunk=4)
