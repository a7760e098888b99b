"""The transformer family catalogue: configs, registries, and model assembly.

Public API (DESIGN.md): ``ModelConfig``, ``ConfigError``, ``build_model``, ``choices``.
"""
from .config import ConfigError, ModelConfig
from .model import ModelOutput, TransformerModel, build_model
from .registry import choices, registries

__all__ = ["ModelConfig", "ConfigError", "build_model", "choices", "registries", "ModelOutput",
           "TransformerModel"]
