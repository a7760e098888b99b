"""gpt-oss's mixture of experts (``moe_swiglu_clamped``) against a float64 per-token loop of the family's formula
(router with bias, top-k then softmax over the k, interleaved gate / up, clamped SwiGLU with ``up + 1``), against
transformers' own ``GptOssMLP`` with the same tensors, and its bookkeeping (parameter count, statistics,
gradients, refusals)."""

import math

import pytest
import torch

from models import ConfigError, ModelConfig, build_model
from models.ffn import FFN

D, E, F, K = 8, 4, 6, 2


def cfg_for(**kw):
    return ModelConfig(
        **{"d_model": D, "n_heads": 2, "n_experts": E, "top_k": K, "d_ff": F, "ffn": "moe_swiglu_clamped", **kw}
    )


def build(seed=0, **kw):
    torch.manual_seed(seed)
    ffn = FFN["moe_swiglu_clamped"].build(cfg_for(**kw)).double()
    with torch.no_grad():  # biases away from 0 and weights large enough that the clamps bind
        for p in ffn.parameters():
            p.copy_(torch.randn_like(p))
    return ffn


@torch.no_grad()
def loop_reference(ffn, x, alpha=1.702, limit=7.0):
    """Per token, from the tensors alone: logits z = W_r x + b_r; the k largest; gates softmax over them; expert e:
    h = x G_e + c_e, gate = h[2j], up = h[2j + 1], clamped (gate above, up both sides), a = (up + 1) gate
    sigmoid(alpha gate), out = a D_e + o_e; y = sum of the gated outputs."""
    Wr, br = ffn.router.weight, ffn.router.bias
    ex = ffn.experts
    y = torch.zeros_like(x)
    flat, out = x.reshape(-1, x.shape[-1]), y.reshape(-1, x.shape[-1])
    for t in range(flat.shape[0]):
        z = [float(Wr[e] @ flat[t] + br[e]) for e in range(E)]
        chosen = sorted(range(E), key=lambda e: -z[e])[:K]
        exps = [math.exp(z[e] - z[chosen[0]]) for e in chosen]
        for e, w in zip(chosen, exps):
            h = flat[t] @ ex.gate_up_proj[e] + ex.gate_up_proj_bias[e]
            a = torch.empty(F, dtype=x.dtype)
            for j in range(F):
                g = min(float(h[2 * j]), limit)
                u = min(max(float(h[2 * j + 1]), -limit), limit)
                a[j] = (u + 1) * g / (1 + math.exp(-alpha * g))
            out[t] += w / sum(exps) * (a @ ex.down_proj[e] + ex.down_proj_bias[e])
    return y


def test_forward_equals_the_float64_per_token_loop():
    ffn = build()
    x = torch.randn(2, 5, D, dtype=torch.float64)
    got, aux = ffn(x)
    torch.testing.assert_close(got, loop_reference(ffn, x), rtol=1e-10, atol=1e-10)
    assert aux["dropped"] == 0 and aux["capacity"] is None
    assert int(aux["expert_counts"].sum()) == 2 * 5 * K
    z = x @ ffn.router.weight.T + ffn.router.bias
    assert torch.equal(aux["assignment"], z.argmax(-1))
    assert "loss" not in aux  # gpt-oss trains without a balancing loss (output_router_logits false)


def test_the_clamps_and_the_plus_one_matter():
    ffn = build()
    x = 3 * torch.randn(2, 5, D, dtype=torch.float64)
    got, _ = ffn(x)
    no_clamp = loop_reference(ffn, x, limit=1e9)
    assert (got - no_clamp).abs().max() > 1e-3
    other_alpha = loop_reference(ffn, x, alpha=1.0)
    assert (got - other_alpha).abs().max() > 1e-3


def test_alpha_and_limit_fields_are_read():
    ffn = build(swiglu_alpha=1.0, swiglu_limit=0.5)
    x = 3 * torch.randn(1, 4, D, dtype=torch.float64)
    torch.testing.assert_close(ffn(x)[0], loop_reference(ffn, x, alpha=1.0, limit=0.5), rtol=1e-10, atol=1e-10)


def test_tokens_are_independent_dropless():
    ffn = build()
    x = torch.randn(1, 6, D, dtype=torch.float64)
    whole = ffn(x)[0]
    for t in range(6):
        torch.testing.assert_close(ffn(x[:, t : t + 1])[0][0, 0], whole[0, t])


def test_matches_transformers_gpt_oss_mlp():
    transformers = pytest.importorskip("transformers")
    from transformers.models.gpt_oss.modeling_gpt_oss import GptOssMLP

    ffn = build()
    config = transformers.GptOssConfig(
        hidden_size=D, intermediate_size=F, num_local_experts=E, num_experts_per_tok=K, swiglu_limit=7.0
    )
    theirs = GptOssMLP(config).double()
    with torch.no_grad():
        theirs.router.weight.copy_(ffn.router.weight)
        theirs.router.bias.copy_(ffn.router.bias)
        for name in ("gate_up_proj", "gate_up_proj_bias", "down_proj", "down_proj_bias"):
            getattr(theirs.experts, name).copy_(getattr(ffn.experts, name))
    x = torch.randn(2, 5, D, dtype=torch.float64)
    with torch.no_grad():
        torch.testing.assert_close(ffn(x)[0], theirs(x)[0], rtol=1e-10, atol=1e-10)


def test_every_parameter_gets_a_gradient_and_the_count_is_exact():
    cfg = cfg_for(n_layers=2, vocab_size=64, position="rope").validate()
    model = build_model(cfg)
    assert sum(p.numel() for p in model.parameters()) == cfg.approx_params()
    x = torch.randint(0, 64, (2, 7))
    out = model(x)
    out.logits.square().mean().backward()
    for name, p in model.named_parameters():
        if ".ffn." in name:
            assert p.grad is not None and torch.isfinite(p.grad).all(), name
    router = model.stack.blocks[0].ffn.router
    assert router.weight.grad.abs().sum() > 0 and router.bias.grad.abs().sum() > 0  # through the softmax's gates
    assert float(out.aux_loss) == 0.0


def test_width_default_is_the_gated_rule():
    cfg = cfg_for(d_ff=None)
    ffn = FFN["moe_swiglu_clamped"].build(cfg)
    assert ffn.experts.gate_up_proj.shape == (E, D, 2 * round(8 * D / 3))


@pytest.mark.parametrize(
    "changes, field",
    [(dict(top_k=5), "top_k"), (dict(swiglu_alpha=0.0), "swiglu_alpha"), (dict(swiglu_limit=-1.0), "swiglu_limit")],
)
def test_bad_settings_are_refused_by_name(changes, field):
    with pytest.raises(ConfigError) as e:
        cfg_for(**changes).validate()
    assert e.value.field == field
