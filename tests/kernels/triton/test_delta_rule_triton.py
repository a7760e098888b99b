"""The gated delta rule in Triton (kernels/triton/delta_rule/), the kernels interpreted: outputs, final state and the
gradients of q, k, v, beta, g and the initial state against a float64 token-by-token recurrence written here
(``S_t = exp(g_t) S_{t-1}; S_t += k_t (beta_t (v_t - S_t^T k_t))^T; o_t = S_t^T q_t``), at chunks 16, 32 and 64,
lengths that are not a multiple of the chunk, key widths padded (to 64 or 128), value widths over several
blocks, with and without an initial state; refusals. The interpreter is slow: tiny shapes, the first two cases
(chunks 16 and 32) are the fast loop's, the rest ``exhaustive``."""

import pytest
import torch
import torch.nn.functional as F

from kernels.cpu.delta_rule import gated_delta_chunked
from kernels.triton.delta_rule import BV, gated_delta_triton, key_width, unsupported_reason


def _recurrence(q, k, v, beta, g, h0):
    """float64, one token at a time: the definition (o and the final state)."""
    B, H, L, K = k.shape
    S = torch.zeros(B, H, K, v.shape[-1], dtype=torch.float64) if h0 is None else h0
    outs = []
    for t in range(L):
        S = S * g[:, :, t].exp()[..., None, None]  # (B, h, K, V)
        kt = k[:, :, t]  # (B, h, K)
        delta = beta[:, :, t, None] * (v[:, :, t] - (kt[..., None] * S).sum(-2))  # (B, h, V)
        S = S + kt[..., None] * delta[..., None, :]
        outs.append((q[:, :, t, :, None] * S).sum(-2))
    return torch.stack(outs, 2), S


def _inputs(B, H, L, K, V, with_h0, seed):
    gen = torch.Generator().manual_seed(seed)
    q = F.normalize(torch.randn(B, H, L, K, generator=gen), dim=-1) * K**-0.5
    k = F.normalize(torch.randn(B, H, L, K, generator=gen), dim=-1)
    v = torch.randn(B, H, L, V, generator=gen)
    beta = torch.rand(B, H, L, generator=gen) * 0.98 + 0.01
    g = -F.softplus(torch.randn(B, H, L, generator=gen)) * 0.5  # log decay < 0
    h0 = torch.randn(B, H, K, V, generator=gen) if with_h0 else None
    return [t.requires_grad_() if t is not None else None for t in (q, k, v, beta, g, h0)]


def _against_recurrence(B, H, L, K, V, chunk, with_h0, seed=0, tol=2e-5):
    ins = _inputs(B, H, L, K, V, with_h0, seed)
    o, hf = gated_delta_triton(*ins[:5], chunk=chunk, initial_state=ins[5], return_state=True)
    gen = torch.Generator().manual_seed(seed + 1)
    do, dhf = torch.randn(o.shape, generator=gen), torch.randn(hf.shape, generator=gen)
    leaves = [t for t in ins if t is not None]
    got = [o, hf, *torch.autograd.grad((o * do).sum() + (hf * dhf).sum(), leaves)]
    ref_ins = [t.detach().double().requires_grad_() if t is not None else None for t in ins]
    ro, rh = _recurrence(*ref_ins)
    ref_leaves = [t for t in ref_ins if t is not None]
    want = [ro, rh, *torch.autograd.grad((ro * do.double()).sum() + (rh * dhf.double()).sum(), ref_leaves)]
    names = ["o", "state", "dq", "dk", "dv", "dbeta", "dg", "dh0"]
    for name, a, b in zip(names, got, want):
        assert a.shape == b.shape, name
        scale = max(1.0, float(b.detach().abs().max()))
        torch.testing.assert_close(a.detach().double(), b.detach(), atol=tol * scale, rtol=tol, msg=name)


# (B, h, L, K, V, chunk, initial state): L below, at and past one chunk, not a multiple of it; K padded (20, 40 ->
# 64; 72 -> 128) or exact; V over one or several blocks of BV = 16 with a partial last one
CASES = [
    (1, 2, 37, 16, 16, 16, True),
    (1, 2, 50, 40, 24, 32, False),
    (2, 1, 21, 20, 8, 16, True),
    (1, 1, 70, 16, 40, 64, True),
    (1, 2, 16, 8, 16, 16, False),
    (1, 1, 64, 72, 16, 32, False),
    (1, 1, 100, 8, 16, 64, False),
    (2, 1, 45, 64, 20, 16, True),
]


@pytest.mark.parametrize("B,H,L,K,V,chunk,h0", CASES)
def test_triton_matches_the_float64_recurrence(B, H, L, K, V, chunk, h0):
    _against_recurrence(B, H, L, K, V, chunk, h0)


def test_matches_the_cpu_chunked_form_and_returns_only_the_output_without_return_state():
    q, k, v, beta, g, h0 = (t.detach() for t in _inputs(1, 2, 30, 16, 16, True, 3))
    o = gated_delta_triton(q, k, v, beta, g, chunk=16, initial_state=h0)
    want = gated_delta_chunked(*(t.double() for t in (q, k, v, beta, g)), chunk=16, initial_state=h0.double())
    assert isinstance(o, torch.Tensor)
    torch.testing.assert_close(o.double(), want, atol=2e-5, rtol=2e-5)


