"""Macaron (Lu et al. 2019) and Sandwich (Press et al. 2020) layer structures against hand-built
references with the same weights."""
import pytest
import torch

from models import ConfigError, ModelConfig, build_model
from models.context import ForwardContext
from models.layers.sandwich import sandwich_order

BASE = dict(n_layers=3, d_model=32, n_heads=4, max_len=64)


def _model(**kw):
    return build_model(ModelConfig(**{**BASE, **kw}))


def _tokens(B=2, n=20, seed=0):
    return torch.randint(0, 256, (B, n), generator=torch.Generator().manual_seed(seed))


def _ctx(model, tokens):
    return ForwardContext(tokens=tokens, position=model.position, positions=torch.arange(tokens.shape[1]))


# ---------------------------------------------------------------------------- macaron
@pytest.mark.parametrize("placement", ["pre", "post"])
def test_macaron_equals_two_half_ffn_steps_around_attention(placement):
    """Pre: x + 1/2 FFN1(N(x)); x + Attn(N(x)); x + 1/2 FFN2(N(x)). Post: N(x + ...) each time."""
    model = _model(layer="macaron", norm_placement=placement).eval()
    t = _tokens()
    ctx = _ctx(model, t)
    x = model.embed(t)
    for b in model.stack.blocks:
        info = ctx.begin_layer(x)
        if placement == "pre":
            x = x + 0.5 * b.ffn1(b.res_ffn1.norm(x))[0]
            x = x + b.attn(b.res_attn.norm(x), ctx, info)
            x = x + 0.5 * b.ffn2(b.res_ffn2.norm(x))[0]
        else:
            x = b.res_ffn1.norm(x + 0.5 * b.ffn1(x)[0])
            x = b.res_attn.norm(x + b.attn(x, ctx, info))
            x = b.res_ffn2.norm(x + 0.5 * b.ffn2(x)[0])
    want = model.head(model.final_norm(x))
    torch.testing.assert_close(model(t).logits, want, rtol=1e-5, atol=1e-5)


def test_macaron_ffns_have_separate_weights_and_both_get_gradients():
    model = _model(layer="macaron")
    model(_tokens()).logits.pow(2).mean().backward()
    b = model.stack.blocks[0]
    w1, w2 = b.ffn1.output_parameters()[0], b.ffn2.output_parameters()[0]
    assert w1 is not w2 and not torch.equal(w1, w2)
    assert w1.grad.abs().sum() > 0 and w2.grad.abs().sum() > 0


def test_macaron_adds_the_losses_of_both_expert_ffns():
    model = _model(layer="macaron", ffn="moe", n_layers=1)
    t = _tokens()
    out = model(t)
    b = model.stack.blocks[0]
    ctx = _ctx(model, t)
    x = model.embed(t)
    x1 = x + 0.5 * b.ffn1(b.res_ffn1.norm(x), t)[0]
    loss1 = b.ffn1(b.res_ffn1.norm(x), t)[1]["loss"]
    x2 = x1 + b.attn(b.res_attn.norm(x1), ctx, ctx.begin_layer(x1))
    loss2 = b.ffn2(b.res_ffn2.norm(x2), t)[1]["loss"]
    torch.testing.assert_close(out.aux_loss, loss1 + loss2)
    assert int(out.layers[0].experts.expert_counts.sum()) == 2 * t.numel() * model.cfg.top_k


def test_macaron_and_sandwich_need_an_ffn():
    for layer in ("macaron", "sandwich"):
        with pytest.raises(ConfigError) as e:
            ModelConfig(**BASE, layer=layer, ffn="none").validate()
        assert e.value.field == "ffn" and "gelu" in str(e.value)


# ---------------------------------------------------------------------------- sandwich
def test_sandwich_order_is_the_papers_formula():
    # Press et al. 2020: s^k (sf)^(n-k) f^k; their best 16-layer model is k = 6
    assert sandwich_order(16, 6) == "a" * 6 + "af" * 10 + "f" * 6
    assert sandwich_order(3, 0) == "afafaf"          # the standard interleaving
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
    ctx = _ctx(model, t)
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
