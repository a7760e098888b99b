"""YaRN (Peng et al. 2023) on the ``rope`` encoding: the inverse frequencies and the attention factor against a
float64 reference written from the paper's quantities (wavelengths, turns in the original context), and against
transformers' own ``_compute_yarn_parameters``; the rotation the model applies against a float64 rotation; the
fields' refusals."""

import math

import pytest
import torch

from models import ConfigError, ModelConfig
from models.positions.rope import Rope
from models.positions.yarn import yarn_inv_freq, yarn_mscale

# (head dim, base, factor s, original context L, beta_fast, beta_slow)
CASES = [
    (64, 150000.0, 32.0, 4096, 32.0, 1.0),  # gpt-oss
    (16, 10000.0, 4.0, 64, 32.0, 1.0),
    (128, 1_000_000.0, 4.0, 32768, 32.0, 1.0),  # Qwen2.5 long context
    (32, 500000.0, 8.0, 8192, 16.0, 2.0),
    (16, 10000.0, 4.0, 256, 32.0, 1.0),  # the test checkpoint's: the ramp covers pairs 1-3 of 8
]


def paper_reference(dim, base, s, L, alpha_fast, beta_slow, truncate):
    """float64 from the paper's definitions (section 3.2, "NTK-by-parts"; 3.4 for the temperature): pair
    ``d`` has wavelength ``lambda_d = 2 pi base^(2d/D)``; in the original context it turns ``r_d = L /
    lambda_d`` times. Pairs with ``r`` above ``beta_fast`` keep their frequency, below ``beta_slow`` are
    divided by ``s``; the ramp between them is linear in the pair index (the reference code's form), from the
    index where ``r = beta_fast`` to the one where ``r = beta_slow`` (rounded outward when truncated)."""
    n = dim // 2
    theta = [base ** (-2.0 * d / dim) for d in range(n)]

    def index_at(turns):  # solve L / (2 pi base^(2d/D)) = turns for d
        return dim * math.log(L / (2 * math.pi * turns)) / (2 * math.log(base))

    lo, hi = index_at(alpha_fast), index_at(beta_slow)
    if truncate:
        lo, hi = math.floor(lo), math.ceil(hi)
    lo, hi = max(lo, 0), min(hi, dim - 1)
    if lo == hi:
        hi += 0.001
    out = []
    for d in range(n):
        interpolate = min(max((d - lo) / (hi - lo), 0.0), 1.0)
        out.append(theta[d] / s * interpolate + theta[d] * (1 - interpolate))
    temperature = 0.1 * math.log(s) + 1.0  # sqrt(1 / t)
    return torch.tensor(out, dtype=torch.float64), temperature


def transformers_yarn(dim, base, s, L, fast, slow, truncate, **extra):
    transformers = pytest.importorskip("transformers")
    from transformers.modeling_rope_utils import _compute_yarn_parameters

    params = dict(
        rope_type="yarn",
        rope_theta=base,
        factor=s,
        original_max_position_embeddings=L,
        beta_fast=fast,
        beta_slow=slow,
        truncate=truncate,
        **extra,
    )
    config = transformers.GptOssConfig(head_dim=dim, max_position_embeddings=int(L * s), rope_parameters=params)
    inv, factor = _compute_yarn_parameters(config)
    return inv.double(), factor


@pytest.mark.parametrize("truncate", [True, False])
@pytest.mark.parametrize("case", CASES)
def test_inv_freq_and_factor_equal_the_paper_and_transformers(case, truncate):
    want, temperature = paper_reference(*case, truncate)
    got = yarn_inv_freq(*case, truncate)
    assert got.dtype == torch.float64
    torch.testing.assert_close(got, want, rtol=1e-12, atol=0)
    theirs, their_factor = transformers_yarn(*case, truncate)  # computed in float32 there
    torch.testing.assert_close(theirs, want, rtol=3e-7, atol=0)
    assert yarn_mscale(case[2]) == pytest.approx(temperature, rel=1e-12)
    assert their_factor == pytest.approx(temperature, rel=1e-12)


