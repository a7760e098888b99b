"""Block-sparse FlashAttention-2: ``common`` (algorithm, score and mask helpers, tile lookup),
``fwd`` and ``bwd`` (the kernels), ``plan`` (a BlockMask's block lists for the kernels), ``launcher``
(argument checks, launches, ``torch.autograd.Function``, :func:`flash_attention`)."""
