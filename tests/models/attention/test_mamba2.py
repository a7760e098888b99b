"""Mamba-2 (models/attention/mamba2.py): the mixer against transformers' ``Mamba2Mixer`` (its torch path, weights
copied), the dense map against the layer (``y = M x + D x``), the recurrent step against the parallel form, the
pooled-map hook, the config's refusals, and whole models (uniform and a hybrid schedule) that train."""

import pytest
import torch

from models import ConfigError, ModelConfig, build_model
from models.attention import ATTENTION

BASE = dict(d_model=32, n_heads=4, n_layers=1, max_len=64, vocab_size=64, attention="mamba2", position="none")


def mixer(seed=0, **fields):
    cfg = ModelConfig(**{**BASE, **fields}).validate()
    torch.manual_seed(seed)
    core = ATTENTION["mamba2"].build(cfg).double()
    with torch.no_grad():  # away from the initial values, so every parameter matters
        core.D.uniform_(0.5, 1.5)
        core.norm.weight.uniform_(0.5, 1.5)
        core.conv1d.bias.normal_(0, 0.3)
    return cfg, core


def x_in(L=21, B=2, d=32, seed=1):
    return torch.randn(B, L, d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def ctx(need_weights=False):
    from models.context import ForwardContext

    return ForwardContext(tokens=None, position=None, need_weights=need_weights)


def run(core, x, need_weights=False):
    q, k, v, mods = core.project(x, x, None, 0)
    return core(q, k, v, mods, ctx(need_weights))


@pytest.mark.parametrize("fields", [{}, {"ssm_heads": 8, "ssm_head_dim": 8, "ssm_groups": 2, "ssm_state": 8}])
def test_mixer_matches_transformers(fields):
    from transformers import Mamba2Config
    from transformers.models.mamba2.modeling_mamba2 import Mamba2Mixer as Reference

    cfg, core = mixer(**fields, ssm_chunk=8)
    h, P = core.layout[:2]
    ref_cfg = Mamba2Config(
        hidden_size=32,
        num_heads=h,
        head_dim=P,
        expand=h * P // 32,
        state_size=cfg.ssm_state,
        n_groups=cfg.ssm_groups,
        conv_kernel=cfg.ssm_conv,
        layer_norm_epsilon=cfg.norm_eps,
        chunk_size=16,
        num_hidden_layers=1,
    )
    ref = Reference(ref_cfg, layer_idx=0).double().eval()
    out_proj = torch.nn.Linear(h * P, 32, bias=False).double()
    state = {**core.state_dict(), "out_proj.weight": out_proj.weight.detach()}
    assert set(ref.state_dict()) == set(state)
    ref.load_state_dict(state)
    x = x_in()
    out, _, _ = run(core, x)  # (B, h, L, P)
    ours = out_proj(out.transpose(1, 2).flatten(2))
    with torch.no_grad():
        want = ref(x)
    # transformers' torch path scans in float32 (hidden_states.float(), A in float32) even for float64 weights
    torch.testing.assert_close(ours, want, atol=1e-6, rtol=1e-5)


def test_dense_map_times_x_plus_skip_is_the_pre_norm_output():
    _, core = mixer(ssm_groups=2, ssm_chunk=5)
    x = x_in(L=17)
    q, k, v, mods = core.project(x, x, None, 0)
    out, probs, aux = core(q, k, v, mods, ctx(need_weights=True))
    assert probs.shape == (2, 4, 17, 17) and aux == {}
    assert torch.equal(probs.triu(1), torch.zeros_like(probs))
    y = probs @ v + core.D[:, None, None] * v
    torch.testing.assert_close(y, core.pre_norm(q, k, v, mods), atol=1e-12, rtol=1e-10)
    # the forward's output is the gated norm of that y, written out here with the norm over whole groups
    g = y * torch.nn.functional.silu(mods["z"])  # (B, h, L, P)
    groups = g.transpose(1, 2).reshape(2, 17, 2, -1)  # (B, L, G, d_inner / G)
    normed = groups * torch.rsqrt(groups.pow(2).mean(-1, keepdim=True) + core.cfg.norm_eps)
    want = (normed.flatten(2) * core.norm.weight).view(2, 17, 4, -1).transpose(1, 2)
    torch.testing.assert_close(out, want, atol=1e-12, rtol=1e-10)


def test_implicit_ops_apply_the_map_and_cut_bands_of_it():
    _, core = mixer(ssm_chunk=4)
    x = x_in(L=14)
    q, k, v, mods = core.project(x, x, None, 0)
    M = run(core, x, need_weights=True)[1]  # (B, h, L, L)
    apply, band, *_ = core.implicit_ops(q, k, v, mods)  # blocks, cells: tests/kernels/cpu/test_implicit_bands.py
    values = torch.randn(2, 4, 14, 3, dtype=torch.float64)
    torch.testing.assert_close(apply(values), M @ values, atol=1e-12, rtol=1e-10)
    torch.testing.assert_close(band(3, 11), M[:, :, 3:11, 3:11], atol=1e-12, rtol=1e-10)


def test_step_by_step_decoding_equals_the_parallel_form():
    _, core = mixer(ssm_groups=2, ssm_conv=3)
    x = x_in(L=9)
    out = run(core, x)[0]  # (B, h, L, P)
    state = core.new_state(2, dtype=torch.float64)
    steps = []
    for t in range(9):
        o, state = core.step(x[:, t], state)
        steps.append(o)
    torch.testing.assert_close(torch.stack(steps, dim=2), out, atol=1e-12, rtol=1e-10)


def test_chunk_length_changes_nothing_but_speed():
    x = x_in(L=30)
    outs = [run(mixer(ssm_chunk=chunk)[1], x)[0] for chunk in (1, 7, 64)]
    torch.testing.assert_close(outs[0], outs[1], atol=1e-12, rtol=1e-10)
    torch.testing.assert_close(outs[0], outs[2], atol=1e-12, rtol=1e-10)


def test_uniform_model_trains_a_step_with_finite_gradients():
    cfg = ModelConfig(**{**BASE, "n_layers": 2, "ffn": "none", "norm": "rmsnorm"}).validate()
    model = build_model(cfg)
    assert sum(p.numel() for p in model.parameters()) == cfg.approx_params()
    tokens = torch.randint(0, 64, (2, 24), generator=torch.Generator().manual_seed(0))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loss = torch.nn.functional.cross_entropy(model(tokens[:, :-1]).logits.flatten(0, 1), tokens[:, 1:].flatten())
    loss.backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
    assert model.stack.blocks[0].attn.core.A_log.grad.abs().sum() > 0
    opt.step()
    with torch.no_grad():
        after = torch.nn.functional.cross_entropy(model(tokens[:, :-1]).logits.flatten(0, 1), tokens[:, 1:].flatten())
    assert after < loss


def test_hybrid_schedule_with_rope_runs_with_maps():
    cfg = ModelConfig(
        **{**BASE, "n_layers": 4, "position": "rope", "layer_schedule": "mamba2*3,full", "ssm_heads": 2}
    ).validate()
    model = build_model(cfg)
    assert sum(p.numel() for p in model.parameters()) == cfg.approx_params()
    out = model(torch.randint(0, 64, (1, 16)), return_attention=True)
    assert [tuple(a.shape) for a in out.attentions] == [(1, 2, 16, 16)] * 3 + [(1, 4, 16, 16)]
    for a in out.attentions[:3]:  # the SSM's map: causal, not a distribution
        assert torch.equal(a.triu(1), torch.zeros_like(a))
    torch.testing.assert_close(out.attentions[3].sum(-1), torch.ones(1, 4, 16))
    out.logits.sum().backward()


@pytest.mark.parametrize(
    "fields,field",
    [
        ({"ssm_heads": 6, "ssm_groups": 4}, "ssm_groups"),
        ({"causal": False}, "causal"),
        ({"softcap": 30.0}, "softcap"),
        ({"attn_bias": "qkv"}, "attn_bias"),
        ({"attn_gate": "headwise"}, "attn_gate"),
        ({"attn_sinks": True}, "attn_sinks"),
        ({"position": "alibi"}, "position"),
        ({"qk_norm": "head"}, "qk_norm"),
    ],
)
def test_refusals_name_the_field(fields, field):
    with pytest.raises(ConfigError) as e:
        ModelConfig(**{**BASE, **fields}).validate()
    assert e.value.field == field
