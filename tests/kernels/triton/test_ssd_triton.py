"""Mamba-2's chunked SSD in Triton (kernels/triton/ssd/), the kernels interpreted: outputs, final state and the
gradients of x, dt, a, b, c and the initial state against a float64 plain recurrence written here
(``h_t = exp(dt_t a) h_{t-1} + dt_t x_t b_t^T``, ``y_t = h_t c_t``), at chunks 16, 32 and 64, lengths that are not a
multiple of the chunk, groups of 1 and 2 heads, with and without an initial state; the plain PyTorch ``ssd_ref``
against the same recurrence; refusals. The interpreter is slow: tiny shapes, the first cases of each test are the
fast loop's, the rest ``exhaustive``."""

import pytest
import torch

from kernels.triton.ssd import BN, BP, ssd_ref, ssd_triton, unsupported_reason


def _recurrence(x, dt, a, b, c, h0):
    """float64, one step at a time: the definition of the scan (y and the final state)."""
    B, H, L, P = x.shape
    rep = H // b.shape[1]
    h = torch.zeros(B, H, P, b.shape[-1], dtype=torch.float64) if h0 is None else h0
    ys = []
    for t in range(L):
        bt, ct = b[:, :, t].repeat_interleave(rep, 1), c[:, :, t].repeat_interleave(rep, 1)  # (B, h, N)
        decay = torch.exp(dt[:, :, t] * a)[..., None, None]  # (B, h, 1, 1)
        h = decay * h + (dt[:, :, t, None] * x[:, :, t])[..., None] * bt[:, :, None, :]
        ys.append((h * ct[:, :, None, :]).sum(-1))
    return torch.stack(ys, 2), h


