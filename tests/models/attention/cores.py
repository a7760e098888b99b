"""What the per-mechanism reference tests share: a core built from a small config, its Q/K/V draws,
one call of it, and the parameter count a mechanism adds to full attention. (The properties shared by
whole groups of mechanisms use the ``core_for`` fixture of conftest.py instead.)"""

import torch

from models import ModelConfig, build_model
from models.attention import ATTENTION
from models.context import ForwardContext


def build_core(base, key, causal, *, torch_seed=None, **fields):
    """``(cfg, core)``: the validated config (``base`` + the mechanism ``key``, ``causal`` and ``fields``, the
    config's own ``seed`` among them) and ``ATTENTION[key].build(cfg)``, after ``torch.manual_seed(torch_seed)``
    when that is given."""
    cfg = ModelConfig(**{**base, "attention": key, "causal": causal, **fields}).validate()
    if torch_seed is not None:
        torch.manual_seed(torch_seed)
    return cfg, ATTENTION[key].build(cfg)


def draw_qkv(seed=0, *, B=2, h=4, L=20, d=8, h_kv=None, via_float64=False):
    """``[q, k, v]``: Q (B, h, L, d), then K and V (B, h_kv or h, L, d), from one generator seeded ``seed``;
    ``via_float64``: each drawn in float64, then rounded to float32."""
    g = torch.Generator().manual_seed(seed)
    dtype = torch.float64 if via_float64 else torch.float32
    return [torch.randn(B, h if i == 0 else (h_kv or h), L, d, generator=g, dtype=dtype).float() for i in range(3)]


def context(need_weights=True):
    return ForwardContext(tokens=None, position=None, need_weights=need_weights)


def run(core, q, k, v, mods=None):
    """``(out, effective attention, aux)`` of one call."""
    return core(q, k, v, mods or {}, context())


def check_parameter_count(base, key, extra_per_layer, **fields):
    """The size estimate of ``key`` is full attention's plus ``extra_per_layer`` per layer, and equals the
    built model's parameter count."""
    cfg = ModelConfig(**base, attention=key, **fields).validate()
    full = ModelConfig(**base, attention="full", **fields).validate().approx_params()
    assert cfg.approx_params() - full == base["n_layers"] * extra_per_layer
    assert sum(p.numel() for p in build_model(cfg).parameters()) == cfg.approx_params()


def bias_and_dense(h: int, length: int, seed: int = 1):
    """A T5-like ``rel_bias`` table and ALiBi slopes as a core's modifiers, and the dense bias they mean:
    ``[h, L, L]``, written out element by element."""
    g = torch.Generator().manual_seed(seed)
    rel_bias = torch.randn(h, 2 * length - 1, generator=g)
    slopes = torch.rand(h, generator=g)
    dense = torch.empty(h, length, length)
    for n in range(h):
        for i in range(length):
            for j in range(length):
                dense[n, i, j] = rel_bias[n, j - i + length - 1] - slopes[n] * abs(j - i)
    return {"rel_bias": rel_bias, "alibi_slopes": slopes}, dense


def pair_mask(length: int, causal: bool):
    """The allowed (query, key) pairs of full attention: ``j <= i`` when causal."""
    i, j = torch.arange(length)[:, None], torch.arange(length)[None, :]
    return (j <= i) if causal else torch.ones(length, length, dtype=torch.bool)
