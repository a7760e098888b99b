"""Turning what a caller sends (a ``ModelConfig``, a dict or a JSON string) into a valid config.

A leaf module: every explorer module that accepts a config imports ``as_config`` from here.
"""
from __future__ import annotations

import json

from models import ConfigError, ModelConfig


def as_config(cfg) -> ModelConfig:
    """A validated ``ModelConfig`` from a ``ModelConfig``, a dict or a JSON string."""
    if isinstance(cfg, str):
        try:
            cfg = json.loads(cfg)
        except json.JSONDecodeError as e:
            raise ConfigError("config", cfg[:80], f"a JSON object of ModelConfig fields ({e.msg})") from None
    if isinstance(cfg, dict):
        cfg = ModelConfig.from_dict(cfg)
    if not isinstance(cfg, ModelConfig):
        raise ConfigError("config", type(cfg).__name__, "a ModelConfig, a dict or a JSON string")
    return cfg.validate()
