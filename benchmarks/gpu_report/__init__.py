"""``python -m benchmarks.gpu_report [--out DIR] [--quick]``: prove the kernels on a GPU and
measure them against the yardsticks, in one command and at most ~8 minutes of machine time.

Sections, each written to ``DIR/gpu_report.json`` and ``DIR/gpu_report.md`` as soon as it ends (a
time limit leaves a partial report; ``status`` says which sections finished):

- ``environment`` (env.py): versions, GPU, SM count, clocks, enabled SDPA backends.
- ``compile`` (compile_times.py, first_call.py): every kernel specialisation compiled ahead of time
  for this GPU (seconds, registers, spills, shared memory) into a fresh Triton cache that the rest
  of the report then uses; the app's variants' first calls with an empty cache and with the cache
  filled ahead of time (is it hit?).
- ``correctness`` (correctness.py, cases.py): every case against a float64 reference, outputs and
  gradients, tolerance twice the error of torch's own kernel in the same dtype.
- ``syncs`` (syncs.py): no host synchronisation in the launch path; CPU microseconds per call.
- ``speed`` (speed.py): TFLOP/s against SDPA (flash, cuDNN) and compiled FlexAttention; the
  block-sparse patterns; linear attention, RoPE and norms against their torch references.
- ``targets`` (targets.py): each target met or MISSED, with the published reference lines.

Without CUDA the report runs the kernels in the Triton interpreter on small shapes (the entry point
sets ``TRITON_INTERPRET=1`` before triton is imported, or re-executes itself if triton already was)
and marks the GPU sections skipped: that is the CI run (tests/benchmarks/test_gpu_report.py). Docs: docs/gpu.md.
"""
