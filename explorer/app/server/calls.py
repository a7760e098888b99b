"""One API request: counted as running, its failures turned into a message, its config and weights read once.

``call`` and ``heavy_call`` wrap every documented endpoint (``explorer.app.api.endpoints`` and the tabs' own
endpoints): a failure becomes ``gr.Error`` with the message only (naming the field and what it accepts,
truncated), never a traceback. ``request_source`` is the API's door to the weights: the ``weights`` choice
resolved once into an ``explorer.analysis.source.WeightsSource``, a checkpoint loaded once.
"""
from __future__ import annotations

import gradio as gr

from explorer.analysis.weights import checkpoints
from explorer.analysis import source as weights_source
from explorer.analysis.source import WeightsSource
from explorer.app.server.jobs import run_job
from explorer.app.server.messages import refused
from explorer.runtime.configs import app_config
from explorer.runtime.load import LOAD
from explorer.runtime.text import as_text, default_text
from explorer.runtime.untrusted import load_json, truncate
from models import ConfigError

API_WEIGHTS = (weights_source.BUNDLED, weights_source.INITIAL, weights_source.CHECKPOINT_PREFIX + "<id>")


def call(fn):
    """``fn()`` counted as one running request; any failure -> ``gr.Error`` with the message only."""
    try:
        with LOAD.busy():
            return fn()
    except gr.Error:
        raise
    except Exception as exc:
        raise refused(exc) from None


async def heavy_call(family: str, request, fn):
    """``fn(should_stop)`` as a heavy job of ``family`` (``explorer.app.server.jobs.run_job``); failures, "busy"
    included, -> ``gr.Error`` with the message only."""
    try:
        return await run_job(family, request, lambda should_stop: call(lambda: fn(should_stop)))
    except gr.Error:
        raise
    except Exception as exc:
        raise refused(exc) from None


def request_text(cfg, text) -> str:
    """An API call's text: None or "" -> the config's example text; anything but a string is refused."""
    return as_text(text, default=default_text(cfg))


def request_source(config_json, weights) -> WeightsSource:
    """An API call's config and weights, resolved once: ``bundled`` (None or "", the default) draws the
    bundled model that serves the config (trained with it, or moved to it by surgery) and falls back to the
    initial weights with the reason; ``initial`` never loads one; ``checkpoint:<id>`` draws a pretrained
    checkpoint the host offers, loaded once, with ``config_json``'s fields as its surgery (empty: the
    checkpoint as trained; a field that needs other weights is refused naming it)."""
    choice = weights_source.BUNDLED if weights in (None, "") else weights
    ckpt = weights_source.checkpoint_id(choice)
    if ckpt is None:
        if choice not in (weights_source.BUNDLED, weights_source.INITIAL):
            raise ConfigError("weights", truncate(str(choice), 40), f"one of {list(API_WEIGHTS)}")
        return weights_source.resolve(choice, app_config(config_json))
    changes = {} if config_json in (None, "") else load_json(config_json)
    if not isinstance(changes, dict):
        raise ConfigError("config", type(changes).__name__, "a JSON object of the fields to change on the checkpoint")
    loaded = checkpoints.load(ckpt)
    return weights_source.resolve(choice, weights_source.checkpoint_config(loaded, changes), loaded=loaded)
