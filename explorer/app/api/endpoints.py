"""The app's documented API, every endpoint in one place: JSON in, plain data out.

``/analyze``, ``/gradients``, ``/benchmark``, ``/export``, ``/compare_ab`` (``gradio_client`` calls
them by name). Each reads its config through the one door (``explorer.runtime.configs.app_config``:
the explorer's caps, validation, the memory budget; JSON parsed with bounded size, nesting and number
length) and its text through the one text path (``explorer.runtime.text``: an empty text is the
config's example text; a source / target model splits it at ``separator``) and its weights through
the one weights source (``request_source``: the ``weights`` choice resolved once into an
``explorer.analysis.source.WeightsSource``, the checkpoint loaded once), then calls the analyses' use
cases with that record, never a UI handler: the page, the API and the export draw the same weights. Errors come back as
``gr.Error(message)``: the ``ConfigError`` text (naming the field and what it accepts), truncated; never a traceback.
``/benchmark`` and ``/export`` are heavy jobs (``explorer.app.server.jobs``): admitted in their own family, one per
visitor, run at low priority; a full family answers "busy" at once instead of waiting in the queue. Every endpoint's
predicted compute is checked before it runs (``explorer.runtime.cost.charge``: refused by name past the per-request
budget or the visitor's share).

The return annotations are the ``TypedDict``s of ``explorer.app.server.api_types``: ``gr.api`` reads them (objects, not
strings: no ``from __future__ import annotations`` here) into the schema ``gradio_client``'s ``view_api()`` shows.
"""

import os

import gradio as gr

from explorer.analysis import attention_maps, config_diff, latency_memory_sweep, surgery
from explorer.analysis import source as weights_source
from explorer.analysis.compare import compare_pair
from explorer.analysis.cost.sweep import sweep_axes
from explorer.analysis.gradients.norms import drawn_gradients
from explorer.app.api.export import cleanup_export, write_export
from explorer.app.controls.share import compare_query
from explorer.app.server.api_types import AnalyzeResult, CompareResult, ExportFile, GradientsResult, SweepRecord
from explorer.app.server.calls import call, heavy_call, request_source, request_text
from explorer.app.server.gradio_compat import cache_file
from explorer.runtime import cost
from explorer.runtime.configs import app_config
from explorer.runtime.limits import GRADIENT_REQUEST, MAX_TEXT_BYTES, SWEEP_BUDGET_S, parse_lengths
from explorer.runtime.text import DEFAULT_SEPARATOR, as_text
from explorer.runtime.untrusted import truncate
from models import ConfigError

SWEEP_PASSES = 6  # forward passes a sweep runs per length (its untimed first runs and its timed repeats), about
SWEEP_RUNS = 4  # runs of a length, each abandoned past SWEEP_BUDGET_S: what a sweep of a large model costs at most
# the figures of an export: the maps, the gradients of every norm placement (4) and the page's other views
EXPORT_PARTS = [(4, MAX_TEXT_BYTES, 1), (3 * 4, *GRADIENT_REQUEST)]


def _tokens(text: str) -> int:
    """The tokens the maps read of ``text`` (bytes, at most ``MAX_TEXT_BYTES``)."""
    return max(1, min(MAX_TEXT_BYTES, len(text.encode("utf-8", "replace"))))


def api_analyze(
    config_json: str, text: str, separator: str = DEFAULT_SEPARATOR, weights: str = "bundled"
) -> AnalyzeResult:
    """Attention maps summary: per (layer, head) entropy and mean distance, head labels, the allowed fraction.

    ``weights``: ``bundled`` (default: the trained model shipped for this config, or moved to it by
    surgery; the initial weights when none serves it), ``initial``, or ``checkpoint:<id>`` (a pretrained
    checkpoint this host offers: ``config_json`` then lists the fields to change on its config, ``""`` for
    none; its tokenizer reads the text, and a change adds ``perplexity``: the checkpoint as trained and
    after it, on the text and on a fixed held-out passage); the result's ``weights`` says which were used
    and where they came from. An encoder-decoder reads ``text`` as ``source <separator> target``; its
    summary is the decoder's self-attention with ``encoder_maps`` and ``cross_maps`` (query = target,
    key = source) added."""

    def run():
        src = request_source(config_json, weights)
        used = src.used()
        text_in = request_text(src.config, text)
        cost.charge(
            src.config, [(1 + 4 * bool(src.loaded is not None and src.surgery), _tokens(text_in), 1)], "/analyze"
        )
        summary = attention_maps(src.config, text_in, separator=separator, weights=src.weights).summary()
        if src.loaded is not None and src.surgery:
            change = surgery.loss_change(src.config, text_in, checkpoint=src.loaded)
            if change:
                used["perplexity"], used["loss"] = change.perplexity(), change.summary()
        return {**summary, "weights": used}

    return call(run)


