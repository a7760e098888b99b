"""Llama 4's chunked attention (Meta 2025) against a float64 softmax written out here: a query sees the
keys of its own chunk of ``attention_chunk_size`` positions up to itself; outputs and gradients, on the CPU
block-sparse path and in the Triton kernel (interpreted on CPU tensors), at lengths that are not a multiple
of the chunk."""

import math

import pytest
import torch

from models import ConfigError, ModelConfig, build_model
from models.attention.sparse import PatternAttention, pattern_block_mask
from models.context import ForwardContext


def reference(q, k, v, c):
    """softmax over j with i // c == j // c and j <= i, by loops over the positions."""
    B, h, L, d = q.shape
    out = torch.zeros_like(q)
    for i in range(L):
        keys = [j for j in range(L) if j // c == i // c and j <= i]
        s = torch.einsum("bhd,bhjd->bhj", q[:, :, i], k[:, :, keys]) / math.sqrt(d)
        out[:, :, i] = torch.einsum("bhj,bhjd->bhd", torch.softmax(s, -1), v[:, :, keys])
    return out


def _qkv(L, d=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(2, 2, L, d, generator=g, dtype=torch.float64, requires_grad=True) for _ in range(3)]


def _ctx(need_weights=False):
    return ForwardContext(tokens=None, position=None, need_weights=need_weights)


@pytest.mark.parametrize("c,L", [(4, 23), (5, 5), (1, 9), (8, 70), (64, 150)])
@pytest.mark.parametrize("need_weights", [False, True])
def test_chunked_core_matches_the_formula(c, L, need_weights):
    cfg = ModelConfig(attention="chunked", attention_chunk_size=c, causal=True)
    q, k, v = _qkv(L)
    out, probs, _ = PatternAttention(cfg)(q, k, v, {}, _ctx(need_weights))
    want = reference(q, k, v, c)
    torch.testing.assert_close(out, want)
    do = torch.randn_like(out)
    got_g = torch.autograd.grad(out, (q, k, v), do)
    want_g = torch.autograd.grad(want, (q, k, v), do)
    for a, b in zip(got_g, want_g):
        torch.testing.assert_close(a, b)
    if need_weights:  # nothing outside the chunk
        i, j = torch.arange(L)[:, None], torch.arange(L)[None, :]
        assert (probs[..., (i // c != j // c) | (j > i)] == 0).all()


def test_chunked_in_the_triton_kernel():
    """The chunked layout through the flash kernel (interpreted), as on a GPU; partial chunks in tiles."""
    pytest.importorskip("triton")
    from kernels.triton.flash.launcher import _flash

    c, L = 12, 70  # chunk boundaries inside the 32-blocks: full, partial and skipped tiles
    cfg = ModelConfig(attention="chunked", attention_chunk_size=c)
    bm = pattern_block_mask(cfg, L, block=32)
    q, k, v = (t.detach().float().requires_grad_() for t in _qkv(L, d=32, seed=1))
    out = _flash(q, k, v, block_mask=bm)
    want = reference(q.double(), k.double(), v.double(), c)
    torch.testing.assert_close(out.double(), want, atol=2e-4, rtol=2e-4)
    do = torch.randn_like(out)
    got_g = torch.autograd.grad(out, (q, k, v), do)
    want_g = torch.autograd.grad(want, (q, k, v), do.double())
    for a, b in zip(got_g, want_g):
        torch.testing.assert_close(a.double(), b.double(), atol=1e-3, rtol=1e-3)


def test_chunked_model_runs_forward_and_backward():
    cfg = ModelConfig(attention="chunked", attention_chunk_size=5, n_layers=2, d_model=32, n_heads=2)
    model = build_model(cfg)
    model(torch.randint(0, 256, (2, 17))).logits.sum().backward()
    assert all(p.grad is not None for p in model.parameters())


@pytest.mark.parametrize(
    "fields,field", [(dict(causal=False, position="sinusoidal"), "causal"), (dict(memory="xl"), "memory")]
)
def test_chunked_refuses_bidirectional_and_memory(fields, field):
    with pytest.raises(ConfigError) as e:
        ModelConfig(attention="chunked", **fields).validate()
    assert e.value.field == field and "chunked" in e.value.allowed
