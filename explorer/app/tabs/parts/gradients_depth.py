"""The Gradients tab's first panel: Xiong et al. 2020's Theorem 1 above the per-layer profile.

``depth_panel(cfg, weights, per_layer)`` measures the last layer's FFN output gradient against depth
under every norm placement (``explorer.analysis.gradients.depth_scaling``: at initialisation, with a trained
model of the config as a point at its own depth) and draws it above the per-layer profile the tab
already computed (``explorer.figures.depth_scaling``). A pretrained checkpoint is drawn without it
(its gradients are its loss on the visitor's text at its own depth): the caller does not ask.
"""

from __future__ import annotations

from explorer.analysis.gradients.depth_scaling import depth_scaling
from explorer.figures.depth_scaling import depth_figure, depth_reading
from models import ConfigError


def depth_panel(cfg, weights, per_layer: dict) -> tuple | None:
    """``(figure, reading)`` of ``cfg`` (``per_layer``: ``{placement: gradient_norms}``, the second panel),
    or None when no placement could be measured at any depth (the tab then draws the profile alone)."""
    try:
        depth = depth_scaling(cfg, weights)
    except ConfigError:
        return None
    if not depth["placements"]:
        return None
    return depth_figure(depth, cfg.norm_placement, per_layer or None), depth_reading(depth, cfg.norm_placement)
