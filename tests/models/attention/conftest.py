"""Scaffolding of the attention-core tests: a small config and the core built from it.

``core_for(key, causal=True, **fields)`` returns ``(cfg, core)``: the validated config (``core_base``
plus the mechanism, the causal flag and ``fields``) and ``ATTENTION[cfg.attention].build(cfg)``.
``config_for`` is the config alone. A module overrides ``core_base`` for its own sizes and position
encoding, and ``core_aliases`` to name a variant of a mechanism as a key of its own (its extra fields).

A config the catalogue refuses raises ``ConfigError``; ``skip_rejected=True`` skips instead, for a
test parametrized over every (mechanism, causal) pair where some are refused by design (with the
reason in the skip message). The global torch seed is reset before each build, so a test's
unseeded draws (``torch.randn_like``) do not depend on the tests that ran before it.
"""

import pytest
import torch

from models import ConfigError, ModelConfig
from models.attention import ATTENTION

CORE_BASE = {"d_model": 32, "n_heads": 4, "n_layers": 1, "max_len": 64, "position": "sinusoidal"}


@pytest.fixture
def core_base():
    """The fields every core of a module starts from (d_head 8, 4 heads, up to 64 positions)."""
    return CORE_BASE


@pytest.fixture
def core_aliases():
    """Test keys that stand for a mechanism with extra fields: ``{key: {field: value}}``."""
    return {}


@pytest.fixture
def config_for(core_base, core_aliases):
    def config_for(key, causal=True, **fields):
        extra = core_aliases.get(key, {"attention": key})
        return ModelConfig(**{**core_base, **extra, "causal": causal, **fields}).validate()

    return config_for


@pytest.fixture
def core_for(config_for):
    def core_for(key, causal=True, *, skip_rejected=False, **fields):
        try:
            cfg = config_for(key, causal, **fields)
        except ConfigError as e:
            if skip_rejected:
                pytest.skip(f"rejected with a reason: {e}")
            raise
        torch.manual_seed(0)
        return cfg, ATTENTION[cfg.attention].build(cfg)

    return core_for