def test_output_alone_and_state_alone_have_gradients():
    """Only o used (the final state's gradient is None in backward), then only the state (dO None)."""
    q, k, v, beta, g, _ = _inputs(1, 1, 20, 16, 16, False, 4)
    go = torch.autograd.grad(gated_delta_triton(q, k, v, beta, g, chunk=16).sum(), [q, k, v, beta, g])
    _, hf = gated_delta_triton(q, k, v, beta, g, chunk=16, return_state=True)
    gh = torch.autograd.grad(hf.sum(), [q, k, v, beta, g])
    ref = [t.detach().double().requires_grad_() for t in (q, k, v, beta, g)]
    ro, rh = _recurrence(*ref, None)
    want_o = torch.autograd.grad(ro.sum(), ref, retain_graph=True)
    want_h = torch.autograd.grad(rh.sum(), ref[1:])
    for a, b in zip(go, want_o):
        torch.testing.assert_close(a.double(), b, atol=2e-5 * max(1.0, float(b.abs().max())), rtol=2e-5)
    assert float(gh[0].abs().max()) == 0.0  # the state does not read q
    for a, b in zip(gh[1:], want_h):
        torch.testing.assert_close(a.double(), b, atol=2e-5 * max(1.0, float(b.abs().max())), rtol=2e-5)


def test_half_inputs_are_computed_in_fp32_and_returned_in_their_dtype():
    q, k, v, beta, g, _ = (t.detach().half() if t is not None else None for t in _inputs(1, 1, 20, 16, 16, False, 5))
    o, hf = gated_delta_triton(q, k, v, beta, g, chunk=16, return_state=True)
    want, _ = _recurrence(*(t.double() for t in (q, k, v, beta, g)), None)
    assert o.dtype == torch.float16 and hf.dtype == torch.float32
    torch.testing.assert_close(o.double(), want, atol=2e-3 * float(want.abs().max()), rtol=2e-3)


def test_empty_sequence_returns_the_initial_state():
    q, v, beta = torch.zeros(1, 1, 0, 8), torch.zeros(1, 1, 0, 12), torch.zeros(1, 1, 0)
    h0 = torch.randn(1, 1, 8, 12)
    o, hf = gated_delta_triton(q, q, v, beta, beta, initial_state=h0, return_state=True)
    assert o.shape == (1, 1, 0, 12) and torch.equal(hf, h0)


def test_refusals():
    q = torch.zeros(1, 2, 8, 16)
    assert BV == 16 and key_width(16) == 64 and key_width(65) == 128 and key_width(256) == 256
    assert unsupported_reason(q, 64) is None and unsupported_reason(torch.zeros(1, 1, 8, 256), 32) is None
    assert unsupported_reason(torch.zeros(1, 1, 8, 300), 16) == "key width 300 > 256 at chunk 16"
    assert unsupported_reason(torch.zeros(1, 1, 8, 129), 64) == "key width 129 > 128 at chunk 64"
    assert "chunk 48" in unsupported_reason(q, 48)
    beta = torch.ones(1, 2, 8)
    with pytest.raises(ValueError, match="chunk 48"):
        gated_delta_triton(q, q, q, beta, -beta, chunk=48)
    with pytest.raises(ValueError, match="initial_state"):
        gated_delta_triton(q, q, q, beta, -beta, initial_state=torch.zeros(1, 2, 8, 16))


def test_a_batch_over_the_grid_limit_runs_as_several_launches(monkeypatch):
    """Grid y is ``B h``: lowered to 1 here, each batch element is its own launch, the result unchanged."""
    from kernels.triton import grid_limits

    ins = [t.detach() for t in _inputs(2, 1, 20, 16, 16, True, 7)]
    want = gated_delta_triton(*ins[:5], chunk=16, initial_state=ins[5], return_state=True)
    monkeypatch.setattr(grid_limits, "MAX_GRID_Y", 1)
    got = gated_delta_triton(*ins[:5], chunk=16, initial_state=ins[5], return_state=True)
    assert all(torch.equal(a, b) for a, b in zip(got, want))


def test_dispatcher_runs_the_triton_kernels_where_they_apply(monkeypatch):
    """``kernels.gated_delta_rule`` picks these kernels for the tensors ``backend.triton_reason`` accepts (CUDA there;
    forced onto the interpreter here), names and records them, and gives the chunked PyTorch form's result; a key
    too wide for chunk 64 runs at chunk 32; float64 stays on the PyTorch path."""
    import functools
    import importlib

    import kernels
    from kernels.backend import triton_reason

    dispatch = importlib.import_module("kernels.delta_rule")
    monkeypatch.setattr(dispatch, "triton_reason", functools.partial(triton_reason, force=True))
    q, k, v, beta, g, _ = _inputs(1, 2, 21, 8, 8, False, seed=5)
    with kernels.record_backends() as ran:
        o = kernels.gated_delta_rule(q, k, v, beta, g, chunk=16)
    assert ran == ["triton (interpreter) gated-delta (chunk 16)"]
    torch.testing.assert_close(o, gated_delta_chunked(q, k, v, beta, g, chunk=16), atol=2e-5, rtol=2e-5)
    wide = torch.zeros(1, 1, 4, 256)
    assert kernels.gated_delta_backend(wide, 64).endswith("(chunk 32)")
    assert kernels.gated_delta_backend(q.double(), 16) == "torch-cpu chunked"
