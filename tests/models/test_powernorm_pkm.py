"""PowerNorm (Shen et al. 2020) and product-key memory (Lample et al. 2019) against their formulas."""
import itertools

import pytest
import torch

from models import ConfigError, ModelConfig, build_model
from models.ffn import FFN
from models.ffn.pkm import product_topk
from models.norms import NORM

D = 6


def _cfg(**kw):
    return ModelConfig(**{"d_model": 8, "n_heads": 2, "n_layers": 1, **kw})


# ---------------------------------------------------------------------------- PowerNorm
def _powernorm(alpha=0.9):
    norm = NORM["powernorm"].build(D, _cfg(powernorm_alpha=alpha))
    with torch.no_grad():
        norm.weight.copy_(torch.linspace(0.5, 2.0, D))
        norm.bias.copy_(torch.linspace(-1.0, 1.0, D))
    return norm


def test_powernorm_training_uses_the_batch_quadratic_mean_without_centring():
    norm = _powernorm()
    x = torch.randn(3, 5, D, generator=torch.Generator().manual_seed(0)) * 2 + 1  # non-zero mean
    y = norm(x)
    psi2 = (x ** 2).sum(dim=(0, 1)) / (3 * 5)  # per feature, over batch and positions
    want = x / torch.sqrt(psi2 + 1e-5) * norm.weight + norm.bias
    torch.testing.assert_close(y, want)


def test_powernorm_running_statistics_follow_the_momentum_and_are_used_in_eval():
    alpha = 0.8
    norm = _powernorm(alpha)
    g = torch.Generator().manual_seed(1)
    batches = [torch.randn(2, 4, D, generator=g) * s for s in (1.0, 3.0, 0.5)]
    running = torch.ones(D)
    for x in batches:
        norm(x)
        running = alpha * running + (1 - alpha) * (x ** 2).mean(dim=(0, 1))
    torch.testing.assert_close(norm.running_psi2, running)
    norm.eval()
    x = torch.randn(1, 3, D, generator=g)
    torch.testing.assert_close(norm(x), x / torch.sqrt(running + 1e-5) * norm.weight + norm.bias)
    before = norm.running_psi2.clone()
    norm(x * 10)
    assert torch.equal(norm.running_psi2, before), "eval must not update the running statistics"


def test_powernorm_eval_output_of_a_token_does_not_depend_on_the_batch():
    norm = _powernorm().eval()
    x = torch.randn(2, 4, D)
    alone = norm(x[:1])
    together = norm(torch.cat([x[:1], x[1:] * 100]))
    torch.testing.assert_close(together[:1], alone)


def test_powernorm_gradient_is_the_exact_gradient_of_the_batch_formula():
    norm = _powernorm().double()
    x = torch.randn(2, 3, D, dtype=torch.float64, requires_grad=True)

    def f(x):
        norm.running_psi2.fill_(1.0)  # the buffer update does not enter the graph
        return norm(x)

    assert torch.autograd.gradcheck(f, (x,))


def test_powernorm_alpha_is_checked():
    with pytest.raises(ConfigError, match="powernorm_alpha"):
        _cfg(norm="powernorm", powernorm_alpha=1.0).validate()


# ---------------------------------------------------------------------------- product-key memory
@pytest.mark.parametrize("n,k,heads", [(5, 2, 1), (7, 3, 2), (4, 4, 3)])
def test_product_topk_equals_brute_force_over_all_pairs(n, k, heads):
    g = torch.Generator().manual_seed(n * 10 + k)
    half = 3
    q1, q2 = torch.randn(6, heads, half, generator=g), torch.randn(6, heads, half, generator=g)
    c1, c2 = torch.randn(heads, n, half, generator=g), torch.randn(heads, n, half, generator=g)
    scores, index = product_topk(q1, q2, c1, c2, k)
    for t, h in itertools.product(range(6), range(heads)):
        every = torch.tensor([float(q1[t, h] @ c1[h, a] + q2[t, h] @ c2[h, b])
                              for a in range(n) for b in range(n)])  # slot a * n + b
        want_scores, want_index = every.topk(k)
        torch.testing.assert_close(scores[t, h], want_scores)
        assert index[t, h].tolist() == want_index.tolist()


def test_pkm_output_is_the_softmax_weighted_sum_of_the_selected_values():
    cfg = _cfg(ffn="pkm", pkm_subkeys=4, pkm_topk=3, pkm_heads=2).validate()
    ffn = FFN["pkm"].build(cfg)
    x = torch.randn(2, 5, cfg.d_model)
    y, aux = ffn(x)
    assert set(aux) == {"slot_counts"} and int(aux["slot_counts"].sum()) == 2 * 5 * cfg.pkm_topk * cfg.pkm_heads
    half = cfg.d_model // 2
    q = x @ ffn.query.weight.T  # (B, L, heads * d)
    keys = [torch.cat([ffn.keys1[h, a], ffn.keys2[h, b]]) for h in range(2) for a in range(4) for b in range(4)]
    keys = torch.stack(keys).view(2, 16, 2 * half)  # full product keys, slot a * n + b
    want = torch.zeros_like(y)
    for bi, li in itertools.product(range(2), range(5)):
        for h in range(2):
            s = keys[h] @ q[bi, li, h * 2 * half:(h + 1) * 2 * half]  # (16,) every slot
            top, idx = s.topk(3)
            want[bi, li] += torch.softmax(top, 0) @ ffn.values[idx]
    torch.testing.assert_close(y, want)


def test_pkm_sends_gradients_to_queries_keys_and_only_the_read_values():
    cfg = _cfg(ffn="pkm", pkm_subkeys=8, pkm_topk=2).validate()
    torch.manual_seed(0)
    ffn = FFN["pkm"].build(cfg)
    x = torch.randn(2, 5, cfg.d_model, generator=torch.Generator().manual_seed(3))
    y, _ = ffn(x)
    (y * torch.randn(y.shape, generator=torch.Generator().manual_seed(4))).sum().backward()
    assert ffn.query.weight.grad.abs().sum() > 0
    assert ffn.keys1.grad.abs().sum() > 0 and ffn.keys2.grad.abs().sum() > 0
    q = ffn.query(x).view(10, 1, 2, cfg.d_model // 2)
    _, index = product_topk(q[:, :, 0], q[:, :, 1], ffn.keys1, ffn.keys2, 2)
    read = torch.zeros(64, dtype=torch.bool)
    read[index.flatten()] = True
    assert ((ffn.values.grad.abs().sum(-1) > 0) == read).all()  # exactly the slots some token read


def test_pkm_checks_name_the_field():
    with pytest.raises(ConfigError, match="pkm_topk"):
        _cfg(ffn="pkm", pkm_subkeys=4, pkm_topk=5).validate()
    with pytest.raises(ConfigError, match="d_model"):
        ModelConfig(d_model=9, n_heads=1, ffn="pkm").validate()


def test_pkm_model_counts_its_parameters():
    cfg = _cfg(ffn="pkm", pkm_subkeys=6, pkm_topk=2, pkm_heads=2, n_layers=2).validate()
    assert cfg.approx_params() == sum(p.numel() for p in build_model(cfg).parameters())
