"""What the layer-structure tests share: a model built from a small config, token draws, and the forward
context a hand-built reference runs its blocks in."""

import torch

from models import ModelConfig, build_model
from models.context import ForwardContext


def model_from(base, **fields):
    return build_model(ModelConfig(**{**base, **fields}))


def draw_tokens(B=2, n=24, seed=0):
    """``(B, n)`` byte tokens from a generator seeded ``seed``."""
    return torch.randint(0, 256, (B, n), generator=torch.Generator().manual_seed(seed))


def stack_context(model, tokens, classifier=False):
    """The context ``model`` runs its stack in, positions from 0; ``classifier``: with the model's exit classifier."""
    extra = {"classifier": model.classify} if classifier else {}
    return ForwardContext(tokens=tokens, position=model.position, positions=torch.arange(tokens.shape[1]), **extra)
