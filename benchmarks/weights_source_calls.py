"""How often one request resolves its weights and looks its checkpoint up, and what a cold checkpoint read costs.

``python -m benchmarks.weights_source_calls`` wraps the functions that do the work and counts their calls
(nothing is timed): for a cold read of the shipped ``byte-llama`` checkpoint, the plans, safetensors header
reads and model builds (``models.hf``); for one ``/analyze`` with ``weights="checkpoint:byte-llama"`` (as
trained, then with a 16-key window: surgery), the checkpoint look-ups by id (``checkpoints.load`` given a
string; a request that holds the loaded record passes it on instead); for one commit of the page (the five
events of the redraw chain, as ``explorer.app.page.wiring`` runs them), the weights resolutions
(``explorer.analysis.source.resolve``) and look-ups, on the bundled model and on the checkpoint.
"""

from __future__ import annotations

import collections
import functools
import importlib

COUNTS = collections.Counter()
TEXT = "def f(x):\n    return x + 1\n"


def count(module: str, attr: str, label: str, when=None) -> None:
    """Wrap ``module.attr`` so that each call (for which ``when(*args)`` holds) adds one to ``label``."""
    mod = importlib.import_module(module)
    fn = getattr(mod, attr)

    @functools.wraps(fn)
    def wrapped(*args, **kw):
        if when is None or when(*args, **kw):
            COUNTS[label] += 1
        return fn(*args, **kw)

    setattr(mod, attr, wrapped)


def main() -> None:
    from explorer.analysis.weights import checkpoints

    count("models.hf.loader", "plan", "plans")  # models.hf.load's own call
    count("models.hf", "plan", "plans")  # the callers' (models.hf re-exports it)
    count("models.hf.files", "read_headers", "header reads")
    count("models.hf.loader", "build_model", "model builds")
    count(
        "explorer.analysis.weights.checkpoints",
        "load",
        "checkpoint look-ups by id",
        when=lambda x, *a, **k: isinstance(x, str),
    )
    count("explorer.analysis.source", "resolve", "weights resolutions")

    checkpoints._LOADED.clear()
    COUNTS.clear()
    checkpoints.load("byte-llama")
    print("cold read of byte-llama:", dict(COUNTS))

    from explorer.app.api import endpoints as api

    for label, cfg in (("as trained", ""), ("window 16", '{"attention": "sliding_window", "window": 16}')):
        COUNTS.clear()
        api.api_analyze(cfg, TEXT, weights="checkpoint:byte-llama")
        print(f"/analyze checkpoint ({label}):", dict(COUNTS))

    from explorer.app.controls import weights as W
    from explorer.app.controls.fields import config_values
    from explorer.app.page.wiring import stage_handler
    from explorer.app.tabs.attention import refresh_attention
    from explorer.app.tabs.contract import STAGES
    from models import ModelConfig

    def attention(values, **kw):
        return refresh_attention(values, keep_status=False, stats=False, **kw)

    for choice, cfg in (("bundled", ModelConfig()), ("checkpoint:byte-llama", checkpoints.load("byte-llama").config)):
        values = config_values(cfg)
        COUNTS.clear()
        kw = dict(trained=None, weights=choice, text=TEXT)
        W.attention_with_weights(attention)(values, state=None, separator=None, **kw)
        for stage in STAGES:  # one request per stage, as the page runs them
            W.with_weights(stage_handler(stage))(
                values, separator=None, zoom_layer=0, zoom_head=0, views_layer=0, views_head=0, **kw
            )
        print(f"one commit, {1 + len(STAGES)} events ({choice}):", dict(COUNTS))


if __name__ == "__main__":
    main()
