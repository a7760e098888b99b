"""The export: every figure the session shows for a config, in one zip that leaves nothing behind.

``export_sections`` asks every registered tab (``explorer.app.tabs.TABS``) for its part (``Tab.export``:
the attention grid, its statistics and the zoomed head, the other stacks' maps, the variant views,
gradient norms per placement and per stack, the KV cache and the sweep, the Surgery tab, the Compare
tab when A is pinned and its A/B sweep, the long-context view the visitor drew, the Train tab's run),
all drawn from one ``ExportScene``, so the Export button and ``/export`` share one path and neither
goes through a UI handler. Both hand it the request's weights source
(``explorer.analysis.source.WeightsSource``): the zip draws the weights the page draws, its gradient
figure is the Gradients tab's (``gradients.gradient_panel``), its text is read with the checkpoint's
tokenizer when one is drawn, and Compare's pinned A is drawn with the same choice.

``export_files`` writes ``transformer-explorer-<hash>.zip`` (``explorer.export.archive``) into a fresh
temporary folder the app owns (``_OWNED``: only folders it made are ever deleted); ``cleanup_export``
deletes that folder once Gradio has copied the file into its cache (which ``delete_cache`` bounds). A
session's next export deletes its previous folder first, and at most ``MAX_EXPORT_DIRS`` folders live
at once (the oldest deleted), so exports whose clean-up event never ran do not pile up.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
from collections import OrderedDict

import gradio as gr

from explorer.analysis.source import drawn_for
from explorer.app import tabs as registry
from explorer.app.controls.state import drawn_config, read_state
from explorer.app.server.messages import problem, warn
from explorer.app.tabs.contract import ExportScene
from explorer.export import archive
from explorer.runtime.limits import MAX_TEXT_BYTES
from explorer.runtime.text import as_text, model_input
from explorer.runtime.untrusted import shown
from models import ModelConfig

TEMP_PREFIX = "explorer-export-"
# what the Export button hands ``export_files`` besides the controls, the weights and the tabs' ``export_inputs``
EXPORT_IN = ("text", "separator", "state", "zoom_layer", "zoom_head", "pinned", "train_state", "export_dir")


def export_inputs() -> tuple:
    """The Export button's inputs besides the controls and the weights: ``EXPORT_IN`` and the tabs' own."""
    return (*EXPORT_IN, *dict.fromkeys(n for tab in registry.TABS for n in tab.export_inputs))


MAX_EXPORT_DIRS = 8  # export folders alive at once (1.6 MB each with PNGs): the oldest is deleted past it
_OWNED: OrderedDict = OrderedDict()  # folder -> None: the export folders this process made and has not deleted
_OWNED_LOCK = threading.Lock()


def export_sections(
    cfg: ModelConfig,
    text: str,
    state=None,
    separator=None,
    weights=None,
    zoom=None,
    pinned=None,
    train_state=None,
    extra=None,
) -> tuple:
    """Every figure the session shows for ``cfg`` -> ``(sections, sweeps)``: ``[(title, [(stem,
    figure), ...]), ...]`` from every registered tab's ``export`` in the page's order, and the sweep
    records ``[(series, attention, records), ...]`` from the tabs' ``export_sweeps`` (the Latency tab's
    sweep and the Compare tab's A/B sweep, when the session ran them).

    ``zoom``: the zoomed head ``(layer, head)``; ``pinned``: the Compare tab's A (a config dict), drawn
    against ``cfg`` as B; ``train_state``: the Train tab's state, whose run's figures are added when
    it holds one; ``extra``: the values of the tabs' ``export_inputs`` by name (none for an API export).
    ``weights``: the request's ``WeightsSource`` (or a record, or None: the initial weights)."""
    session = read_state(state)
    scene = ExportScene(
        cfg, text, separator, weights, drawn_for(weights, cfg), session, zoom, pinned, train_state, dict(extra or {})
    )
    sections, sweeps = [], []
    for tab in registry.TABS:
        if tab.export is not None:
            sections += tab.export(scene)
        if tab.export_sweeps is not None:
            sweeps += tab.export_sweeps(session)
    return sections, sweeps


def write_export(cfg: ModelConfig, text: str, state=None, separator=None, weights=None, **extra) -> tuple:
    """The zip in a fresh temporary folder -> ``(folder, path, summary)``; the folder is deleted on failure.
    ``extra``: ``export_sections``' zoom, pinned and train_state."""
    folder = None
    try:
        sections, sweeps = export_sections(cfg, text, state, separator, weights, **extra)
        folder = _new_folder()
        tokenizer = getattr(drawn_for(weights, cfg), "tokenizer", None)
        used = model_input(cfg, text, separator, tokenizer=tokenizer)  # the text as the maps read it
        label = (
            f"Input text (the first {MAX_TEXT_BYTES} tokens of the checkpoint's tokenizer)"
            if tokenizer is not None
            else f"Input text (first {MAX_TEXT_BYTES} bytes, one token per byte)"
        )
        path, summary = archive.write_zip(
            folder, cfg, used.text, sections, sweeps, separator=used.separator, text_label=label
        )
    except BaseException:
        cleanup_export(folder)
        raise
    return folder, path, summary


def export_files(
    values: dict,
    text,
    state,
    separator=None,
    weights=None,
    zoom_layer=None,
    zoom_head=None,
    pinned=None,
    train_state=None,
    export_dir=None,
    **extra,
) -> dict:
    """The Export button -> files (the zip's path), export_dir (its folder, deleted by
    ``cleanup_export`` once served, or by this session's next export: ``export_dir`` is the previous
    one), status (what the zip holds, and why PNGs are missing when they are). The zoomed head, the
    Compare tab (when A is pinned), the Train tab's run and the tabs' ``export_inputs`` (``extra``) come along."""
    cleanup_export(export_dir)  # this session's previous zip: already served
    try:
        folder, path, summary = write_export(
            drawn_config(values, weights),
            as_text(text),
            state,
            separator,
            weights,
            zoom=(zoom_layer, zoom_head),
            pinned=pinned,
            train_state=train_state,
            extra=extra,
        )
    except Exception as exc:
        return {"files": gr.skip(), "export_dir": None, "status": warn(problem(exc))}
    return {"files": gr.update(value=path, visible=True), "export_dir": folder, "status": f"📦 {shown(summary, 600)}"}


def _new_folder() -> str:
    """A fresh export folder, owned; past ``MAX_EXPORT_DIRS`` live ones, the oldest is deleted."""
    folder = tempfile.mkdtemp(prefix=TEMP_PREFIX)
    with _OWNED_LOCK:
        _OWNED[folder] = None
        stale = [_OWNED.popitem(last=False)[0] for _ in range(max(0, len(_OWNED) - MAX_EXPORT_DIRS))]
    for old in stale:
        shutil.rmtree(old, ignore_errors=True)
    return folder


def cleanup_export(export_dir) -> None:
    """Delete an export's temporary folder: only one ``write_export`` made in this process and has not
    deleted yet (any other path, a client's included, is left alone)."""
    if not isinstance(export_dir, str):
        return
    with _OWNED_LOCK:
        owned = _OWNED.pop(export_dir, False) is None
    if owned:
        shutil.rmtree(export_dir, ignore_errors=True)
