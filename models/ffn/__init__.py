"""The feed-forward registry (docs/catalogue.md section 6): dense FFNs, mixtures of experts, product keys.

``FFN`` gathers the ``VARIANTS`` of ``dense.py`` (relu, gelu, swish, glu, geglu, swiglu, none),
``moe.py`` (moe, switch, hash), ``moe_shared.py`` (moe_deepseek), ``moe_clamped.py`` (moe_swiglu_clamped,
gpt-oss's), ``moe_llama4.py`` (moe_llama4), ``moe_qwen.py`` (moe_qwen) and ``pkm.py`` (pkm). ``build(cfg)``
returns a module with ``forward(x, tokens=None) -> (y, aux)`` (``aux``: a dict, routing statistics and ``"loss"`` for
experts) and ``output_parameters()`` (the output-projection weights the gradient-norm plots read).
No module imports this package back.
"""

from __future__ import annotations

from ..variant import gather
from . import dense, moe, moe_clamped, moe_llama4, moe_qwen, moe_shared, pkm
from .dense import GELUFFN, DenseFFN, GatedFFN, ffn_hidden_size

FFN = gather(
    dense.VARIANTS,
    moe.VARIANTS,
    moe_shared.VARIANTS,
    moe_clamped.VARIANTS,
    moe_llama4.VARIANTS,
    moe_qwen.VARIANTS,
    pkm.VARIANTS,
)

__all__ = ["FFN", "ffn_hidden_size", "DenseFFN", "GatedFFN", "GELUFFN"]
