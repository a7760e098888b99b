"""FLOATER (Liu et al. 2020): the RK4 trajectory against closed forms and an independent ODE solver."""

import math

import numpy as np
import pytest
import torch
from scipy.integrate import solve_ivp

from models import ConfigError, ModelConfig, build_model
from models.positions import POSITION


def _floater(**kw):
    cfg = ModelConfig(
        **{"d_model": 6, "n_heads": 2, "n_layers": 1, "position": "floater", "floater_hidden": 5, **kw}
    ).validate()
    return cfg, POSITION["floater"].build(cfg).double()


def test_constant_field_gives_evenly_spaced_positions():
    cfg, mod = _floater(floater_dt=0.25)
    with torch.no_grad():
        mod.w2.zero_()
        mod.b2.copy_(torch.linspace(-1, 1, 6))
    traj = mod.trajectory(9)
    want = mod.p0 + torch.arange(9, dtype=torch.float64)[:, None] * 0.25 * mod.b2
    torch.testing.assert_close(traj, want)


def test_linear_decay_matches_the_exponential_to_rk4_accuracy():
    """With w2 tanh(...) replaced by a field that is linear in p the solution is an exponential."""
    cfg, mod = _floater(floater_dt=0.1, floater_hidden=6)
    with torch.no_grad():  # tanh(a z) ~ a z for tiny a: dp/dt = W2 W1 p with W2 W1 = -I * (a * c)
        a = 1e-4
        mod.w1.copy_(torch.eye(6) * a)
        mod.w_t.zero_()
        mod.b1.zero_()
        mod.w2.copy_(-torch.eye(6) / a)
        mod.b2.zero_()
    traj = mod.trajectory(30)
    t = torch.arange(30, dtype=torch.float64)[:, None] * 0.1
    torch.testing.assert_close(traj, mod.p0 * torch.exp(-t), rtol=1e-6, atol=1e-8)


def test_trajectory_matches_an_adaptive_scipy_solver_on_the_learned_field():
    torch.manual_seed(0)
    cfg, mod = _floater(floater_dt=0.05)
    with torch.no_grad():
        mod.w2.mul_(50)  # a field that actually bends the trajectory
        mod.b2.normal_()
    n = 40
    traj = mod.trajectory(n).detach().numpy()

    def rhs(t, p):
        with torch.no_grad():
            return mod.field(t, torch.from_numpy(p)).numpy()

    times = np.arange(n) * 0.05
    ref = solve_ivp(
        rhs, (0.0, times[-1]), mod.p0.detach().numpy(), t_eval=times, method="DOP853", rtol=1e-11, atol=1e-12
    ).y.T
    # RK4 stays within ~1e-6 of the reference here; a second-order method (midpoint) is off by ~1e-3
    assert np.abs(traj - ref).max() < 2e-5 * max(1.0, np.abs(ref).max())


def test_embed_adds_the_trajectory_at_the_token_positions_and_every_parameter_learns():
    cfg, mod = _floater()
    x = torch.randn(2, 7, 6, dtype=torch.float64)
    pos = torch.arange(7)
    y = mod.embed(x, pos)
    torch.testing.assert_close(y - x, mod.trajectory(7).expand(2, -1, -1))
    y.pow(2).sum().backward()
    for name, p in mod.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


def test_model_runs_past_max_len_and_counts_its_parameters():
    cfg = ModelConfig(d_model=16, n_heads=2, n_layers=1, position="floater", max_len=8).validate()
    model = build_model(cfg)
    assert model(torch.zeros(1, 20, dtype=torch.long)).logits.shape == (1, 20, 256)  # an ODE has no table end
    assert cfg.approx_params() == sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("dt", [0.0, -1.0, math.inf])
def test_bad_dt_names_the_field(dt):
    with pytest.raises(ConfigError, match="floater_dt"):
        ModelConfig(position="floater", floater_dt=dt).validate()
