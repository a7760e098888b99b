"""mla with YaRN (Peng et al. 2023) as DeepSeek-V2 / V3 run it: the sublayer against a float64 loop over heads
written here from the paper's quantities (YaRN's frequencies over the ``qk_rope_head_dim`` rotated numbers, its
cos / sin factor, and DeepSeek's softmax temperature ``m_all^2`` from ``mscale_all_dim``), in both forms, causal
and not, with a RoPE part wider than ``d_model / n_heads`` (DeepSeek-V3: 64 against 56); the temperature against
the paper's ``sqrt(1/t) = 0.1 ln s + 1``; gradients; the field's refusals."""

import math

import pytest
import torch

from models import ConfigError, ModelConfig, build_model
from models.context import ForwardContext, LayerInfo
from models.positions.yarn import softmax_scale_mult

BASE = dict(
    attention="mla",
    position="rope",
    d_model=32,
    n_heads=4,  # d_model / n_heads = 8, narrower than the RoPE part
    n_layers=1,
    max_len=64,
    rope_base=500.0,
    kv_lora_rank=12,
    qk_nope_head_dim=6,
    qk_rope_head_dim=12,
    v_head_dim=5,
    yarn_factor=40.0,
    yarn_original_max_len=8,
    yarn_attention_factor=1.0,  # DeepSeek's mscale / mscale_all_dim with both 1
    yarn_mscale_all_dim=1.0,
)
T = 13


def _model(**kw):
    cfg = ModelConfig(**{**BASE, **kw}).validate()
    return cfg, build_model(cfg).double()


def _rms(x, gain, eps=1e-6):
    return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps) * gain


