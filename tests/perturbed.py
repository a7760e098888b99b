"""A small model whose norms and biases are moved off their initial values (ones and zeros), so that a
term forgotten in a sum (a bias, a norm's scale) shows in a test's comparison."""

import torch

from models import ModelConfig, build_model


def perturbed_model(base: dict, scale: float = 0.1, **fields):
    """``build_model(ModelConfig(**{**base, **fields}))`` in eval mode, every norm parameter and bias
    moved by ``scale`` times standard normal noise (the config's seed fixes the weights; the noise uses torch's
    global generator, as the tests' own draws do)."""
    model = build_model(ModelConfig(**{**base, **fields}))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name or name.endswith("bias"):
                p.add_(scale * torch.randn_like(p))
    return model.eval()
