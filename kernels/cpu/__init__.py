"""The PyTorch paths (CPU tensors, and whatever the Triton kernels do not take): block-sparse attention
(``attention``, planned by ``plan`` with ``compact``), pooled attention maps (``pooled``, and
``pooled_linear`` for linear attention), chunked linear attention, norms and RoPE."""
