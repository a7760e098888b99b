"""Product-key memory (Lample et al. 2019) against its formulas."""

import itertools

import pytest
import torch

from models import ConfigError, ModelConfig, build_model
from models.ffn import FFN
from models.ffn.pkm import product_topk


def _cfg(**kw):
    return ModelConfig(**{"d_model": 8, "n_heads": 2, "n_layers": 1, **kw})


@pytest.mark.parametrize("n,k,heads", [(5, 2, 1), (7, 3, 2), (4, 4, 3)])
def test_product_topk_equals_brute_force_over_all_pairs(n, k, heads):
    g = torch.Generator().manual_seed(n * 10 + k)
    half = 3
    q1, q2 = torch.randn(6, heads, half, generator=g), torch.randn(6, heads, half, generator=g)
    c1, c2 = torch.randn(heads, n, half, generator=g), torch.randn(heads, n, half, generator=g)
    scores, index = product_topk(q1, q2, c1, c2, k)
    for t, h in itertools.product(range(6), range(heads)):
        every = torch.tensor(
            [float(q1[t, h] @ c1[h, a] + q2[t, h] @ c2[h, b]) for a in range(n) for b in range(n)]
        )  # slot a * n + b
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
            s = keys[h] @ q[bi, li, h * 2 * half : (h + 1) * 2 * half]  # (16,) every slot
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