def _yarn_angles(m, base, s, L, fast=32.0, slow=1.0):
    """YaRN's angle per position of each of the ``m // 2`` pairs (section 3.2, "NTK-by-parts"): pair ``i`` has
    wavelength ``2 pi base^(2i/m)``, turning ``r_i = L / lambda_i`` times in the original context; the ramp from
    keeping ``theta_i`` to ``theta_i / s`` is linear in ``i`` between the indices where ``r = fast`` and ``r =
    slow``, rounded outward (the reference code's ``truncate``)."""

    def index_at(turns):
        return m * math.log(L / (2 * math.pi * turns)) / (2 * math.log(base))

    lo, hi = max(math.floor(index_at(fast)), 0), min(math.ceil(index_at(slow)), m - 1)
    hi = hi + 0.001 if lo == hi else hi
    out = []
    for i in range(m // 2):
        theta = base ** (-2.0 * i / m)
        w = min(max((i - lo) / (hi - lo), 0.0), 1.0)
        out.append(theta / s * w + theta * (1 - w))
    return out


def _rotate(x, pos, angles, factor, interleaved):
    """Turn each pair of ``x [T, m]`` (``(x_2i, x_2i+1)`` when interleaved, else ``(x_i, x_i+m/2)``) by ``pos *
    angles[i]``, with cos and sin multiplied by ``factor``; element by element."""
    m = x.shape[-1]
    out = x.clone()
    for t in range(x.shape[0]):
        for i in range(m // 2):
            a, b = (2 * i, 2 * i + 1) if interleaved else (i, i + m // 2)
            ang = float(pos[t]) * angles[i]
            c, s = math.cos(ang) * factor, math.sin(ang) * factor
            out[t, a] = x[t, a] * c - x[t, b] * s
            out[t, b] = x[t, b] * c + x[t, a] * s
    return out


def _reference(attn, x, cfg, m_all):
    """The sublayer's output ``(B, T, d)`` from the formulas, one head at a time: scores ``(q^C k^C + q^R k^R)
    * m_all^2 / sqrt(dn + dr)``, ``m_all = 0.1 mscale_all_dim ln s + 1``."""
    core = attn.core
    h, dn, dr, dv, r = cfg.n_heads, cfg.qk_nope_head_dim, cfg.qk_rope_head_dim, cfg.v_head_dim, cfg.kv_lora_rank
    B, L, _ = x.shape
    if cfg.q_lora_rank:
        qall = _rms(x @ core.q_a_proj.weight.T, core.q_a_layernorm.weight) @ core.q_b_proj.weight.T
    else:
        qall = x @ core.q_proj.weight.T
    ckr = x @ core.kv_a_proj_with_mqa.weight.T
    c, kr = _rms(ckr[..., :r], core.kv_a_layernorm.weight), ckr[..., r:]
    wkvb = core.kv_b_proj.weight
    angles = _yarn_angles(dr, cfg.rope_base, cfg.yarn_factor, cfg.yarn_original_max_len)
    factor = cfg.yarn_attention_factor
    pos = torch.arange(L)
    allowed = (pos[None, :] <= pos[:, None]) if cfg.causal else torch.ones(L, L, dtype=torch.bool)
    outs = []
    for b in range(B):
        kr_rot = _rotate(kr[b], pos, angles, factor, cfg.rope_interleave)
        heads = []
        for n in range(h):
            qn = qall[b, :, n * (dn + dr) : (n + 1) * (dn + dr)]
            q_c, q_r = qn[:, :dn], _rotate(qn[:, dn:], pos, angles, factor, cfg.rope_interleave)
            rows = wkvb[n * (dn + dv) : (n + 1) * (dn + dv)]
            k_c, v = c[b] @ rows[:dn].T, c[b] @ rows[dn:].T
            s = (q_c @ k_c.T + q_r @ kr_rot.T) * m_all**2 / math.sqrt(dn + dr)
            heads.append(torch.softmax(s.masked_fill(~allowed, -math.inf), -1) @ v)
        outs.append(torch.cat(heads, -1) @ attn.out_proj.weight.T)
    return torch.stack(outs)


def _run(model, x, need_weights):
    attn = model.stack.blocks[0].attn
    ctx = ForwardContext(tokens=torch.zeros(x.shape[:2], dtype=torch.long), position=model.position)
    ctx.need_weights = need_weights
    info = LayerInfo(index=0)
    return attn(x, ctx, info), info


def _x(cfg, seed=1):
    return torch.randn(2, T, cfg.d_model, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("absorb", [False, True])
@pytest.mark.parametrize(
    "yarn",
    [
        dict(),  # DeepSeek-V3's config: s 40, mscale = mscale_all_dim = 1
        dict(yarn_mscale_all_dim=0.5, yarn_attention_factor=1.2, rope_interleave=False, q_lora_rank=7),
        dict(yarn_mscale_all_dim=None, yarn_attention_factor=None, yarn_factor=4.0),  # no temperature term
    ],
)
def test_sublayer_equals_the_formulas_with_yarn(causal, absorb, yarn):
    cfg, model = _model(causal=causal, mla_absorb=absorb, **yarn)
    attn = model.stack.blocks[0].attn
    for p in attn.parameters():
        if p.dim() == 1:
            p.data.uniform_(0.5, 1.5)
    if cfg.yarn_attention_factor is None:  # the paper's default on cos / sin
        cfg = cfg.replace(yarn_attention_factor=0.1 * math.log(cfg.yarn_factor) + 1)
    m_all = 1.0 if cfg.yarn_mscale_all_dim is None else 0.1 * cfg.yarn_mscale_all_dim * math.log(cfg.yarn_factor) + 1
    want = _reference(attn, _x(cfg), cfg, m_all)
    for need_weights in (True, False):  # dense maps, and the kernels' path
        got, _ = _run(model, _x(cfg), need_weights)
        torch.testing.assert_close(got, want, rtol=0, atol=1e-10)


@pytest.mark.parametrize("causal", [True, False])
def test_the_temperature_changes_the_output_and_the_recorded_q_k_give_the_map(causal):
    """Without ``m_all^2`` the same weights give another output (the reference's term is needed); the per-head q, k
    the core reports reproduce its map as ``softmax(q.k / sqrt(dn + dr))``."""
    cfg, model = _model(causal=causal)
    _, plain = _model(causal=causal, yarn_mscale_all_dim=None)
    plain.load_state_dict(model.state_dict())
    x = _x(cfg, seed=2)
    with torch.no_grad():
        out, info = _run(model, x, True)
        assert float((out - _run(plain, x, True)[0]).abs().max()) > 1e-3
    s = info.q @ info.k.transpose(-1, -2) / math.sqrt(cfg.qk_nope_head_dim + cfg.qk_rope_head_dim)
    allowed = torch.ones(T, T, dtype=torch.bool).tril() if causal else torch.ones(T, T, dtype=torch.bool)
    torch.testing.assert_close(
        torch.softmax(s.masked_fill(~allowed, -math.inf), -1), info.attention, rtol=0, atol=1e-12
    )


@pytest.mark.parametrize("s", [1.0, 1.5, 4.0, 40.0, 1000.0])
@pytest.mark.parametrize("m_all", [0.5, 1.0, 0.707])
def test_temperature_is_the_papers(s, m_all):
    """YaRN section 3.4: ``sqrt(1/t) = 0.1 ln s + 1`` multiplies queries and keys, so scores by its square;
    DeepSeek scales the log by ``mscale_all_dim`` (``m_all = 0.1 mscale_all_dim ln s + 1``) and applies it on the
    softmax scale. float64, from the formula; 1 for ``s <= 1``."""
    cfg = ModelConfig(**{**BASE, "yarn_factor": s, "yarn_mscale_all_dim": m_all}).validate()
    sqrt_inv_t = 0.1 * m_all * math.log(s) + 1.0 if s > 1 else 1.0
    assert softmax_scale_mult(cfg) == pytest.approx(sqrt_inv_t**2, rel=1e-15)
    if m_all == 1.0:  # DeepSeek's released configs: the paper's own temperature, 1 / t
        assert softmax_scale_mult(cfg) == pytest.approx((0.1 * math.log(s) + 1.0) ** 2, rel=1e-15)
    assert softmax_scale_mult(cfg.replace(yarn_mscale_all_dim=None)) == 1.0


def test_deepseek_v3_temperature_value():
    """DeepSeek-V3's config (factor 40, mscale_all_dim 1): the scores are multiplied by (0.1 ln 40 + 1)^2 =
    1.86466...; transformers' own ``yarn_get_mscale`` gives the same."""
    cfg = ModelConfig(**BASE).validate()
    assert softmax_scale_mult(cfg) == pytest.approx(1.3688879454113936**2, rel=1e-15)
    transformers = pytest.importorskip("transformers")
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import yarn_get_mscale

    assert softmax_scale_mult(cfg) == pytest.approx(yarn_get_mscale(40.0, 1.0) ** 2, rel=1e-15)
    assert transformers  # imported for its module only


@pytest.mark.parametrize("absorb", [False, True])
def test_gradients_reach_every_parameter_with_yarn(absorb):
    cfg, model = _model(mla_absorb=absorb, q_lora_rank=6, n_layers=2)
    t = torch.randint(0, 256, (2, T), generator=torch.Generator().manual_seed(0))
    model(t).logits.pow(2).mean().backward()
    for name, p in model.named_parameters():
        if ".attn." in name:
            assert p.grad is not None and torch.isfinite(p.grad).all() and p.grad.abs().sum() > 0, name


@pytest.mark.parametrize(
    "change,field",
    [
        (dict(yarn_factor=None), "yarn_mscale_all_dim"),  # the temperature is YaRN's
        (dict(yarn_mscale_all_dim=0.0), "yarn_mscale_all_dim"),
        (dict(yarn_mscale_all_dim=-1.0), "yarn_mscale_all_dim"),
        (dict(yarn_mscale_all_dim=math.inf), "yarn_mscale_all_dim"),
        (dict(attention="full"), "yarn_mscale_all_dim"),  # only MLA applies it
        (dict(layer_schedule="mla,full", n_layers=2), "layer_schedule"),  # a full layer in the schedule
        (dict(rope_fraction=0.5), "rope_fraction"),  # MLA rotates its RoPE part whole
    ],
)
def test_refusals_name_the_field(change, field):
    with pytest.raises(ConfigError) as e:
        ModelConfig(**{**BASE, **change}).validate()
    assert e.value.field == field
