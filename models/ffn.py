"""The feed-forward registry (docs/catalogue.md section 6): dense FFNs and mixtures of experts.

``FFN`` gathers the records of ``ffn_dense.py`` (relu, gelu, swish, glu, geglu, swiglu, none) and
``moe.py`` (moe, switch, hash). ``build(cfg)`` returns a module with ``forward(x, tokens=None) ->
(y, aux)`` (``aux``: a dict, routing statistics and ``"loss"`` for experts) and
``output_parameters()`` (the output-projection weights the gradient-norm plots read).
"""
from __future__ import annotations

from . import ffn_dense, moe
from .ffn_dense import DenseFFN, GatedFFN, GELUFFN, ffn_hidden_size
from .variant import register

FFN: dict = {}
for _v in ffn_dense.VARIANTS + moe.VARIANTS:
    register(FFN, _v)

# issue 11: product-key memory (its own module)
from . import ffn_pkm  # noqa: E402

for _v in ffn_pkm.VARIANTS:
    register(FFN, _v)

__all__ = ["FFN", "ffn_hidden_size", "DenseFFN", "GatedFFN", "GELUFFN"]
