"""The Triton kernels (CUDA; on CPU tensors only under ``TRITON_INTERPRET=1``, in the tests).

``flash/``: block-sparse FlashAttention-2, forward and backward; ``pooled``: pooled attention maps;
``linear_attention``, ``norms``, ``rope``; ``selected``: NSA's selected-block attention, forward and
backward; ``grid_limits``: splitting a batch over CUDA's grid limit.
Every module here imports triton, so nothing imports them but the dispatchers one level up (on the
Triton path only, through ``kernels/backend.py``) and the compile checks in ``kernels/tools/``.
"""
