"""``moe_deepseek`` (DeepSeek-V3's MoE) against a float64 per-token loop of the paper's formula."""

import math

import pytest
import torch

from models import ConfigError, ModelConfig, build_model
from models.ffn import FFN

D, E, H = 8, 8, 6


def cfg_for(**kw):
    base = {"d_model": D, "n_heads": 2, "ffn": "moe_deepseek", "n_experts": E, "top_k": 2, "d_ff": H}
    return ModelConfig(**{**base, **kw})


def build(seed=0, bias=True, **kw):
    torch.manual_seed(seed)
    ffn = FFN["moe_deepseek"].build(cfg_for(**kw).validate())
    if bias:  # a correction bias large enough to change choices: the reference must follow it
        with torch.no_grad():
            ffn.e_score_correction_bias.copy_(torch.randn(ffn.n_experts) * 0.3)
    return ffn


def swiglu64(x, w, v, w2):
    a = x @ w.double().T
    return (a * torch.sigmoid(a) * (x @ v.double().T)) @ w2.double().T


@torch.no_grad()
def reference(ffn, x, cfg):
    """Per token: sigmoid scores, bias for choosing only, groups by their two best biased scores, top-k,
    weights from the unbiased scores (normalised when asked) times the scale, plus the shared expert."""
    x = x.double().reshape(-1, x.shape[-1])
    r = ffn.router.weight.double()
    b = ffn.e_score_correction_bias.double()
    size = cfg.n_experts // cfg.n_group
    out = torch.zeros_like(x)
    for t in range(x.shape[0]):
        s = [1 / (1 + math.exp(-float(x[t] @ r[e]))) for e in range(cfg.n_experts)]
        c = [s[e] + float(b[e]) for e in range(cfg.n_experts)]
        if cfg.n_group > 1:
            gscore = [sum(sorted(c[g * size : (g + 1) * size], reverse=True)[:2]) for g in range(cfg.n_group)]
            groups = sorted(range(cfg.n_group), key=lambda g: -gscore[g])[: cfg.topk_group]
            cand = [e for e in range(cfg.n_experts) if e // size in groups]
        else:
            cand = list(range(cfg.n_experts))
        top = sorted(cand, key=lambda e: -c[e])[: cfg.top_k]
        total = sum(s[e] for e in top)
        for e in top:
            g = (s[e] / total if cfg.norm_topk_prob else s[e]) * cfg.routed_scaling
            ex = ffn.experts[e]
            out[t] += g * swiglu64(x[t], ex.w.weight, ex.v.weight, ex.w2.weight)
        if cfg.n_shared_experts:
            sh = ffn.shared
            out[t] += swiglu64(x[t], sh.w.weight, sh.v.weight, sh.w2.weight)
    return out


CASES = [
    {},
    {"n_group": 4, "topk_group": 2},
    {"n_group": 2, "topk_group": 1, "top_k": 3, "routed_scaling": 2.5},
    {"norm_topk_prob": False, "n_shared_experts": 2},
    {"n_shared_experts": 0, "top_k": 1},
]


@pytest.mark.parametrize("kw", CASES, ids=lambda k: ",".join(f"{a}={b}" for a, b in k.items()) or "default")
def test_matches_the_float64_reference(kw):
    cfg = cfg_for(**kw)
    ffn = build(**kw).double()
    x = torch.randn(3, 7, D, dtype=torch.float64)
    y, aux = ffn(x)
    torch.testing.assert_close(y.reshape(-1, D), reference(ffn, x, cfg), atol=1e-5, rtol=1e-5)
    assert aux["dropped"] == 0 and aux["capacity"] is None
    assert int(aux["expert_counts"].sum()) == 3 * 7 * cfg.top_k and aux["assignment"].shape == (3, 7)


def test_the_bias_chooses_but_does_not_weigh():
    """A huge bias on expert 0 makes every token choose it; its weight is still its own unbiased score."""
    ffn = build(bias=False, top_k=1, n_shared_experts=0, norm_topk_prob=False).double()
    x = torch.randn(2, 5, D, dtype=torch.float64)
    with torch.no_grad():
        ffn.e_score_correction_bias[0] = 100.0
    y, aux = ffn(x)
    assert aux["expert_counts"].tolist() == [10] + [0] * (E - 1)
    s0 = torch.sigmoid(x @ ffn.router.weight.double()[0])  # (2, 5)
    ex = ffn.experts[0]
    want = s0[..., None] * swiglu64(x, ex.w.weight, ex.v.weight, ex.w2.weight)
    torch.testing.assert_close(y, want, atol=1e-6, rtol=1e-6)


def test_sequence_balance_loss_formula():
    ffn = build(top_k=2)
    x = torch.randn(3, 6, D)
    _, aux = ffn(x)
    b = ffn.e_score_correction_bias
    want = 0.0
    for seq in x:
        s = torch.sigmoid(seq.double() @ ffn.router.weight.detach().double().T)  # (T, E)
        top = (s + b.double()).topk(2, dim=-1).indices
        f = torch.tensor([(top == e).sum().item() for e in range(E)], dtype=torch.float64) * E / (2 * len(seq))
        P = (s / s.sum(-1, keepdim=True)).mean(0)
        want += float((f * P).sum()) / len(x)
    assert aux["loss"].item() == pytest.approx(1e-4 * want, rel=1e-5)


def test_gradients_reach_router_experts_and_shared_expert():
    ffn = build()
    x = torch.randn(2, 9, D, requires_grad=True)
    y, aux = ffn(x)
    (y.square().sum() + aux["loss"]).backward()
    assert x.grad is not None and ffn.router.weight.grad.abs().sum() > 0
    assert ffn.shared.w2.weight.grad.abs().sum() > 0
    used = aux["expert_counts"] > 0
    for e, ex in enumerate(ffn.experts):
        assert ex.w.weight.grad is not None
        assert (ex.w.weight.grad.abs().sum() > 0) == bool(used[e])
    assert not ffn.e_score_correction_bias.requires_grad  # a buffer: moved by no gradient


def test_each_sequence_is_routed_on_its_own():
    ffn = build(n_group=2, topk_group=1)
    x = torch.randn(3, 5, D)
    y, _ = ffn(x)
    y1, _ = ffn(x[1:2])
    torch.testing.assert_close(y[1:2], y1)


def test_a_removed_shared_expert_moves_the_output():
    """The shared expert is really added: zeroing its output matrix changes y by exactly its term."""
    ffn = build()
    x = torch.randn(1, 4, D)
    y, _ = ffn(x)
    with torch.no_grad():
        ffn.shared.w2.weight.zero_()
    y0, _ = ffn(x)
    assert (y - y0).abs().max() > 1e-4


@pytest.mark.parametrize("kw", [{}, {"n_group": 4, "topk_group": 2, "n_shared_experts": 2}, {"n_shared_experts": 0}])
def test_parameter_count_is_exact(kw):
    cfg = cfg_for(n_layers=2, **kw).validate()
    model = build_model(cfg)
    assert cfg.approx_params() == sum(p.numel() for p in model.parameters())
    assert any(n.endswith("e_score_correction_bias") for n, _ in model.named_buffers())


@pytest.mark.parametrize(
    "kw,field",
    [
        ({"n_group": 3}, "n_group"),  # 8 experts in 3 groups
        ({"n_group": 8}, "n_group"),  # groups of one expert have no two best
        ({"n_group": 2, "topk_group": 3}, "topk_group"),
        ({"n_group": 4, "topk_group": 1, "top_k": 3}, "top_k"),  # 2 reachable experts
        ({"top_k": 9}, "top_k"),
        ({"routed_scaling": 0.0}, "routed_scaling"),
        ({"routed_scaling": float("inf")}, "routed_scaling"),
    ],
)
def test_refusals_name_the_field(kw, field):
    with pytest.raises(ConfigError) as e:
        cfg_for(**kw).validate()
    assert e.value.field == field


def test_whole_model_trains_one_step():
    cfg = cfg_for(n_layers=2, n_group=2, topk_group=1).validate()
    model = build_model(cfg)
    ids = torch.randint(0, 256, (2, 10))
    out = model(ids)
    loss = torch.nn.functional.cross_entropy(out.logits[:, :-1].reshape(-1, 256), ids[:, 1:].reshape(-1))
    (loss + out.aux_loss).backward()
    assert out.aux_loss > 0
    assert all(p.grad is not None for p in model.parameters())
