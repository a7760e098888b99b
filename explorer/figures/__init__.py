"""Results -> Plotly figures and Markdown readings, styled to be projected; no torch, no gradio.

``base`` (layout, subplot domains, axes, legends: the helpers every figure uses), ``attention``,
``zoom``, ``stacks`` (other stacks and cross-attention), ``gradients``, ``latency``, ``compare``,
``training``, ``readings`` (the one-line readings and the model card), ``notes`` (what a figure says
about its own curves), ``views/`` (one module per variant view)."""
