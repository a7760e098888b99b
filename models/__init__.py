"""The transformer family catalogue: configs, registries, and model assembly.

Public API: ``ModelConfig``, ``ConfigError``, ``build_model``, ``choices``; ``ModelOutput.layers`` holds
one ``LayerInfo`` per applied layer. How the package is organised: docs/architecture.md.
"""

from .config import ConfigError, ModelConfig
from .context import LayerInfo
from .model import ModelOutput, TransformerModel, build_model
from .registry import choices, registries

__all__ = [
    "ModelConfig",
    "ConfigError",
    "build_model",
    "choices",
    "registries",
    "ModelOutput",
    "TransformerModel",
    "LayerInfo",
]
