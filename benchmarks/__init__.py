"""Developer command-line tools that print figures (``python -m benchmarks.<name>``); nothing in the
library imports them. Each ends with a ``machine:`` line saying how busy the machine was.

- ``attention_choices``: forward time and measured memory of every attention, L = 1k..8k.
- ``kernel_speed`` (with ``kernel_providers``): our kernels against SDPA, FlexAttention and the reference.
- ``cpu_plan``: the CPU block-sparse layout planning, once per layout against every call.
- ``app_timings``: server time of the app's handlers, cold start, a sweep.
- ``loadtest``: concurrent ``gradio_client`` users against ``python app.py``.
- ``netcheck``: redraw bytes and time in Chromium over an emulated 10 Mbit/s link.
- ``sessioncheck``: the memory of idle sessions before and after they expire.
- ``compute_slots``: requests/s and latency for 1-4 concurrent analyses (where to set the slots).
- ``train_tab``: the Train tab served alone.
"""
