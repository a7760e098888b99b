"""gated_deltanet (Yang, Kautz & Hatamizadeh 2025): the sublayer against transformers' Qwen3NextGatedDeltaNet (its
torch path) with the same weights, value heads 1x and 2x the key heads; the dense map against the core's output
before the norm; the implicit operators against the map; a model that trains a step; a hybrid schedule with maps;
refusals by name."""

import pytest
import torch

from models import ConfigError, ModelConfig, build_model
from models.context import ForwardContext, LayerInfo

BASE = dict(attention="gated_deltanet", position="rope", d_model=32, n_heads=2, n_layers=1, max_len=64)


def _layer(**kw):
    cfg = ModelConfig(**{**BASE, **kw}).validate()
    torch.manual_seed(0)
    return cfg, build_model(cfg).double()


def _run(model, x, need_weights=False):
    attn = model.stack.blocks[0].attn
    ctx = ForwardContext(tokens=torch.zeros(x.shape[:2], dtype=torch.long), position=model.position)
    ctx.need_weights = need_weights
    info = LayerInfo(index=0)
    return attn(x, ctx, info), info


@pytest.mark.parametrize("value_heads", [2, 4])
def test_layer_equals_transformers_qwen3_next(value_heads):
    from transformers import Qwen3NextConfig
    from transformers.models.qwen3_next.modeling_qwen3_next import Qwen3NextGatedDeltaNet

    cfg, model = _layer(delta_value_heads=value_heads, delta_key_dim=8, delta_value_dim=6, norm_eps=1e-6)
    hf_cfg = Qwen3NextConfig(
        hidden_size=32,
        linear_num_key_heads=2,
        linear_num_value_heads=value_heads,
        linear_key_head_dim=8,
        linear_value_head_dim=6,
        linear_conv_kernel_dim=4,
        num_hidden_layers=1,
        layer_types=["linear_attention"],
        rms_norm_eps=1e-6,
    )
    torch.manual_seed(1)
    ref = Qwen3NextGatedDeltaNet(hf_cfg, 0).double()
    with torch.no_grad():  # random gains and biases so that every parameter matters
        ref.norm.weight.uniform_(0.5, 1.5)
        ref.dt_bias.uniform_(-1.0, 1.0)
        ref.conv1d.weight.normal_()
    attn = model.stack.blocks[0].attn
    ours = dict(attn.core.named_parameters()) | {"out_proj.weight": attn.out_proj.weight}
    with torch.no_grad():
        for name, p in ref.named_parameters():
            ours[name].copy_(p)
    x = torch.randn(2, 71, 32, dtype=torch.float64, generator=torch.Generator().manual_seed(2))  # > one chunk
    want = ref(x)  # transformers' delta rule runs in float32 whatever the inputs: float32's tolerance
    out, _ = _run(model, x)
    assert want.abs().max() > 0.1
    torch.testing.assert_close(out, want, rtol=1e-5, atol=1e-5)
    attn.core.cfg = cfg.replace(delta_chunk=1)  # the chunk changes nothing: the recurrence, one position a chunk
    torch.testing.assert_close(_run(model, x)[0], out, rtol=1e-10, atol=1e-12)


def _recurrence(q, k, v, beta, g):
    """The paper's recurrence token by token (float64 here), independent of kernels/."""
    S = torch.zeros(*k.shape[:2], k.shape[-1], v.shape[-1], dtype=v.dtype)
    outs = []
    for t in range(k.shape[2]):
        S = S * g[:, :, t].exp()[..., None, None]
        err = v[:, :, t] - torch.einsum("bhk,bhkv->bhv", k[:, :, t], S)
        S = S + torch.einsum("bhk,bhv->bhkv", k[:, :, t], beta[:, :, t, None] * err)
        outs.append(torch.einsum("bhk,bhkv->bhv", q[:, :, t], S))
    return torch.stack(outs, 2)


