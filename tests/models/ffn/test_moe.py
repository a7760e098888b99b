"""Mixture-of-experts FFNs (catalogue section 6) against per-token loop references."""

import math

import pytest
import torch

from models import ModelConfig, build_model
from models.ffn import FFN

D, E = 8, 4
KEYS = ("moe", "switch", "hash")


def cfg_for(key, **kw):
    return ModelConfig(**{"d_model": D, "n_heads": 2, "n_experts": E, "ffn": key, "d_ff": 16, **kw})


def build(key, torch_seed=0, **kw):
    torch.manual_seed(torch_seed)
    return FFN[key].build(cfg_for(key, **kw))


def router_probs(ffn, x):
    """Router probabilities recomputed from the module's weight, not its forward."""
    return torch.softmax(x @ ffn.router.weight.T, dim=-1)


def loop_reference(ffn, x, k, renormalise, cap):
    """Per-sequence, per-token reference: top-k, priority rank-then-position, capacity drop."""
    B, S, _ = x.shape
    probs = router_probs(ffn, x)
    y = torch.zeros_like(x)
    dropped = 0
    for b in range(B):
        used = [0] * E
        top_p, top_e = probs[b].topk(k, dim=-1)
        for r in range(k):
            for s in range(S):
                e = int(top_e[s, r])
                if used[e] >= cap:
                    dropped += 1
                    continue
                used[e] += 1
                g = top_p[s, r] / top_p[s].sum() if renormalise else top_p[s, r]
                y[b, s] += g * ffn.experts[e](x[b, s][None])[0][0]
    return y, dropped


@pytest.mark.parametrize("key", ["moe", "switch"])
def test_aux_loss_equals_gshard_formula(key):
    ffn = build(key)
    x = torch.randn(2, 7, D)
    _, aux = ffn(x)
    probs = router_probs(ffn, x).reshape(-1, E)
    n = probs.shape[0]
    top1 = [int(p.argmax()) for p in probs]
    f = torch.tensor([top1.count(e) / n for e in range(E)])
    P = torch.stack([probs[:, e].sum() / n for e in range(E)])
    torch.testing.assert_close(aux["loss"], 0.01 * E * (f * P).sum())  # Switch's coefficient alpha = 1e-2
    # uniform routing gives exactly 1, times the coefficient
    with torch.no_grad():
        ffn.router.weight.zero_()
    assert ffn(x)[1]["loss"].item() == pytest.approx(0.01)


@pytest.mark.parametrize(
    "key,k,renorm,cf",
    [
        ("moe", 2, True, 1.25),
        ("moe", 2, True, 0.5),
        ("moe", 3, True, 0.75),
        ("switch", 1, False, 1.25),
        ("switch", 1, False, 0.5),
    ],
)
def test_output_counts_and_drops_equal_loop_reference(key, k, renorm, cf):
    ffn = build(key, top_k=k, capacity_factor=cf)
    x = torch.randn(3, 9, D)
    y, aux = ffn(x)
    cap = math.ceil(cf * 9 * k / E)
    assert aux["capacity"] == cap
    ref, dropped = loop_reference(ffn, x, k, renorm, cap)
    torch.testing.assert_close(y, ref, rtol=1e-5, atol=1e-6)
    assert aux["dropped"] == dropped
    top_e = router_probs(ffn, x).topk(k, dim=-1).indices
    assert aux["expert_counts"].dtype == torch.long
    assert aux["expert_counts"].tolist() == [int((top_e == e).sum()) for e in range(E)]
    assert aux["expert_counts"].sum() == 3 * 9 * k
    assert torch.equal(aux["assignment"], top_e[..., 0])


def test_switch_drops_exactly_the_tokens_over_capacity():
    ffn = build("switch", capacity_factor=1.25)
    with torch.no_grad():  # a router that sends every token to expert 2
        ffn.router.weight.zero_()
        ffn.router.weight[2, 0] = 1.0
    x = torch.randn(2, 10, D)
    x[..., 0] = 5.0 + x[..., 0].abs()
    y, aux = ffn(x)
    cap = math.ceil(1.25 * 10 / E)  # 4 per sequence
    assert aux["capacity"] == cap
    assert aux["expert_counts"].tolist() == [0, 0, 20, 0]
    assert aux["dropped"] == 2 * (10 - cap)
    assert (aux["assignment"] == 2).all()
    p = router_probs(ffn, x)[..., 2:3]
    torch.testing.assert_close(y[:, :cap], p[:, :cap] * ffn.experts[2](x[:, :cap])[0])
    assert (y[:, cap:] == 0).all()  # dropped: the residual carries them unchanged


def test_switch_dropped_tokens_pass_through_the_block_residual():
    cfg = ModelConfig(
        d_model=D, n_heads=2, n_layers=1, ffn="switch", n_experts=E, capacity_factor=0.25, norm_placement="pre"
    )
    block = build_model(cfg).stack.blocks[0]
    x = torch.randn(1, 12, D)
    seen = {}

    def ffn(h):
        y, seen["aux"] = block.ffn(h, None)
        seen["y"] = y
        return y

    out = block.res_ffn(x, ffn)
    dropped = (seen["y"] == 0).all(-1)[0]  # at most capacity = 1 token per expert is kept
    assert int(dropped.sum()) == seen["aux"]["dropped"] >= 12 - E
    torch.testing.assert_close(out[0, dropped], x[0, dropped], rtol=0, atol=0)
    assert not torch.isclose(out[0, ~dropped], x[0, ~dropped]).all(-1).any()