def _inputs(B, H, G, L, P, N, with_h0, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(B, H, L, P, generator=g)
    dt = torch.nn.functional.softplus(torch.randn(B, H, L, generator=g) - 1.0)  # > 0, Mamba's parametrisation
    a = -torch.rand(H, generator=g) * 2 - 0.1  # < 0
    b, c = torch.randn(B, G, L, N, generator=g), torch.randn(B, G, L, N, generator=g)
    h0 = torch.randn(B, H, P, N, generator=g) if with_h0 else None
    return [t.requires_grad_() if t is not None else None for t in (x, dt, a, b, c, h0)]


def _against_recurrence(fn, B, H, G, L, P, N, chunk, with_h0, seed=0, tol=2e-5):
    ins = _inputs(B, H, G, L, P, N, with_h0, seed)
    y, hf = fn(*ins[:5], chunk=chunk, initial_state=ins[5], return_state=True)
    g = torch.Generator().manual_seed(seed + 1)
    dy, dhf = torch.randn(y.shape, generator=g), torch.randn(hf.shape, generator=g)
    leaves = [t for t in ins if t is not None]
    got = [y, hf, *torch.autograd.grad((y * dy).sum() + (hf * dhf).sum(), leaves)]
    ref_ins = [t.detach().double().requires_grad_() if t is not None else None for t in ins]
    ry, rh = _recurrence(*ref_ins)
    ref_leaves = [t for t in ref_ins if t is not None]
    want = [ry, rh, *torch.autograd.grad((ry * dy.double()).sum() + (rh * dhf.double()).sum(), ref_leaves)]
    names = ["y", "state", "dx", "ddt", "da", "db", "dc", "dh0"]
    for name, a, b in zip(names, got, want):
        scale = max(1.0, float(b.detach().abs().max()))
        torch.testing.assert_close(a.double(), b, atol=tol * scale, rtol=tol, msg=name)


# (B, h, g, L, P, N, chunk, initial state): L below, at and past one chunk, not a multiple of it; P != N; widths
# over several column blocks of BP = BN = 16 with a partial last one (P 40, N 72)
CASES = [
    (1, 2, 1, 37, 16, 16, 16, True),
    (2, 4, 2, 21, 8, 16, 16, False),
    (1, 2, 2, 50, 40, 8, 32, True),
    (1, 2, 1, 70, 16, 72, 64, False),
    (1, 4, 2, 64, 32, 16, 64, True),
    (1, 2, 1, 16, 16, 16, 16, False),
    (1, 2, 1, 100, 4, 40, 32, True),
    (1, 2, 2, 45, 72, 40, 16, True),
]


@pytest.mark.parametrize("B,H,G,L,P,N,chunk,h0", CASES)
def test_triton_matches_the_float64_recurrence(B, H, G, L, P, N, chunk, h0):
    _against_recurrence(ssd_triton, B, H, G, L, P, N, chunk, h0)


@pytest.mark.parametrize("B,H,G,L,P,N,chunk,h0", [CASES[1], CASES[4]])
def test_torch_ref_matches_the_float64_recurrence(B, H, G, L, P, N, chunk, h0):
    _against_recurrence(ssd_ref, B, H, G, L, P, N, chunk, h0, tol=1e-5)


def test_output_alone_and_state_alone_have_gradients():
    """Only y used (the final state's gradient is None in backward), then only the state (dy None)."""
    x, dt, a, b, c, _ = _inputs(1, 2, 1, 20, 16, 16, False, 3)
    y = ssd_triton(x, dt, a, b, c, chunk=16)
    gy = torch.autograd.grad(y.sum(), [x, dt, a, b, c])
    _, hf = ssd_triton(x, dt, a, b, c, chunk=16, return_state=True)
    gh = torch.autograd.grad(hf.sum(), [x, dt, a, b, c])
    ry = ssd_ref(*(t.detach().double().requires_grad_() for t in (x, dt, a, b, c)), chunk=16)
    assert torch.allclose(y.double(), ry, atol=1e-5)
    assert all(torch.isfinite(t).all() for t in gy + gh)
    assert gh[0][:, :, -1].abs().sum() > 0 and float(gh[1][0, 0, 0]) != 0.0  # every step reaches the state


def test_backward_is_bitwise_reproducible():
    """No atomics: db, dc over a group and da over chunks are fixed-order sums."""
    x, dt, a, b, c, h0 = _inputs(1, 2, 1, 24, 16, 16, True, 4)
    runs = [torch.autograd.grad(ssd_triton(x, dt, a, b, c, chunk=16, initial_state=h0).sum(), [x, dt, a, b, c, h0])]
    runs.append(torch.autograd.grad(ssd_triton(x, dt, a, b, c, chunk=16, initial_state=h0).sum(), [x, dt, a, b, c, h0]))
    assert all(torch.equal(u, v) for u, v in zip(*runs))


def test_half_inputs_are_computed_in_fp32_and_returned_in_their_dtype():
    x, dt, a, b, c, _ = (t.detach() if t is not None else None for t in _inputs(1, 2, 1, 20, 16, 16, False, 5))
    y = ssd_triton(x.half(), dt.half(), a.half(), b.half(), c.half(), chunk=16)
    want = ssd_ref(*(t.half().double() for t in (x, dt, a, b, c)), chunk=16)
    assert y.dtype == torch.float16
    torch.testing.assert_close(y.double(), want, atol=2e-3 * float(want.abs().max()), rtol=2e-3)


def test_refusals():
    x = torch.zeros(1, 2, 8, 16)
    assert BP == BN == 16
    assert unsupported_reason(x, 64) is None and unsupported_reason(torch.zeros(1, 1, 8, 200), 16) is None
    assert "chunk 48" in unsupported_reason(x, 48)
    with pytest.raises(ValueError, match="chunk 48"):
        ssd_triton(x, torch.ones(1, 2, 8), -torch.ones(2), x, x, chunk=48)
    with pytest.raises(ValueError, match="multiple of g"):
        ssd_triton(torch.zeros(1, 3, 8, 16), torch.ones(1, 3, 8), -torch.ones(3), x, x)


def test_dispatcher_runs_the_triton_kernels_where_they_apply(monkeypatch):
    """``kernels.ssd`` picks these kernels for the tensors ``backend.triton_reason`` accepts (CUDA there; forced onto
    the interpreter here), names and records them, and gives the chunked PyTorch form's result; float64 and a chunk
    the kernels are not compiled for stay on the PyTorch path."""
    import functools
    import importlib

    import kernels
    from kernels.backend import triton_reason
    from kernels.cpu.ssd import ssd_chunked

    dispatch = importlib.import_module("kernels.ssd")  # the module (kernels.ssd the attribute is the function)
    monkeypatch.setattr(dispatch, "triton_reason", functools.partial(triton_reason, force=True))
    x, dt, a, b, c, _ = _inputs(1, 2, 1, 21, 16, 16, False, seed=3)
    with kernels.record_backends() as ran:
        y = kernels.ssd(x, dt, a, b, c, chunk=16)
    assert ran == ["triton (interpreter) ssd"] == [kernels.ssd_backend(x, 16)]
    torch.testing.assert_close(y, ssd_chunked(x, dt, a, b, c, chunk=16), atol=2e-5, rtol=2e-5)
    assert kernels.ssd_backend(x.double(), 16) == "torch-cpu chunked"
    assert kernels.ssd_backend(x, 48) == "torch-cpu chunked"
