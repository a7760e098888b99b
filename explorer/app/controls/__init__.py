"""The controls and what a visitor carries: the config controls and their state, links, uploads and weights.

``fields`` (the controls generated from ``ModelConfig``'s fields and the registries; the controls' side of
the config door), ``control_info`` (their help lines), ``state`` (the session's per-page state), ``history``
(undo / reset), ``sources`` (preset, link, upload), ``share`` (share links), ``grid_pick`` (the grid's
layer / head picks), ``weights`` (the Weights choice resolved once per request), ``checkpoint_door`` and
``checkpoint_link`` (opening a pretrained checkpoint by name, upload or link). Imports ``server`` only.
"""
