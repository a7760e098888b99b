"""Synthesizer (Tay et al. 2021): the dense and random variants against the paper's formulas
computed position by position, and the defining property: random synthesized attention ignores
the input."""

import math

import pytest
import torch

from models import ConfigError, build_model
from models.attention import ATTENTION
from models.context import ForwardContext

SMALL = dict(d_model=32, n_heads=4, n_layers=1, max_len=32, position="sinusoidal")


@pytest.fixture
def core_base():
    """32 positions: the random matrix R is (4, 32, 32), the dense W2 maps to 32 logits."""
    return SMALL


def qkv(L=20, seed=0, B=2, h=4, d=8):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(B, h, L, d, generator=g) for _ in range(3)]


def run(core, q, k, v):
    return core(q, k, v, {}, ForwardContext(tokens=None, position=None, need_weights=True))


def masked_softmax_rows(logits_row, i, causal):
    """softmax of one row of logits, keys j > i removed when causal."""
    row = logits_row.clone()
    if causal:
        row[i + 1 :] = -math.inf
    return torch.softmax(row, -1)


@pytest.mark.parametrize("causal", [True, False])
def test_dense_equals_the_per_position_two_layer_formula(causal, core_for):
    cfg, core = core_for("synthesizer_dense", causal)
    with torch.no_grad():  # non-trivial biases, so a dropped term would show
        core.b1.normal_()
        core.b2.normal_()
    q, k, v = qkv()
    out, probs, _ = run(core, q, k, v)
    B, h, L, d = q.shape
    for b in range(B):
        for n in range(h):
            for i in range(L):
                hidden = torch.relu(q[b, n, i] @ core.w1[n] + core.b1[n])  # W1 x_i + b1
                logits = hidden @ core.w2[n, :, :L] + core.b2[n, :L]  # W2 relu(.) + b2, sliced to L
                p = masked_softmax_rows(logits, i, causal)
                torch.testing.assert_close(probs[b, n, i], p, rtol=1e-5, atol=1e-6)
                torch.testing.assert_close(out[b, n, i], p @ v[b, n], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("causal", [True, False])
def test_random_equals_softmax_of_its_matrix(causal, core_for):
    cfg, core = core_for("synthesizer_random", causal)
    q, k, v = qkv()
    out, probs, _ = run(core, q, k, v)
    L = q.shape[2]
    for n in range(4):
        for i in range(L):
            p = masked_softmax_rows(core.R[n, i, :L], i, causal)
            torch.testing.assert_close(probs[:, n, i], p.expand(2, L), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(out, probs @ v, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("fixed", [False, True])
def test_random_attention_ignores_the_input(fixed, core_for, config_for):
    """The defining property: any queries, keys, values (and batch rows) give the same attention."""
    cfg, core = core_for("synthesizer_random", True, synthesizer_fixed=fixed)
    _, p1, _ = run(core, *qkv(seed=1))
    _, p2, _ = run(core, *[3 * t + 1 for t in qkv(seed=2)])
    torch.testing.assert_close(p1, p2, rtol=0, atol=0)
    torch.testing.assert_close(p1[0], p1[1], rtol=0, atol=0)
    # whole model: two different texts, identical attention in every layer
    model = build_model(config_for("synthesizer_random", n_layers=2, synthesizer_fixed=fixed))
    a = model(torch.randint(0, 256, (1, 16), generator=torch.Generator().manual_seed(0)), return_attention=True)
    b = model(torch.randint(0, 256, (1, 16), generator=torch.Generator().manual_seed(5)), return_attention=True)
    for x, y in zip(a.attentions, b.attentions):
        torch.testing.assert_close(x, y, rtol=0, atol=0)


def test_dense_attention_depends_on_the_input(core_for):
    """The contrast: the dense synthesizer's rows follow its token."""
    cfg, core = core_for("synthesizer_dense", False)
    _, p1, _ = run(core, *qkv(seed=1))
    _, p2, _ = run(core, *qkv(seed=2))
    assert not torch.allclose(p1, p2)


def test_fixed_random_matrix_is_a_buffer_and_learned_one_trains(core_for):
    _, learned = core_for("synthesizer_random", True)
    _, fixed = core_for("synthesizer_random", True, synthesizer_fixed=True)
    assert [n for n, _ in learned.named_parameters()] == ["R"] and list(fixed.parameters()) == []
    assert "R" in dict(fixed.named_buffers())
    torch.testing.assert_close(learned.R.detach(), fixed.R)  # same seeded draw
    q, k, v = qkv()
    v.requires_grad_(True)
    out, _, _ = learned(q, k, v, {}, ForwardContext(tokens=None, position=None))
    out.pow(2).sum().backward()
    assert learned.R.grad is not None and learned.R.grad[:, :20, :20].abs().sum() > 0
    assert learned.R.grad[:, 20:].abs().sum() == 0  # rows beyond L are not used


@pytest.mark.parametrize(
    "key,fixed,want",
    [
        ("synthesizer_dense", False, lambda h, dh, n: h * (dh * dh + dh + dh * n + n)),
        ("synthesizer_random", False, lambda h, dh, n: h * n * n),
        ("synthesizer_random", True, lambda h, dh, n: 0),
    ],
)
def test_parameter_count_is_the_formula_and_matches_the_model(key, fixed, want, core_for):
    cfg, core = core_for(key, synthesizer_fixed=fixed)
    assert sum(p.numel() for p in core.parameters()) == want(4, 8, 32) == ATTENTION[key].n_params(cfg)
    assert cfg.approx_params() == sum(p.numel() for p in build_model(cfg).parameters())


def test_rope_is_refused_because_there_is_no_query_key_product(config_for):
    with pytest.raises(ConfigError) as e:
        config_for("synthesizer_dense", position="rope")
    assert e.value.field == "position" and "sinusoidal" in str(e.value) and "dot product" in str(e.value)


def test_random_matrix_size_is_capped(config_for):
    with pytest.raises(ConfigError) as e:
        config_for("synthesizer_random", max_len=4097, synthesizer_fixed=True)
    assert e.value.field == "max_len" and "4096" in str(e.value)
