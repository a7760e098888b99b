"""The per-session state of the main redraw chain: tiny, and never the figures, the text or the config.

``{"drawn": digest of what the attention figures show, "fresh": drawn by the last edit, "ui": a short digest
per control of its look, "sweep": the last sweep's records (for the export)}``. A commit whose digest
equals ``drawn`` redraws nothing; the later events of the chain skip unless ``fresh``; unchanged
controls are not re-sent (each re-send would store a copy in Gradio's session).
"""

from __future__ import annotations

import gradio as gr

from explorer.analysis.common.memo import weights_key
from explorer.analysis.source import WeightsSource
from explorer.app.controls.fields import current_config, ui_digest
from explorer.app.controls.grid_pick import normalise
from explorer.app.server.messages import problem
from explorer.runtime.digest import digest
from explorer.runtime.text import DEFAULT_SEPARATOR, clip_text
from models import ModelConfig


def new_state(cfg: ModelConfig | None = None, text: str | None = None, weights=None) -> dict:
    """A fresh state; ``text`` given: the page was built showing ``cfg``'s figures for it (with ``weights``)."""
    cfg = cfg or ModelConfig()
    drawn = None if text is None else drawn_digest(cfg, text, weights=weights)
    return {"drawn": drawn, "fresh": False, "ui": ui_digest(cfg), "sweep": None, "arch": cfg.architecture}


def read_state(state) -> dict:
    """``state`` completed with the defaults (Gradio may hand over None or a partial dict)."""
    return {**new_state(), **state} if isinstance(state, dict) else new_state()


def drawn_digest(cfg: ModelConfig, text: str, separator=None, picks=(None, None), weights=None) -> str:
    """Digest of what the attention figures show: config, used text, separator, grid picks, weights."""
    return digest(
        [cfg.to_json(), clip_text(text), separator or DEFAULT_SEPARATOR, *map(normalise, picks), weights_key(weights)]
    )


def drawn_config(values: dict, weights=None) -> ModelConfig:
    """The config a handler draws: the one its request's weights source was resolved for
    (``explorer.analysis.source.WeightsSource``, passed down as ``weights``), else the controls' own
    (``current_config``: a bad value raises the error the handler shows)."""
    return weights.config if isinstance(weights, WeightsSource) else current_config(values)


def after_the_grid(state, outputs: tuple, draw) -> dict:
    """A later step of the redraw chain: ``draw()`` when the grid event drew something new (``state["fresh"]``;
    ``state`` None: always, as on the page's load), else a skip for every one of ``outputs``; a failure (a bad
    config: the grid event already warned, naming the field) skips too and keeps the last good figures."""
    if state is not None and not read_state(state)["fresh"]:
        return {k: gr.skip() for k in outputs}
    try:
        return draw()
    except Exception as exc:
        problem(exc)
        return {k: gr.skip() for k in outputs}
