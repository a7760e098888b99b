"""Dropout whose masks come from the model's own random source, never torch's global RNG.

Every ``Dropout`` of a model draws from the one ``RandomSource`` ``build_model`` gives the model
(``model.random``, attached by ``use_random_source``), seeded from the config's seed; a trainer
reseeds it per run (``reseed``). A ``Dropout`` with no source (a module built on its own, outside
``build_model``) behaves as ``nn.Dropout``. A forward
and backward in one thread therefore never shares random state with a build or a forward in another:
nothing has to hold a process-wide lock around them, and the same seed gives the same masks whatever
ran beside. The reversible stack, which recomputes each layer in backward, saves and restores the
source's state (``state`` / ``set_state``) so the recomputed masks equal the first ones.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class RandomSource:
    """One ``torch.Generator`` per device, all seeded from one seed; shared by a model's dropouts."""

    def __init__(self, seed: int = 0):
        self.seed = int(seed)
        self._generators: dict = {}

    def generator(self, device) -> torch.Generator:
        device = torch.device(device)
        key = str(device)
        if key not in self._generators:
            self._generators[key] = torch.Generator(device=device).manual_seed(self.seed)
        return self._generators[key]

    def reseed(self, seed: int) -> None:
        self.seed = int(seed)
        self._generators.clear()

    def state(self) -> dict:
        return {key: gen.get_state() for key, gen in self._generators.items()}

    def set_state(self, state: dict) -> None:
        for key, value in state.items():
            self.generator(key).set_state(value)


class Dropout(nn.Module):
    """``nn.Dropout`` (inverted: kept values scaled by ``1 / (1 - p)``) drawing from ``self.source``."""

    def __init__(self, p: float):
        super().__init__()
        self.p = float(p)
        self.source = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0.0:
            return x
        if self.source is None:
            return F.dropout(x, self.p, training=True)
        keep = torch.rand(x.shape, generator=self.source.generator(x.device), device=x.device) >= self.p
        return x * keep / (1.0 - self.p)

    def extra_repr(self) -> str:
        return f"p={self.p}"


def use_random_source(model: nn.Module, source: RandomSource) -> RandomSource:
    """Make every ``Dropout`` of ``model`` draw from ``source`` (kept as ``model.random``)."""
    for module in model.modules():
        if isinstance(module, Dropout):
            module.source = source
    model.random = source
    return source


def random_sources(module: nn.Module) -> list:
    """The distinct sources the dropouts inside ``module`` draw from."""
    found = {}
    for m in module.modules():
        if isinstance(m, Dropout) and m.source is not None:
            found[id(m.source)] = m.source
    return list(found.values())