def api_gradients(config_json: str, weights: str = "bundled", text: str = "") -> GradientsResult:
    """Per-layer attn_out, ffn_out and residual gradient norms of the config, as the Gradients tab draws
    them for its norm placement (``explorer.analysis.gradients.norms.drawn_gradients``, the one path of the page,
    the API and the export).

    ``weights``: ``bundled`` (default, where a bundle serves the config), ``initial`` (both: the seeded
    random batch), or ``checkpoint:<id>`` (``config_json``: the fields to change on its config; the loss
    is its next-token loss on ``text``, "" for the example text, through its tokenizer: the first 128
    tokens; an encoder-decoder's is refused with the reason); the result's ``weights`` says which were
    used."""

    def run():
        src = request_source(config_json, weights)
        cost.charge(src.config, [(3, *GRADIENT_REQUEST)], "/gradients")
        drawn = drawn_gradients(src.config, as_text(text, default=""), src.weights, every_placement=False)
        placement = src.config.norm_placement
        if placement not in drawn.results:
            why = drawn.skipped.get(placement, "not measured")
            raise ConfigError("weights", truncate(src.choice, 60), f"weights whose gradients can be measured ({why})")
        return {**drawn.results[placement], "weights": src.used()}

    return call(run)


async def api_benchmark(
    config_json: str, lengths: str, mode: str, seq2seq_axis: str = "both", request: gr.Request = None
) -> list[SweepRecord]:
    """Latency / memory sweep records of the config's attention at the given lengths (stops between
    two modules when the job is cancelled or the client disconnects). A model of several inputs (an
    encoder-decoder) varies ``seq2seq_axis`` ("both", "source" or "target"; records carry
    ``src_len`` and ``tgt_len``)."""

    def run(should_stop):
        cfg = app_config(config_json)
        if mode not in (None, "", "forward", "forward_backward"):
            raise ConfigError("mode", truncate(mode, 40), "'forward' or 'forward_backward'")
        axis = {"seq2seq_axis": seq2seq_axis or "both"} if sweep_axes(cfg) else {}
        lens = parse_lengths(lengths or "128,256,512")
        passes = SWEEP_PASSES * (3 if mode == "forward_backward" else 1)
        # each length's runs stop at the time budget: its untimed and timed runs take at most a few budgets
        cost.charge(
            cfg,
            [(passes, n, 1) for n in lens],
            "/benchmark",
            heavy=True,
            ceiling=len(lens) * SWEEP_RUNS * SWEEP_BUDGET_S,
        )
        return latency_memory_sweep(
            cfg, lens, mode or "forward", time_budget_s=SWEEP_BUDGET_S, should_stop=should_stop, **axis
        )

    return await heavy_call("sweep", request, run)


async def api_export(
    config_json: str,
    text: str,
    separator: str = DEFAULT_SEPARATOR,
    weights: str = "bundled",
    request: gr.Request = None,
) -> ExportFile:
    """The export zip (config.json, README.txt, figures.html, a PNG per figure when the server has
    kaleido and a Chrome) of the config on the text -> the file (``gradio_client`` downloads it).
    ``weights``: as ``/analyze`` takes it (default bundled): the zip holds the figures the page draws
    for that choice. The zip goes into Gradio's file cache (aged out like the button's downloads) and the
    temporary folder is deleted before the call returns: an API client has no page to run a clean-up step."""

    def run(_should_stop):
        src = request_source(config_json, weights)
        cost.charge(src.config, EXPORT_PARTS, "/export", heavy=True)
        folder, path, _ = write_export(src.config, request_text(src.config, text), None, separator, src)
        try:
            with open(path, "rb") as f:
                return cache_file(f.read(), os.path.basename(path))
        finally:
            cleanup_export(folder)

    return await heavy_call("export", request, run)


def api_compare(
    config_a_json: str, config_b_json: str, text: str, separator: str = DEFAULT_SEPARATOR, weights: str = "bundled"
) -> CompareResult:
    """``/compare_ab``: ``{"diff": [[field, A, B], ...], "a": {...}, "b": {...}, "link": query}``, where
    ``a`` / ``b`` hold each config's attention summary and gradient norms on the same text, each as
    ``/analyze`` and ``/gradients`` give them for the same ``weights`` choice."""

    def run():
        if weights_source.checkpoint_id(weights) is not None:
            raise ConfigError(
                "weights",
                truncate(str(weights), 40),
                "bundled or initial: Compare draws the catalogue's "
                "models (a checkpoint's surgery is /analyze's perplexity)",
            )
        side_a, side_b = request_source(config_a_json, weights), request_source(config_b_json, weights)
        a, b = side_a.config, side_b.config
        t = request_text(b, text)
        for side in (a, b):
            cost.charge(side, [(1, _tokens(t), 1), (3, *GRADIENT_REQUEST)], "/compare_ab")
        used_a, used_b = side_a.used(), side_b.used()
        pair = compare_pair(a, b, t, separator, side_a.weights, side_b.weights)  # one GPU call for both sides
        side = {
            k: {"attention": {**maps.summary(), "weights": used}, "gradients": {**grads, "weights": used}}
            for k, maps, grads, used in zip("ab", pair["maps"], pair["gradients"], (used_a, used_b))
        }
        return {"diff": [list(r) for r in config_diff(a, b)], **side, "link": compare_query(a, b, t, separator)}

    return call(run)
