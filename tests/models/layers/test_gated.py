"""Gated residuals (GTrXL, Parisotto et al. 2020; catalogue section 8): near identity at init, pre-norm only."""

from functools import partial

import pytest
import torch
from stacks import draw_tokens, model_from

from models import ConfigError, ModelConfig

BASE = dict(n_layers=3, d_model=32, n_heads=4, max_len=128)
_model = partial(model_from, BASE)
_tokens = draw_tokens


def test_gated_is_near_identity_at_init():
    model = _model(layer="gated")
    out = model(_tokens())
    for info in out.layers:
        assert info.gate_attn.mean() < 0.25 and info.gate_ffn.mean() < 0.25
    open_gate = _model(layer="gated")
    for block in open_gate.stack.blocks:
        for gate in (block.gate_attn, block.gate_ffn):
            gate.b_g.data.zero_()
    ref = open_gate(_tokens())

    def change(o):  # summed relative update of the residual stream over the layers
        hs = [h.detach() for h in o.hidden_states]
        return sum(float((b - a).norm() / a.norm()) for a, b in zip(hs, hs[1:]))

    assert change(out) < 0.5 * change(ref)
    gate = model.stack.blocks[0].gate_attn
    x, y = torch.randn(5, 32), torch.randn(5, 32)
    r = torch.sigmoid(y @ gate.w.weight[:32].T + x @ gate.u.weight[:32].T)
    z = torch.sigmoid(y @ gate.w.weight[32:64].T + x @ gate.u.weight[32:].T - 2.0)
    h = torch.tanh(y @ gate.w.weight[64:].T + (r * x) @ gate.u_g.weight.T)
    torch.testing.assert_close(gate(x, y)[0], (1 - z) * x + z * h)


def test_gated_requires_pre_norm():
    with pytest.raises(ConfigError, match="norm_placement"):
        ModelConfig(**BASE, layer="gated", norm_placement="post").validate()
