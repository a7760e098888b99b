"""Sandwich (Press et al. 2020) layer structure against a hand-built reference with the same weights."""

from functools import partial

import pytest
import torch
from stacks import draw_tokens, model_from, stack_context

from models import ConfigError, ModelConfig
from models.layers.sandwich import sandwich_order

BASE = dict(n_layers=3, d_model=32, n_heads=4, max_len=64)
_model = partial(model_from, BASE)
_tokens = partial(draw_tokens, n=20)


def test_sandwich_order_is_the_papers_formula():
    # Press et al. 2020: s^k (sf)^(n-k) f^k; their best 16-layer model is k = 6
    assert sandwich_order(16, 6) == "a" * 6 + "af" * 10 + "f" * 6
    assert sandwich_order(3, 0) == "afafaf"  # the standard interleaving
    assert sandwich_order(3, 3) == "aaafff"
    for n in range(1, 7):
        for s in range(n + 1):
            order = sandwich_order(n, s)
            assert order.count("a") == order.count("f") == n
            # the j-th FFN always follows the j-th attention sublayer
            a_pos = [i for i, c in enumerate(order) if c == "a"]
            f_pos = [i for i, c in enumerate(order) if c == "f"]
            assert all(fa < ff for fa, ff in zip(a_pos, f_pos))


@pytest.mark.parametrize("s", [0, 1, 3])
def test_sandwich_runs_its_sublayers_in_order(s):
    """Forward hooks record the module call sequence; it spells the sandwich order."""
    model = _model(layer="sandwich", sandwich_coeff=s)
    calls = []
    for i, m in enumerate(model.stack.attn):
        m.register_forward_hook(lambda *_, i=i: calls.append(f"a{i}"))
    for j, m in enumerate(model.stack.ffn):
        m.register_forward_hook(lambda *_, j=j: calls.append(f"f{j}"))
    out = model(_tokens())
    want = {0: "a0 f0 a1 f1 a2 f2", 1: "a0 a1 f0 a2 f1 f2", 3: "a0 a1 a2 f0 f1 f2"}[s]
    assert " ".join(calls) == want
    assert len(out.layers) == 3


def test_sandwich_equals_the_hand_built_sequence():
    model = _model(layer="sandwich", sandwich_coeff=1).eval()
    st = model.stack
    t = _tokens()
    ctx = stack_context(model, t)
    x = model.embed(t)
    a, f = iter(range(3)), iter(range(3))
    for kind in "aafaff":  # n=3, s=1: a (a f) (a f) f
        if kind == "a":
            i = next(a)
            x = x + st.attn[i](st.res_attn[i].norm(x), ctx, ctx.begin_layer(x))
        else:
            j = next(f)
            x = x + st.ffn[j](st.res_ffn[j].norm(x))[0]
    want = model.head(model.final_norm(x))
    torch.testing.assert_close(model(t).logits, want, rtol=1e-5, atol=1e-5)


def test_sandwich_coeff_zero_is_the_standard_model():
    sw, std = _model(layer="sandwich", sandwich_coeff=0), _model(layer="standard")
    sd = {}
    for i, b in enumerate(std.stack.blocks):
        for name, mod in (("attn", b.attn), ("res_attn", b.res_attn), ("ffn", b.ffn), ("res_ffn", b.res_ffn)):
            sd.update({f"stack.{name}.{i}.{k}": v for k, v in mod.state_dict().items()})
    sd.update({k: v for k, v in std.state_dict().items() if not k.startswith("stack.")})
    sw.load_state_dict(sd)
    t = _tokens()
    torch.testing.assert_close(sw(t).logits, std(t).logits, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("s", [-1, 4])
def test_sandwich_coeff_outside_0_n_layers_is_refused(s):
    with pytest.raises(ConfigError) as e:
        ModelConfig(**BASE, layer="sandwich", sandwich_coeff=s).validate()
    assert e.value.field == "sandwich_coeff"
