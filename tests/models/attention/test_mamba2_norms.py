"""Mamba-2's output norms (``ssm_norm``, models/attention/mamba2.py): Falcon-H1's two beside Mamba-2's own, each
against its float64 formula on the mixer's own ``y`` and ``z``, the step against the parallel form, the parameter
count without the norm's gain, and the refusal of an unknown mode. Falcon-H1 checkpoints with each mode agree with
transformers' ``FalconH1Mixer`` in tests/models/hf/test_falcon_h1.py."""

import pytest
import torch

from models import ConfigError, ModelConfig, build_model
from models.attention import ATTENTION
from models.context import ForwardContext

BASE = dict(d_model=32, n_heads=4, n_layers=1, max_len=64, vocab_size=64, attention="mamba2", position="none")
FIELDS = dict(ssm_heads=4, ssm_head_dim=8, ssm_groups=2, ssm_state=8, ssm_chunk=8)


def _core(mode):
    cfg = ModelConfig(**BASE, **FIELDS, ssm_norm=mode).validate()
    torch.manual_seed(0)
    core = ATTENTION["mamba2"].build(cfg).double()
    if mode != "none":
        with torch.no_grad():
            core.norm.weight.uniform_(0.5, 1.5)
    return cfg, core


def _rms_groups(t, groups, eps):  # (B, h, L, P) -> normed over each group of h / G heads' P numbers
    B, h, L, P = t.shape
    g = t.reshape(B, groups, h // groups, L, P)
    return (g / torch.sqrt(g.pow(2).mean(dim=(2, 4), keepdim=True) + eps)).reshape(B, h, L, P)


@pytest.mark.parametrize("mode", ["gated", "before_gate", "none"])
def test_each_output_norm_is_its_formula(mode):
    cfg, core = _core(mode)
    x = torch.randn(2, 19, 32, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    q, k, v, mods = core.project(x, x, None, 0)
    out, _, _ = core(q, k, v, mods, ForwardContext(tokens=None, position=None))
    y, z = core.pre_norm(q, k, v, mods), mods["z"]
    gate = z * torch.sigmoid(z)
    if mode == "none":
        want = y * gate
    else:
        w = core.norm.weight.view(4, 1, 8)
        want = (
            _rms_groups(y * gate, 2, cfg.norm_eps) * w
            if mode == "gated"
            else _rms_groups(y, 2, cfg.norm_eps) * w * gate
        )
    torch.testing.assert_close(out, want, rtol=1e-12, atol=1e-12)
    # the step (one token at a time) gives the same outputs
    state = core.new_state(2, dtype=torch.float64)
    steps = []
    for t in range(x.shape[1]):
        o, state = core.step(x[:, t], state)
        steps.append(o)
    torch.testing.assert_close(torch.stack(steps, dim=2), out, rtol=1e-10, atol=1e-10)


def test_the_modes_differ_and_none_has_no_gain():
    outs = {}
    x = torch.randn(1, 12, 32, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    for mode in ("gated", "before_gate", "none"):
        _, core = _core(mode)
        q, k, v, mods = core.project(x, x, None, 0)
        outs[mode] = core(q, k, v, mods, ForwardContext(tokens=None, position=None))[0]
        assert hasattr(core, "norm") == (mode != "none")
    assert not torch.allclose(outs["gated"], outs["before_gate"]) and not torch.allclose(outs["gated"], outs["none"])
    cfg = ModelConfig(**BASE, **FIELDS, ssm_norm="none")
    assert cfg.approx_params() == sum(p.numel() for p in build_model(cfg).parameters())


def test_an_unknown_mode_is_refused_by_name():
    with pytest.raises(ConfigError) as e:
        ModelConfig(**BASE, ssm_norm="layernorm").validate()
    assert e.value.field == "ssm_norm" and "before_gate" in str(e.value)
