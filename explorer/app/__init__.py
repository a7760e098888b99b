"""The Gradio app, the only part of the code that imports gradio.

``layout`` builds the page and ``wiring`` connects its events; ``tabs/`` holds one module per tab's
handlers; ``api`` every documented endpoint; ``controls`` (the config controls and the controls' side
of the config door), ``sources`` (preset, link, upload), ``share`` / ``share_js`` (share links),
``state``, ``messages``, ``history`` (undo / reset), ``weights`` (the trained-weights switch),
``stacks`` (what a model of several stacks adds to the page), ``export``, ``jobs`` (heavy work:
admitted per family, low priority, stoppable), ``sessions`` (idle sessions expire), ``gradio_compat`` (the Gradio internals relied on)."""
