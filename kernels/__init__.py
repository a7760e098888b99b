"""Attention and friends, one entry point per operation on every device.

CUDA tensors run our Triton kernels; CPU tensors run block-sparse PyTorch. Importing this package
imports neither Triton nor any model code.
"""

from .attention import (
    attention,
    attention_backend,
    attention_flops,
    attention_ref,
    record_backends,
    record_kernel_flops,
)
from .block_mask import BlockMask, block_mask, block_mask_from_rows, block_mask_from_tiles
from .cpu.pooled_linear import pooled_linear
from .delta_rule import gated_delta_backend, gated_delta_map, gated_delta_rule, gated_delta_step
from .pooled import pooled_attention, pooled_backend
from .pooled_dense import PooledAttention, pool_probs, pooled_block
from .selected import selected_attention, selected_backend, selection_layout
from .ssd import ssd, ssd_backend, ssd_map, ssd_step

__all__ = [
    "attention",
    "attention_backend",
    "attention_ref",
    "attention_flops",
    "record_backends",
    "record_kernel_flops",
    "BlockMask",
    "block_mask",
    "block_mask_from_rows",
    "block_mask_from_tiles",
    "gated_delta_rule",
    "gated_delta_backend",
    "gated_delta_step",
    "gated_delta_map",
    "pooled_attention",
    "pooled_backend",
    "PooledAttention",
    "pool_probs",
    "pooled_block",
    "pooled_linear",
    "selected_attention",
    "selected_backend",
    "selection_layout",
    "ssd",
    "ssd_backend",
    "ssd_map",
    "ssd_step",
]
