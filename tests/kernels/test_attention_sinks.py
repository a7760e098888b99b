"""Learned attention sinks in every attention backend, against the float64 formula (tests/sink_formula.py).

The dense reference, ``kernels.attention`` on CPU (the block-sparse path: SDPA has no sink term) and
the Triton kernels in the interpreter: outputs, rows that sum to less than one, and the gradients of
q, k, v and the sink logits against torch.autograd on the formula.
"""

import pytest
import torch
from sink_formula import sink_attention

import kernels
from kernels.block_mask import block_mask_from_rows
from kernels.triton.flash.launcher import _flash, flash_attention


def _inputs(B, h, hkv, lq, lk, d, seed, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(*s, generator=g) for s in ((B, h, lq, d), (B, hkv, lk, d), (B, hkv, lk, d)))
    sinks = torch.randn(h, generator=g) * 2  # some heads dominated by the sink, some not
    return [t.to(dtype).requires_grad_() for t in (q, k, v, sinks)]


def _band(lq, lk, w):
    """A sliding-window pattern with a few query rows that allow no key at all."""
    i = torch.arange(lq)[:, None] + (lk - lq)
    j = torch.arange(lk)[None, :]
    allowed = (i - j).abs() < w
    allowed[3:5] = False  # rows with no allowed key: all mass on the sink, output 0
    return allowed


def _grads(out, ins, do):
    return torch.autograd.grad(out, ins, do)


@pytest.mark.parametrize("causal", [False, True])
def test_reference_rows_sum_below_one_and_match_formula(causal):
    q, k, v, s = _inputs(2, 4, 2, 9, 13, 8, seed=1)
    out, p = kernels.attention_ref(q, k, v, causal=causal, sinks=s)
    want_out, want_p = sink_attention(q, k, v, s, causal=causal)
    torch.testing.assert_close(p, want_p)
    torch.testing.assert_close(out, want_out)
    rows = p.sum(-1)
    assert (rows < 1).all() and (rows > 0).all()
    # the sink's share is exactly 1 - row sum = exp(s - lse) with the sink in the log-sum-exp
    a = (q @ k.repeat_interleave(2, 1).transpose(-1, -2)) / 8**0.5
    if causal:
        a = a.masked_fill(torch.ones(9, 13, dtype=torch.bool).triu(13 - 9 + 1), float("-inf"))
    lse = torch.logsumexp(torch.cat([a, s.view(1, 4, 1, 1).expand(2, 4, 9, 1)], -1), -1)
    torch.testing.assert_close(1 - rows, torch.exp(s.view(1, 4, 1) - lse))


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("pattern", ["dense", "band"])
def test_cpu_path_forward_and_backward(causal, pattern):
    """``kernels.attention`` on CPU: a dense call (its all-visited layout) and a block-sparse band with
    empty rows, fp64, outputs and gradients of q, k, v and the sinks against the formula."""
    lq, lk = 70, 90
    q, k, v, s = _inputs(2, 4, 2, lq, lk, 8, seed=2)
    kw, allowed = {"causal": causal}, None
    if pattern == "band":
        allowed = _band(lq, lk, 20)
        if causal:
            allowed &= torch.arange(lk)[None, :] <= torch.arange(lq)[:, None] + (lk - lq)
        kw = {"block_mask": block_mask_from_rows(lambda a, b: allowed[a:b], lq, lk, 16, torch.device("cpu"))}
    with kernels.record_backends() as ran:
        out = kernels.attention(q, k, v, sinks=s, **kw)
    assert ran == ["torch-cpu block-sparse"]
    want, p = sink_attention(q, k, v, s, allowed=allowed, causal=causal and pattern == "dense")
    torch.testing.assert_close(out, want)
    do = torch.randn_like(out)
    for name, a, b in zip("qkvs", _grads(out, (q, k, v, s), do), _grads(want, (q, k, v, s), do)):
        torch.testing.assert_close(a, b, msg=name)
    if pattern == "band":
        assert out[:, :, 3:5].abs().max() == 0 and p[:, :, 3:5].abs().max() == 0


def test_sink_gradient_closed_form():
    """d s_n = -sum_{b, i} p_sink_i (dO_i . O_i), the formula the Triton backward evaluates."""
    q, k, v, s = _inputs(2, 3, 3, 6, 6, 4, seed=3)
    out, p = sink_attention(q, k, v, s, causal=True)
    do = torch.randn_like(out)
    (ds,) = torch.autograd.grad(out, s, do)
    p_sink = 1 - p.sum(-1)  # (B, h, Lq)
    torch.testing.assert_close(ds, -(p_sink * (do * out).sum(-1)).sum((0, 2)).detach())


def _triton_check(q, k, v, s, tol, allowed=None, **kw):
    ins = (q, k, v, s)
    out = flash_attention(q, k, v, sinks=s, **kw) if "config" not in kw else _flash(q, k, v, sinks=s, **kw)
    ref = [t.detach().double().requires_grad_() for t in ins]
    want, _ = sink_attention(*ref, allowed=allowed, causal=kw.get("causal", False))
    do = torch.randn(out.shape, generator=torch.Generator().manual_seed(7)).to(out.dtype)
    got = (out, *_grads(out, ins, do))
    exp = (want, *_grads(want, ref, do.double()))
    for name, a, b in zip(["out", "dq", "dk", "dv", "dsinks"], got, exp):
        assert torch.isfinite(a).all(), name
        scale = max(1.0, b.abs().max().item())
        torch.testing.assert_close(a.double(), b, atol=tol * scale, rtol=tol, msg=name)


@pytest.mark.parametrize("causal", [False, True])
def test_triton_dense_fp32(causal):
    q, k, v, s = _inputs(2, 4, 2, 40, 56, 32, seed=4, dtype=torch.float32)
    _triton_check(
        q, k, v, s, 2e-4, causal=causal, config={"BLOCK_M": 16, "BLOCK_N": 16, "num_warps": 4, "num_stages": 1}
    )


def test_triton_fp16_production_tiles():
    q, k, v, s = _inputs(1, 2, 1, 70, 100, 32, seed=5, dtype=torch.float16)
    _triton_check(q, k, v, s.detach().float().requires_grad_(), 2e-2, causal=True)


def test_triton_block_sparse_with_empty_rows():
    lq, lk = 64, 96
    allowed = _band(lq, lk, 24)
    bm = block_mask_from_rows(lambda a, b: allowed[a:b], lq, lk, 16, torch.device("cpu"))
    q, k, v, s = _inputs(1, 2, 2, lq, lk, 32, seed=6, dtype=torch.float32)
    _triton_check(q, k, v, s, 2e-4, allowed=allowed, block_mask=bm)


def test_dispatch_names_and_shape_check():
    q, k, v, s = _inputs(1, 2, 2, 8, 8, 32, seed=8, dtype=torch.float32)
    assert kernels.attention_backend("cpu", sinks=s) == "torch-cpu block-sparse"
    assert kernels.attention_backend("cpu") == "sdpa (cpu)"
    with pytest.raises(ValueError, match="sinks"):
        flash_attention(q, k, v, sinks=torch.zeros(3))
