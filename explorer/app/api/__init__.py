"""The documented API and the export: ``endpoints`` (``/analyze``, ``/gradients``, ``/compare_ab``,
``/export``, ``/benchmark``) and ``export`` (one zip of what every registered tab shows). The tabs' own
endpoints (``/long_context``, ``/logit_lens``, ...) live with their tab and are wired by it."""
