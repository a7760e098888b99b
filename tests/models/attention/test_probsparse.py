"""ProbSparse attention (Informer, Zhou et al. 2021) against the paper's selection rule computed query by query."""

import math
from functools import partial

import pytest
import torch
from cores import build_core, draw_qkv, run

import kernels
from models import ModelConfig
from models.attention.probsparse import n_active

SMALL = dict(d_model=32, n_heads=4, n_layers=1, max_len=64, position="rope")
core_for = partial(build_core, SMALL)
qkv = partial(draw_qkv, via_float64=True)  # each drawn in float64, rounded to float32


def probsparse_reference(q, k, v, u, causal, bias=None):
    """Informer's rule query by query; causal selection by a running top-u over queries <= i."""
    B, h, L, d = q.shape
    probs = torch.zeros(B, h, L, L)
    for b in range(B):
        for n in range(h):
            rows, m = [], []
            for i in range(L):
                keys = range(i + 1) if causal else range(L)
                s = torch.stack(
                    [q[b, n, i] @ k[b, n, j] / math.sqrt(d) + (0 if bias is None else bias[n, i, j]) for j in keys]
                )
                m.append(float(s.max() - s.mean()))  # M(q_i, K), every visible key
                rows.append(s)
            if causal:
                active = [sum(m[j] >= m[i] for j in range(i)) < u for i in range(L)]
            else:
                top = sorted(range(L), key=lambda i: -m[i])[:u]
                active = [i in top for i in range(L)]
            for i in range(L):
                n_keys = len(rows[i])
                probs[b, n, i, :n_keys] = torch.softmax(rows[i], -1) if active[i] else 1.0 / n_keys
    return probs @ v, probs


def test_probsparse_u_is_informers_formula():
    cfg = ModelConfig(probsparse_factor=5)
    assert [n_active(cfg, L) for L in (1, 2, 3, 8, 40, 1000)] == [0, 2, 3, 8, 5 * 4, 5 * 7]  # capped at L below 15
    assert n_active(ModelConfig(probsparse_factor=100), 40) == 40


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("factor", [1, 2])
def test_probsparse_equals_the_rule_query_by_query(causal, factor):
    cfg, core = core_for("probsparse", causal, probsparse_factor=factor)
    q, k, v = qkv(L=21)
    out, probs, _ = run(core, q, k, v)
    u = factor * math.ceil(math.log(21))
    ref, p = probsparse_reference(q, k, v, u, causal)
    torch.testing.assert_close(probs, p, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    full = torch.isclose(probs, kernels.attention_ref(q, k, v, causal=causal)[1], atol=1e-6).all(-1)
    n_full = full.sum(-1)
    if causal:  # a running top-u activates at least u queries (the first u are always active)
        assert (n_full >= u).all() and full[..., :u].all()
    else:
        assert (n_full == u).all()


@pytest.mark.parametrize("causal", [True, False])
def test_lazy_queries_output_the_mean_or_cumulative_mean_of_v(causal):
    cfg, core = core_for("probsparse", causal, probsparse_factor=1)
    q, k, v = qkv(L=30)
    out, probs, _ = run(core, q, k, v)
    mean = v.cumsum(2) / torch.arange(1, 31).view(1, 1, 30, 1) if causal else v.mean(2, keepdim=True).expand_as(v)
    exact = kernels.attention_ref(q, k, v, causal=causal)[0]
    lazy = ~torch.isclose(out, exact, atol=1e-6).all(-1)
    u = math.ceil(math.log(30))
    if causal:  # the running top-u activates more than u queries, but not all
        assert (lazy.sum(-1) > 0).all() and not lazy[..., :u].any()
    else:
        assert (lazy.sum(-1) == 30 - u).all()
    torch.testing.assert_close(out[lazy], mean[lazy], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("position", ["alibi", "t5"])
@pytest.mark.parametrize("causal", [True, False])
def test_probsparse_with_every_query_active_is_exact_biased_softmax(position, causal):
    cfg, core = core_for("probsparse", causal, probsparse_factor=1000, position=position)
    q, k, v = qkv(L=20)
    g = torch.Generator().manual_seed(1)
    mods = (
        {"alibi_slopes": torch.rand(4, generator=g)}
        if position == "alibi"
        else {"rel_bias": torch.randn(4, 39, generator=g)}
    )
    out, probs, _ = run(core, q, k, v, mods)
    ref, p = kernels.attention_ref(q, k, v, causal=causal, **mods)
    torch.testing.assert_close(probs, p, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)


def test_probsparse_bias_enters_the_measurement():
    """With a t5 bias and few active queries, the selection follows the biased scores."""
    cfg, core = core_for("probsparse", False, probsparse_factor=1, position="t5")
    q, k, v = qkv(L=20)
    rel_bias = 3 * torch.randn(4, 39, generator=torch.Generator().manual_seed(2))
    out, probs, _ = run(core, q, k, v, {"rel_bias": rel_bias})
    i, j = torch.arange(20)[:, None], torch.arange(20)[None, :]
    bias = rel_bias[:, j - i + 19]  # (h, L, L)
    ref, p = probsparse_reference(q, k, v, 3, False, bias=bias)
    torch.testing.assert_close(probs, p, rtol=1e-5, atol=1e-6)
