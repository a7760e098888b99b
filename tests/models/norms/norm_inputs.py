"""What the norm and placement tests share: the width, seeded inputs off zero mean and unit scale, and a
norm whose parameters are moved off their init."""

import torch

D = 8


def draw(*shape, seed=0):
    """``shape + (D,)`` values with mean about 1 and scale about 3, after ``torch.manual_seed(seed)``."""
    torch.manual_seed(seed)
    return torch.randn(*shape, D) * 3 + 1


def perturbed(norm):
    with torch.no_grad():  # move parameters off their init so the test sees them used
        for p in norm.parameters():
            p.add_(torch.randn_like(p) * 0.3)
    return norm
