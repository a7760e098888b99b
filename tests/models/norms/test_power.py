"""PowerNorm (Shen et al. 2020) against its formulas."""

import pytest
import torch

from models import ConfigError, ModelConfig
from models.norms import NORM

D = 6


def _cfg(**kw):
    return ModelConfig(**{"d_model": 8, "n_heads": 2, "n_layers": 1, **kw})


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
    psi2 = (x**2).sum(dim=(0, 1)) / (3 * 5)  # per feature, over batch and positions
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
        running = alpha * running + (1 - alpha) * (x**2).mean(dim=(0, 1))
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