def test_moe_gates_renormalised_sum_to_one():
    ffn = build("moe", top_k=2, capacity_factor=float(E))  # capacity never binds
    with torch.no_grad():  # identical experts: output = (sum of gates) * expert(x)
        for e in ffn.experts[1:]:
            e.load_state_dict(ffn.experts[0].state_dict())
    x = torch.randn(2, 6, D)
    y, aux = ffn(x)
    assert aux["dropped"] == 0
    torch.testing.assert_close(y, ffn.experts[0](x)[0], rtol=1e-5, atol=1e-6)
    top_p = router_probs(ffn, x).topk(2, dim=-1).values
    assert (top_p.sum(-1) < 1).all()  # so without renormalisation the outputs would differ


def test_moe_top_k_priority_is_rank_then_position():
    ffn = build("moe", top_k=2, capacity_factor=0.5)  # cap = ceil(0.5 * 2 * 2 / 4) = 1
    with torch.no_grad():  # logits = (x_0, x_1, 0, 0)
        ffn.router.weight.zero_()
        ffn.router.weight[0, 0], ffn.router.weight[1, 1] = 1.0, 1.0
    x = torch.randn(1, 2, D)
    x[0, 0, :2] = torch.tensor([3.0, 2.0])  # token 0: first choice expert 0, second expert 1
    x[0, 1, :2] = torch.tensor([1.0, 3.0])  # token 1: first choice expert 1, second expert 0
    y, aux = ffn(x)
    assert aux["capacity"] == 1 and aux["dropped"] == 2
    assert aux["expert_counts"].tolist() == [2, 2, 0, 0]
    g = router_probs(ffn, x)[0]
    # rank first: both first choices fit, both second choices are dropped (token-major order would
    # instead give token 0 both of its experts and token 1 nothing)
    torch.testing.assert_close(y[0, 0], g[0, 0] / (g[0, 0] + g[0, 1]) * ffn.experts[0](x[0, :1])[0][0])
    torch.testing.assert_close(y[0, 1], g[1, 1] / (g[1, 0] + g[1, 1]) * ffn.experts[1](x[0, 1:])[0][0])


@pytest.mark.parametrize("key", ["moe", "switch"])
def test_each_sequence_is_its_own_capacity_group(key):
    ffn = build(key, capacity_factor=0.5)
    x = torch.randn(3, 8, D)
    torch.testing.assert_close(ffn(x)[0][1:2], ffn(x[1:2])[0], rtol=1e-5, atol=1e-6)


def test_switch_is_causal_safe():
    ffn = build("switch", capacity_factor=0.5)
    x = torch.randn(1, 12, D)
    x2 = x.clone()
    x2[:, 7:] = torch.randn(1, 5, D)
    torch.testing.assert_close(ffn(x2)[0][:, :7], ffn(x)[0][:, :7], rtol=0, atol=0)


def test_hash_routing_is_a_pure_function_of_the_token_id():
    ffn = build("hash", vocab_size=64)
    assert not any("router" in n for n, _ in ffn.named_parameters())
    assert sum(p.numel() for p in ffn.parameters()) == sum(p.numel() for e in ffn.experts for p in e.parameters())
    assert torch.bincount(ffn.table, minlength=E).tolist() == [64 // E] * E  # balanced table
    g = torch.Generator().manual_seed(1)
    tok = torch.randint(0, 64, (3, 20), generator=g)
    tok[1] = tok[0].flip(0)  # same ids in other positions and contexts
    x = torch.randn(3, 20, D, generator=g)
    y, aux = ffn(x, tok)
    assert "loss" not in aux and aux["dropped"] == 0
    assert aux["expert_counts"].tolist() == [int((ffn.table[tok] == e).sum()) for e in range(E)]
    for b in range(3):
        for s in range(20):
            e = int(aux["assignment"][b, s])
            assert e == int(ffn.table[tok[b, s]])
            torch.testing.assert_close(y[b, s], ffn.experts[e](x[b, s][None])[0][0])
    first = {}
    for t, e in zip(tok.flatten().tolist(), aux["assignment"].flatten().tolist()):
        assert first.setdefault(t, e) == e
    # a second call with other context, batch size and length routes each id the same way
    tok2 = torch.cat([tok[2, 5:], tok[0, :3]])[None]
    _, aux2 = ffn(torch.randn(1, tok2.shape[1], D), tok2)
    assert aux2["assignment"][0].tolist() == [first[t] for t in tok2[0].tolist()]
    # the table is fixed by the seed, not by the global RNG
    assert torch.equal(build("hash", torch_seed=7, vocab_size=64).table, ffn.table)
    assert not torch.equal(build("hash", vocab_size=64, seed=3).table, ffn.table)


@pytest.mark.parametrize("key", KEYS)
def test_model_forward_backward_aux_loss_and_stats(key):
    cfg = ModelConfig(d_model=16, n_heads=2, n_layers=2, ffn=key, n_experts=E, max_len=64)
    model = build_model(cfg)
    tok = torch.randint(0, 256, (2, 24), generator=torch.Generator().manual_seed(0))
    out = model(tok)
    infos = [layer.experts for layer in out.layers]
    assert len(infos) == 2
    for info in infos:
        assert info.expert_counts.shape == (E,) and info.expert_counts.dtype == torch.long
        assert info.assignment.shape == (2, 24) and isinstance(info.dropped, int)
    if key == "hash":
        assert out.aux_loss.item() == 0 and all(layer.ffn_loss is None for layer in out.layers)
    else:
        torch.testing.assert_close(out.aux_loss, sum(layer.ffn_loss for layer in out.layers))
    (out.logits.square().mean() + out.aux_loss).backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
    for block in model.stack.blocks:
        assert len(block.ffn.output_parameters()) == E
        if key != "hash":
            assert block.ffn.router.weight.grad.abs().sum() > 0
