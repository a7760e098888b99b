"""Sizes of the Triton linear-attention path, in a leaf module: the dispatcher
(kernels/linear_attention.py) and the kernels (kernels/linear_attention_triton.py) both read them,
and the dispatcher must decide without importing triton."""
from __future__ import annotations

# Feature / value dims the Triton path takes (padded to 32 or 64); wider ones use the torch path.
MAX_PAD = 64


def padded_dim(m: int, d: int) -> int:
    """One padded size for both feature and value dims: exactly the AOT-compiled variants."""
    return max(32, 1 << (max(m, d) - 1).bit_length())