@pytest.mark.parametrize("value_heads", [2, 4])
def test_gradients_equal_the_recurrence(value_heads):
    """The sublayer through the chunked kernel (chunk 4, 11 tokens) against the same projections through the
    float64 recurrence: output and the gradients of the input and of every parameter, value heads 1x and 2x."""
    cfg, model = _layer(delta_value_heads=value_heads, delta_chunk=4)
    attn = model.stack.blocks[0].attn
    core = attn.core
    x = torch.randn(2, 11, 32, dtype=torch.float64, generator=torch.Generator().manual_seed(5), requires_grad=True)
    w = torch.randn(2, 11, 32, dtype=torch.float64, generator=torch.Generator().manual_seed(6))
    params = [x, *attn.parameters()]

    def reference():
        q, k, v, mods = core.project(x, x, None, 0)
        o = core.norm(_recurrence(q, k, v, mods["beta"], mods["g"]), mods["z"])
        return attn.merge(o)

    want = reference()
    got = _run(model, x)[0]
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)
    for a, b in zip(torch.autograd.grad((got * w).sum(), params), torch.autograd.grad((want * w).sum(), params)):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-10)


def test_map_is_the_mixing_before_the_norm():
    cfg, model = _layer(delta_value_heads=4)
    core = model.stack.blocks[0].attn.core
    x = torch.randn(1, 19, 32, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    q, k, v, mods = core.project(x, x, None, 0)
    (_, info) = _run(model, x, need_weights=True)
    A = info.attention
    assert A.shape == (1, 4, 19, 19) and torch.all(A.triu(1) == 0)
    torch.testing.assert_close(A @ v, core.mix(q, k, v, mods), rtol=1e-10, atol=1e-10)
    apply, band, *_ = core.implicit_ops(q, k, v, mods)  # blocks, cells: tests/kernels/cpu/test_implicit_bands.py
    values = torch.randn(1, 4, 19, 3, dtype=torch.float64)
    torch.testing.assert_close(apply(values), A @ values, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(band(5, 13), A[:, :, 5:13, 5:13], rtol=1e-10, atol=1e-12)


def test_model_trains_a_step():
    cfg = ModelConfig(**{**BASE, "n_layers": 2, "delta_chunk": 8}).validate()
    model = build_model(cfg)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    tokens = torch.randint(0, 256, (2, 21), generator=torch.Generator().manual_seed(4))
    losses = []
    for _ in range(2):
        logits = model(tokens).logits
        loss = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, 256), tokens[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        grads = [p.grad for p in model.parameters()]
        assert all(g is not None and torch.isfinite(g).all() for g in grads)
        core = model.stack.blocks[0].attn.core
        assert core.A_log.grad.abs().sum() > 0 and core.dt_bias.grad.abs().sum() > 0
        opt.step()
        losses.append(loss.item())
    assert losses[1] < losses[0]


def test_hybrid_schedule_with_maps():
    cfg = ModelConfig(
        **{
            **BASE,
            "attention": "full",
            "layer_schedule": "gated_deltanet*3,full",
            "n_layers": 4,
            "n_heads": 4,
            "n_kv_heads": 2,
            "delta_key_heads": 2,
            "delta_value_heads": 4,
            "attn_gate": "elementwise",
            "qk_norm": "head",
        }
    ).validate()
    model = build_model(cfg)
    assert sum(p.numel() for p in model.parameters()) == cfg.approx_params()
    assert not hasattr(model.stack.blocks[0].attn, "gate_proj") or model.stack.blocks[0].attn.gate_proj is None
    out = model(torch.randint(0, 256, (2, 17)), return_attention=True)
    assert [tuple(a.shape) for a in out.attentions] == [(2, 4, 17, 17)] * 4
    assert torch.isfinite(out.logits).all()
    rows = out.attentions[3].sum(-1)  # the full layer's softmax rows
    torch.testing.assert_close(rows, torch.ones_like(rows))


@pytest.mark.parametrize(
    "fields,name",
    [
        (dict(delta_key_heads=2, delta_value_heads=3), "delta_value_heads"),
        (dict(attn_gate="headwise"), "attn_gate"),
        (dict(causal=False), "causal"),
        (dict(position="alibi"), "position"),
        (dict(attn_bias="qkv"), "attn_bias"),
        (dict(softcap=30.0), "softcap"),
        (dict(attn_sinks=True), "attn_sinks"),
    ],
)
def test_refusals_name_the_field(fields, name):
    with pytest.raises(ConfigError) as e:
        ModelConfig(**{**BASE, **fields}).validate()
    assert e.value.field == name