def test_truncate_and_the_ramp_change_the_frequencies():
    dim, base, s, L = 16, 10000.0, 4.0, 256
    a, b = yarn_inv_freq(dim, base, s, L, 32.0, 1.0, True), yarn_inv_freq(dim, base, s, L, 32.0, 1.0, False)
    assert (a - b).abs().max() > 1e-4  # the rounding moves the ramp
    theta = base ** (-torch.arange(dim // 2, dtype=torch.float64) * 2 / dim)
    assert torch.equal(b[0], theta[0])  # the fastest pair extrapolates
    torch.testing.assert_close(b[-1], theta[-1] / s)  # the slowest is interpolated
    mixed = (b - theta).abs().gt(1e-12) & (b - theta / s).abs().gt(1e-12)
    assert mixed.any()  # and some pairs lie on the ramp


def test_explicit_attention_factor_and_mscale_ratio_follow_transformers():
    _, factor = transformers_yarn(16, 10000.0, 4.0, 64, 32.0, 1.0, True, attention_factor=1.5)
    assert yarn_mscale(4.0, 1.5) == factor == 1.5
    _, factor = transformers_yarn(16, 10000.0, 4.0, 64, 32.0, 1.0, True, mscale=0.707, mscale_all_dim=0.707)
    assert factor == pytest.approx(1.0)
    assert yarn_mscale(1.0) == 1.0  # no extension, no temperature


@pytest.mark.parametrize("truncate", [True, False])
def test_rope_module_rotates_with_yarn_angles_and_scales_q_and_k(truncate):
    cfg = ModelConfig(
        d_model=32,
        n_heads=2,
        position="rope",
        rope_base=500.0,
        yarn_factor=4.0,
        yarn_original_max_len=16,
        yarn_truncate=truncate,
    ).validate()
    rope = Rope(cfg)
    q = torch.randn(1, 2, 5, 16, dtype=torch.float64, requires_grad=True)
    k = torch.randn(1, 2, 9, 16, dtype=torch.float64, requires_grad=True)
    qr, kr, mods = rope.modify(q, k, layer=0, k_start=3)
    assert mods == {}
    inv, m = paper_reference(16, 500.0, 4.0, 16, 32.0, 1.0, truncate)

    def ref(x, positions):  # rotate-half pairs (k, k + 8), angle pos * inv_k, times m
        out = torch.empty_like(x)
        for i, p in enumerate(positions):
            ang = p * inv
            x1, x2 = x[..., i, :8], x[..., i, 8:]
            out[..., i, :8] = m * (x1 * torch.cos(ang) - x2 * torch.sin(ang))
            out[..., i, 8:] = m * (x2 * torch.cos(ang) + x1 * torch.sin(ang))
        return out

    torch.testing.assert_close(kr, ref(k.detach(), range(3, 12)))
    torch.testing.assert_close(qr, ref(q.detach(), range(7, 12)))  # the last 5 keys' positions
    (qr.sum() + kr.sum()).backward()
    assert q.grad.abs().sum() > 0 and k.grad.abs().sum() > 0


@pytest.mark.parametrize(
    "changes, field",
    [
        (dict(yarn_factor=0.5), "yarn_factor"),
        (dict(yarn_factor=4.0, rope_scale=2.0), "rope_scale"),
        (dict(yarn_factor=4.0, yarn_beta_fast=1.0, yarn_beta_slow=2.0), "yarn_beta_fast"),
        (dict(yarn_factor=4.0, yarn_attention_factor=-1.0), "yarn_attention_factor"),
        (dict(yarn_factor=4.0, position="alibi"), "yarn_factor"),
        (dict(yarn_factor=4.0, layer_schedule="sliding_window,full", rope_local_base=100.0), "rope_local_base"),
    ],
)
def test_bad_yarn_settings_are_refused_by_name(changes, field):
    with pytest.raises(ConfigError) as e:
        ModelConfig(d_model=32, n_heads=2, **changes).validate()
    assert e.value.field == field
