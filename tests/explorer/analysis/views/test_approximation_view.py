"""The ``approximation`` view against exact softmax recomputed here from the layer's own projections,
and LSH's shared-QK reference (unit-normalised keys, self only as a fallback)."""

import math

import numpy as np
import pytest
import torch
from view_runs import TEXT, TINY, app_run

from models import ModelConfig

L = len(TEXT.encode())


@torch.no_grad()
def _exact_from_projections(model, out, layer, causal):
    """softmax(q k^T / sqrt(d_h)) with q, k from the layer's own projections (no position, no norm)."""
    cfg = model.cfg
    attn = model.stack.blocks[layer].attn
    x = out.layers[layer].input
    h, hkv, dh = cfg.n_heads, cfg.kv_heads, cfg.d_head
    q = attn.q_proj(x).view(1, L, h, dh).transpose(1, 2)
    k = attn.k_proj(x).view(1, L, hkv, dh).transpose(1, 2).repeat_interleave(h // hkv, dim=1)
    s = q @ k.transpose(-1, -2) / math.sqrt(dh)
    if causal:
        s = s.masked_fill(~torch.ones(L, L, dtype=torch.bool).tril(), float("-inf"))
    return torch.softmax(s, -1)[0].numpy()


@pytest.mark.parametrize(
    "attention,extra",
    [
        ("linear", dict(causal=True, position="none")),
        ("nystrom", dict(causal=False, n_landmarks=4, n_kv_heads=1, position="sinusoidal")),  # added to the input
    ],
)
def test_approximation_error_is_effective_minus_exact_softmax(attention, extra):
    cfg = ModelConfig(attention=attention, norm_placement="none", **TINY, **extra)
    views, out, model = app_run(cfg)
    a = views.items["approximation"]
    allowed = np.tril(np.ones((L, L), bool)) if cfg.causal else np.ones((L, L), bool)
    for i in range(cfg.n_layers):
        exact = _exact_from_projections(model, out, i, cfg.causal)
        eff = out.attentions[i][0].numpy()
        err = np.abs(eff - exact)
        np.testing.assert_allclose(a.exact[i], exact, atol=2e-6)
        np.testing.assert_allclose(a.effective[i], eff, atol=1e-7)
        np.testing.assert_allclose(a.error[i], err, atol=2e-6)
        np.testing.assert_allclose(a.max_error[i], err.max(axis=(1, 2)), atol=2e-6)
        np.testing.assert_allclose(a.mean_error[i], err[:, allowed].mean(-1), atol=1e-6)
    assert a.max_error.max() > 1e-3  # an approximation, not exact softmax


def test_lsh_reference_is_shared_qk_softmax_without_self():
    cfg = ModelConfig(attention="lsh", position="none", norm_placement="none", n_buckets=4, chunk_size=4, **TINY)
    views, out, model = app_run(cfg)
    a = views.items["approximation"]
    x = out.layers[0].input
    with torch.no_grad():
        q = model.stack.blocks[0].attn.q_proj(x).view(1, L, 2, 8).transpose(1, 2)[0]  # (h, L, d_h)
    kn = q / q.norm(dim=-1, keepdim=True)
    s = (q @ kn.transpose(-1, -2) / math.sqrt(8)).masked_fill(
        ~torch.ones(L, L, dtype=torch.bool).tril(-1), float("-inf")
    )
    s[:, 0, 0] = 0.0  # the first query has no other key: it attends itself
    np.testing.assert_allclose(a.exact[0], torch.softmax(s, -1).numpy(), atol=2e-6)
    np.testing.assert_array_equal(views.items["groups"].labels[0], out.layers[0].buckets[0].numpy())
    assert views.items["groups"].n_groups == 4
