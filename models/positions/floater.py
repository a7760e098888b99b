"""FLOATER (Liu et al. 2020, "Learning to Encode Position for Transformer with Continuous Dynamical Model").

Positions are the trajectory of a learned dynamical system instead of a table:

    dp/dt = h(t, p) = W2 tanh(W1 p + w_t t + b1) + b2,    p(0) = p0 (learned),

and token ``i`` gets ``p(i * dt)`` (``dt = floater_dt``) added to its embedding. The trajectory is
integrated with the classical fixed-step fourth-order Runge-Kutta method, one step of ``dt`` per
position, so the encoding is defined at any position (no ``max_len`` table) and gradients reach the
ODE network by backpropagating through the solver steps (the paper's adjoint method gives the same
gradient; with a fixed-step solver direct backpropagation is exact and simpler).

Deviations from the paper: the encoding is added once, to the embeddings (the paper injects a
per-layer trajectory into every block); the ODE network is one hidden layer of ``floater_hidden``
tanh units.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ..capabilities import PositionCaps
from ..errors import ConfigError
from ..variant import Param, Variant

_INIT_STD = 0.02  # small output weights keep the drift of p over thousands of steps moderate

FLOATER_HIDDEN = Param("floater_hidden", int, 32, range=(1, 4096), cap=256)  # width of the ODE network
FLOATER_DT = Param("floater_dt", float, 0.01)


class Floater(nn.Module):
    """Position encoding ``p(i * dt)`` from a learned ODE, with the ``embed`` / ``modify`` hooks of
    ``base.NoPosition``."""

    def __init__(self, cfg):
        super().__init__()
        d, hdim = cfg.d_model, cfg.floater_hidden
        self.dt = float(cfg.floater_dt)
        # Parameters (not nn.Linear): the model's Xavier init of Linear layers must not rescale them
        self.p0 = nn.Parameter(torch.randn(d) * _INIT_STD)
        self.w1 = nn.Parameter(torch.randn(hdim, d) / math.sqrt(d))
        self.w_t = nn.Parameter(torch.randn(hdim))
        self.b1 = nn.Parameter(torch.zeros(hdim))
        self.w2 = nn.Parameter(torch.randn(d, hdim) * _INIT_STD)
        self.b2 = nn.Parameter(torch.zeros(d))

    def field(self, t: float, p: torch.Tensor) -> torch.Tensor:
        """``h(t, p)`` for ``p [d]``: the right-hand side of the ODE."""
        return self.w2 @ torch.tanh(self.w1 @ p + self.w_t * t + self.b1) + self.b2

    def trajectory(self, n: int) -> torch.Tensor:
        """``[p(0), p(dt), ..., p((n-1) dt)]`` as ``[n, d]``, one RK4 step per position."""
        dt, p = self.dt, self.p0
        out = [p]
        for i in range(n - 1):
            t = i * dt
            k1 = self.field(t, p)
            k2 = self.field(t + dt / 2, p + dt / 2 * k1)
            k3 = self.field(t + dt / 2, p + dt / 2 * k2)
            k4 = self.field(t + dt, p + dt * k3)
            p = p + dt / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
            out.append(p)
        return torch.stack(out)  # (n, d)

    def embed(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        n = int(pos.max()) + 1 if pos.numel() else 0
        if n == 0:
            return x
        table = self.trajectory(n)  # (n, d)
        return x + table[pos].to(x.dtype)  # (L, d) broadcast over B

    def modify(self, q, k, layer: int, k_start: int = 0, scale=None):
        return q, k, {}


def _check(cfg) -> None:
    if not (math.isfinite(cfg.floater_dt) and cfg.floater_dt > 0):
        raise ConfigError(
            "floater_dt", cfg.floater_dt, "a finite positive number: the ODE time between consecutive positions"
        )


def _n_params(cfg) -> int:
    d, hdim = cfg.d_model, cfg.floater_hidden
    return d + hdim * d + 2 * hdim + d * hdim + d


VARIANTS = (
    Variant(
        "floater",
        "Liu et al. 2020 (FLOATER)",
        "Positions are the trajectory of a learned neural ODE, integrated with RK4 and added to the embeddings.",
        build=Floater,
        params=(FLOATER_HIDDEN, FLOATER_DT),
        check=_check,
        caps=PositionCaps(absolute=True),
        n_params=_n_params,
    ),
)
