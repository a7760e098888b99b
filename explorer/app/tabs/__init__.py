"""One module per tab's handlers: ``attention`` (with ``grid`` pickers and the ``zoom``), ``views``,
``analysis`` (Gradients, Model and the KV-cache figure), ``latency``, ``compare``, ``train``."""
