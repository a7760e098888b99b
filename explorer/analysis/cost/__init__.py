"""What a config costs, measured on this machine: latency and memory against sequence length
(``sweep.py``, one length's runs in ``sweep_runs.py``, the attention's own time in ``core_timer.py``), and
the model card: parameters, measured FLOPs per token (``flops.py``) and KV-cache bytes (``summary.py``)."""
