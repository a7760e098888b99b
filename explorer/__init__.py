"""The explorer: the product built on the catalogue (``models``) and its kernels (``kernels``).

Layers, each importing only those listed before it (``tests/models/test_imports.py`` checks it):

- ``runtime/``: what every request needs: settings, the config door, the text path, limits and
  memory budget, the byte-bounded cache, device, presets, untrusted-input helpers.
- ``analysis/``: config -> results (attention maps, gradient norms, sweeps, model card, views);
  torch, no gradio, no plotly.
- ``training/``: trainer, tasks, checkpoints, the reproductions of the source texts' results.
- ``figures/``: results -> Plotly figures and Markdown readings; no torch.
- ``export/``: the zip and the PNGs of an export; no torch.
- ``app/``: the Gradio app, the only importer of gradio: page, events, tabs, API, share links, sessions.

``python -m explorer.reproduce NAME`` runs one reproduction from the command line.
"""
