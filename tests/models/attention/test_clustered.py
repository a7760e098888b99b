"""Clustered attention (Vyas et al. 2020) against a plain Lloyd loop and exact softmax."""

import math
from functools import partial

import pytest
import torch
from cores import build_core, draw_qkv, run

import kernels

SMALL = dict(d_model=32, n_heads=4, n_layers=1, max_len=64, position="rope")
core_for = partial(build_core, SMALL)
qkv = partial(draw_qkv, via_float64=True)  # each drawn in float64, rounded to float32


def lloyd_reference(x, C, iters, seed):
    """K-means on the rows of ``x [L, d]`` with plain loops; initial centroids at the documented
    seeded positions ``randperm(L)[:C]`` (generator seeded with ``seed * 1000003 + 0xC1A5``)."""
    L = x.shape[0]
    init = torch.randperm(L, generator=torch.Generator().manual_seed(seed * 1000003 + 0xC1A5))[:C]
    mu = [x[int(i)].clone() for i in init]
    for _ in range(iters + 1):
        labels = [min(range(C), key=lambda c: float(((x[i] - mu[c]) ** 2).sum())) for i in range(L)]
        if _ == iters:
            return labels
        for c in range(C):
            members = [x[i] for i in range(L) if labels[i] == c]
            if members:
                mu[c] = torch.stack(members).mean(0)


@pytest.mark.parametrize("n_clusters,iters", [(3, 1), (4, 5), (6, 10)])
def test_clustered_equals_lloyd_and_centroid_softmax(n_clusters, iters):
    cfg, core = core_for("clustered", False, n_clusters=n_clusters, lloyd_iters=iters, seed=3)
    q, k, v = qkv(L=18)
    out, probs, aux = run(core, q, k, v)
    for b in range(2):
        for n in range(4):
            labels = lloyd_reference(q[b, n], n_clusters, iters, seed=3)
            assert aux["clusters"][b, n].tolist() == labels
            for i in range(18):
                members = q[b, n, [j for j in range(18) if labels[j] == labels[i]]]
                row = torch.softmax(members.mean(0) @ k[b, n].T / math.sqrt(8), -1)  # the centroid's row
                torch.testing.assert_close(probs[b, n, i], row, rtol=1e-5, atol=1e-6)
                torch.testing.assert_close(out[b, n, i], row @ v[b, n], rtol=1e-5, atol=1e-5)


def test_clustered_with_a_cluster_per_query_is_exact_softmax():
    """C = L: every query is its own initial centroid and stays alone, so attention is exact."""
    cfg, core = core_for("clustered", False, n_clusters=24)
    q, k, v = qkv(L=24)
    out, probs, _ = run(core, q, k, v)
    ref, p = kernels.attention_ref(q, k, v, causal=False)
    torch.testing.assert_close(probs, p, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)


def test_clustered_queries_of_a_cluster_share_one_row_and_there_are_at_most_c_rows():
    cfg, core = core_for("clustered", False, n_clusters=3)
    q, k, v = qkv(L=20)
    out, probs, aux = run(core, q, k, v)
    lab = aux["clusters"]
    for b in range(2):
        for n in range(4):
            assert len(torch.unique(probs[b, n], dim=0)) <= 3
            same = lab[b, n][:, None] == lab[b, n][None, :]
            rows_equal = (probs[b, n][:, None] == probs[b, n][None, :]).all(-1)
            assert torch.equal(same, rows_equal)


def test_clustered_gradient_reaches_queries_through_the_centroids_only():
    cfg, core = core_for("clustered", False, n_clusters=3)
    q, k, v = [t.requires_grad_(True) for t in qkv(L=20)]
    out, _, aux = run(core, q, k, v)
    out.sum().backward()
    lab = aux["clusters"]
    # queries of one cluster get the same gradient (d centroid / d q_i = 1 / |cluster|)
    for c in range(3):
        g = q.grad[0, 0][lab[0, 0] == c]
        if len(g):
            torch.testing.assert_close(g, g[:1].expand_as(g))
    assert q.grad.abs().sum() > 0 and k.grad.abs().sum() > 0
