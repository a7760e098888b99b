"""Sparse Sinkhorn attention (Tay et al. 2020) against a loop implementation of the paper in probability
space (not log space), plus the Sinkhorn balancing's own properties."""

import math
from functools import partial

import pytest
import torch
from cores import build_core, draw_qkv, run

import kernels
from models.attention import ATTENTION
from models.attention.sinkhorn import sinkhorn

SMALL = dict(d_model=32, n_heads=4, n_layers=1, max_len=64, position="rope")
core_for = partial(build_core, SMALL)
qkv = draw_qkv


def sinkhorn_reference(core, q, k, v, cfg):
    """The paper's steps with loops and probabilities; returns (out, effective attention)."""
    B, h, L, d = q.shape
    b = min(cfg.block_size, L)
    nb = -(-L // b)
    blocks = [list(range(a * b, min((a + 1) * b, L))) for a in range(nb)]
    out = torch.zeros(B, h, L, d)
    probs = torch.zeros(B, h, L, L)
    for bb in range(B):
        for n in range(h):
            kk, vv, qq = k[bb, n], v[bb, n], q[bb, n]
            summaries = []
            for a in range(nb):
                src = [j for c in range(a) for j in blocks[c]] if cfg.causal else blocks[a]
                summaries.append(kk[src].mean(0) if src else torch.zeros(d))
            R = torch.stack(
                [torch.relu(s @ core.w1[n] + core.b1[n]) @ core.w2[n, :, :nb] + core.b2[n, :nb] for s in summaries]
            ).detach()
            allowed = torch.tril(torch.ones(nb, nb), -1) if cfg.causal else torch.ones(nb, nb)
            P = torch.exp(R.double() / cfg.sinkhorn_temperature) * allowed
            for _ in range(cfg.sinkhorn_iters):
                if cfg.causal:  # column c over the rows up to a, from the last row (earlier rows still unscaled)
                    for a in reversed(range(nb)):
                        for c in range(nb):
                            tot = sum(P[r, c] for r in range(a + 1))
                            P[a, c] = P[a, c] / tot if tot > 0 else 0.0
                else:
                    P = P / P.sum(0, keepdim=True)
                P = P / P.sum(1, keepdim=True).clamp_min(1e-300)
            P = P.float()
            for a in range(nb):
                keys, vals, where = [], [], []
                for t in range(b):  # sorted slot t: mix of the blocks where offset t is a position
                    w = {c: float(P[a, c]) for c in range(nb) if t < len(blocks[c]) and P[a, c] > 0}
                    tot = sum(w.values())
                    if tot > 0:
                        keys.append(sum(wc / tot * kk[blocks[c][t]] for c, wc in w.items()))
                        vals.append(sum(wc / tot * vv[blocks[c][t]] for c, wc in w.items()))
                        where.append({blocks[c][t]: wc / tot for c, wc in w.items()})
                for i in blocks[a]:
                    own = [j for j in blocks[a] if j <= i or not cfg.causal]
                    s = torch.stack([qq[i] @ kk[j] for j in own] + [qq[i] @ x for x in keys]) / math.sqrt(d)
                    p = torch.softmax(s, -1)
                    out[bb, n, i] = p[: len(own)] @ vv[own] + (p[len(own) :] @ torch.stack(vals) if vals else 0)
                    for j, pj in zip(own, p[: len(own)]):
                        probs[bb, n, i, j] += pj
                    for spread, ps in zip(where, p[len(own) :]):
                        for j, wj in spread.items():
                            probs[bb, n, i, j] += ps * wj
    return out, probs


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("L,block,iters", [(20, 5, 7), (23, 5, 3), (13, 4, 1)])
def test_sinkhorn_equals_the_loop_reference(causal, L, block, iters):
    cfg, core = core_for("sinkhorn", causal, block_size=block, sinkhorn_iters=iters, sinkhorn_temperature=0.5)
    with torch.no_grad():  # a sharper sorting network than the init, so the sorted block is not a plain average
        core.w2.mul_(4.0)
    q, k, v = qkv(L=L)
    out, probs, _ = run(core, q, k, v)
    ref, p = sinkhorn_reference(core, q, k, v, cfg)
    torch.testing.assert_close(probs, p, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("causal", [True, False])
def test_sinkhorn_with_one_block_is_exact_softmax(causal):
    """One block: bidirectional, the sorted block is the block itself (each key twice, same softmax);
    causal, block 0 has no past block to sort in, so it is causal softmax."""
    cfg, core = core_for("sinkhorn", causal, block_size=32)
    q, k, v = qkv(L=20)
    out, probs, _ = run(core, q, k, v)
    ref, p = kernels.attention_ref(q, k, v, causal=causal)
    torch.testing.assert_close(probs, p, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)


def test_sinkhorn_balancing_converges_to_a_doubly_stochastic_matrix():
    logits = torch.randn(3, 6, 6, generator=torch.Generator().manual_seed(0))
    allowed = torch.ones(6, 6, dtype=torch.bool)
    for iters, tol in ((1, None), (50, 1e-4)):
        P = sinkhorn(logits, allowed, iters, causal=False)
        torch.testing.assert_close(P.sum(-1), torch.ones(3, 6))  # ends on the rows: exact
        if tol:
            torch.testing.assert_close(P.sum(-2), torch.ones(3, 6), rtol=0, atol=tol)
    # logits peaked on a permutation, low temperature -> that permutation matrix (the "sorting")
    perm = torch.eye(6)[torch.tensor([3, 0, 5, 1, 4, 2])]
    P = sinkhorn((perm + 0.1 * logits) / 0.05, allowed, 20, causal=False)
    torch.testing.assert_close(P, perm.expand(3, 6, 6), rtol=0, atol=1e-3)


def test_causal_sinkhorn_rows_use_only_past_blocks_and_ignore_later_rows():
    logits = torch.randn(2, 5, 5, generator=torch.Generator().manual_seed(0), requires_grad=True)
    allowed = torch.ones(5, 5, dtype=torch.bool).tril(-1)
    P = sinkhorn(logits, allowed, 7, causal=True)
    assert (P[:, 0] == 0).all() and (P.triu() == 0).all()  # block 0 sorts nothing in; only c < a
    torch.testing.assert_close(P[:, 1:].sum(-1), torch.ones(2, 4))
    P[:, 2].sum().backward()
    assert (logits.grad[:, 3:] == 0).all() and logits.grad[:, 2].abs().sum() > 0  # row 2 reads rows <= 2 only
    assert torch.isfinite(logits.grad).all()


def test_sinkhorn_sorting_network_learns():
    cfg, core = core_for("sinkhorn", False, block_size=4)
    q, k, v = qkv(L=20)
    out, _, _ = run(core, q, k, v)
    out.pow(2).sum().backward()
    for p in (core.w1, core.b1, core.w2, core.b2):
        assert p.grad is not None and p.grad.abs().sum() > 0
    assert core.w2.grad[:, :, 5:].abs().sum() == 0  # only the first nb = 5 of ceil(64 / 4) block logits are used
    assert sum(p.numel() for p in core.parameters()) == ATTENTION["sinkhorn"].n_params(cfg) == 4 * (64 + 8 + 9 * 16)
