"""Lite (Wu et al. 2020, long-short range attention) against a plain-PyTorch formula written here (explicit
loops), and its defining property: its convolution heads are a renormalised, causal-when-causal moving average."""

import math
from functools import partial

import pytest
import torch
from cores import build_core, check_parameter_count, context, draw_qkv

from models import ConfigError, ModelConfig, build_model

SMALL = dict(d_model=32, n_heads=4, n_layers=2, max_len=64, n_inducing=5, conv_kernel=4)
H, L, D = 4, 12, 8
_core = partial(build_core, SMALL, torch_seed=0)
_qkv = partial(draw_qkv, L=L)


def _conv_ref(v, w, causal):
    """Loop form: out_i = sum over in-range taps of w_t v_(i - pad + t), divided by those taps' weight."""
    K = w.shape[-1]
    pad = K - 1 if causal else K // 2
    out = torch.zeros_like(v)
    for n in range(v.shape[1]):
        for i in range(v.shape[2]):
            num, den = 0.0, 0.0
            for t in range(K):
                j = i - pad + t
                if 0 <= j < v.shape[2]:
                    num = num + w[n, t] * v[:, n, j]
                    den = den + w[n, t]
            out[:, n, i] = num / den
    return out


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("K", [1, 4, 5])
def test_lite_splits_heads_into_attention_and_lightweight_convolution(causal, K):
    cfg, core = _core("lite", causal, conv_kernel=K, position="alibi")
    q, k, v = _qkv(h_kv=2)
    slopes = torch.tensor([0.5, 0.25, 0.125, 0.0625])
    out, probs, _ = core(q, k, v, {"alibi_slopes": slopes}, context())
    kk, vv = k.repeat_interleave(2, 1), v.repeat_interleave(2, 1)
    i, j = torch.arange(L)[:, None], torch.arange(L)[None, :]
    dist = (i - j).abs() if not causal else (i - j)
    for n in range(2):  # attention heads: softmax with their own ALiBi slope
        s = q[:, n] @ kk[:, n].transpose(-1, -2) / math.sqrt(D) - slopes[n] * dist.abs()
        if causal:
            s = s.masked_fill(j > i, -math.inf)
        p = torch.softmax(s, -1)
        torch.testing.assert_close(probs[:, n], p, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(out[:, n], p @ vv[:, n], rtol=1e-5, atol=1e-5)
    w = torch.softmax(core.kernel.detach(), -1)  # (2, K)
    torch.testing.assert_close(out[:, 2:], _conv_ref(vv[:, 2:], w, causal), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(probs.sum(-1), torch.ones(2, H, L))
    torch.testing.assert_close(probs @ vv, out, rtol=1e-5, atol=1e-5)  # the map is what is applied
    fast, _, _ = core(q, k, v, {"alibi_slopes": slopes}, context(False))  # kernels.attention path
    torch.testing.assert_close(fast, out, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("position", ["rope", "t5", "alibi", "shaw", "xl"])
@pytest.mark.parametrize("causal", [True, False])
def test_lite_kernel_path_equals_dense_reference_path_for_every_position(position, causal):
    """Without weights the attention heads run kernels.attention on their slice of the modifiers;
    with weights, the dense reference: both must give the same logits."""
    model = build_model(ModelConfig(**{**SMALL, "attention": "lite", "causal": causal, "position": position}))
    t = torch.randint(0, 256, (2, 30), generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(model(t).logits, model(t, return_attention=True).logits, rtol=1e-4, atol=1e-4)


def test_lite_causal_convolution_reads_no_future():
    cfg, core = _core("lite", True, conv_kernel=5)
    q, k, v = _qkv()
    base, _, _ = core(q, k, v, {}, context(False))
    v2 = v.clone()
    v2[:, :, 7:] += 5.0
    out, _, _ = core(q, k, v2, {}, context(False))
    torch.testing.assert_close(out[:, :, :7], base[:, :, :7])
    assert not torch.allclose(out[:, 2:, 7:], base[:, 2:, 7:])


@pytest.mark.parametrize("n_heads", [1, 3])
def test_lite_needs_an_even_number_of_heads(n_heads):
    with pytest.raises(ConfigError) as e:
        ModelConfig(**{**SMALL, "attention": "lite", "n_heads": n_heads, "d_model": 24}).validate()
    assert e.value.field == "n_heads"


# ------------------------------------------------------------------------------ sizes
@pytest.mark.parametrize(
    "key,extra,kw",
    [
        ("lite", (H // 2) * 4, {}),
    ],
)
def test_parameter_count_per_layer(key, extra, kw):
    check_parameter_count(SMALL, key, extra, **kw)
