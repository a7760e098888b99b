"""The Surgery tab: what a change of architecture does to a *trained* model.

When the weights drawn are a bundle's moved to the controls' config (``explorer.analysis.surgery``),
the tab shows the change in held-out loss (nats per byte, on the visitor's text and on a fixed held-out
passage), the difference view (the new maps minus the bundle's own, on the same text) and the bundle's
Surgery table (every attention that reads its weights, at the trained length and at 4x it: stored
beside the bundle, so it costs nothing to show). For a bundle's own config it says which changes keep
the weights; for a config no bundle serves, why, and what to train.

Filled after the other tabs by one event of the redraw chain (skipped when the grid drew nothing new).
"""
from __future__ import annotations

import json
from types import SimpleNamespace

import gradio as gr

from explorer.analysis import attention_maps, bundled, checkpoint_surgery, checkpoints
from explorer.analysis import surgery as surgery_analysis
from explorer.app.controls import current_config
from explorer.app.messages import problem
from explorer.app.state import read_state
from explorer.figures.base import message_figure
from explorer.figures.surgery import difference_grid, table_figure, table_markdown
from explorer.runtime.untrusted import shown
from models import ModelConfig

OUTPUTS = ("surgery_md", "surgery_diff", "surgery_table", "surgery_table_md")
SAFE_HINT = ("Changes that keep the trained weights: any structured pattern and its sizes, attention sinks, "
             "linear / Performer / routing / axial / ProbSparse / RealFormer attention, the softcap, RoPE's base "
             "and position scale, fewer or more K/V heads.")


def loss_line(change: dict | None) -> str:
    """"held-out loss 1.42 → 1.47 nats/byte (+0.05) on the fixed passage; 1.30 → 1.38 on your text"."""
    if not change:
        return ""
    b, a, d = change["before"], change["after"], change["delta"]
    return (f"held-out loss **{b['heldout']:.3f} → {a['heldout']:.3f}** nats/byte ({d['heldout']:+.3f}) on a fixed "
            f"held-out passage; {b['text']:.3f} → {a['text']:.3f} ({d['text']:+.3f}) on your text")


def _changes(cfg: ModelConfig, changed) -> str:
    return ", ".join(f"{k}={getattr(cfg, k)!r}" for k in changed)


def surgery_outputs(cfg: ModelConfig, text: str, separator=None, weights=None) -> dict:
    """``{surgery_md, surgery_diff, surgery_table, surgery_table_md}`` for ``cfg`` drawn with ``weights``."""
    if weights is not None and weights.checkpoint:
        return checkpoint_outputs(cfg, text, separator, weights)
    empty = message_figure("No surgery: the controls show a bundled model as trained, or a model no bundle serves.",
                           "Difference view")
    exact = bundled.bundle_for(cfg)
    if weights is not None and weights.surgery:
        change = surgery_analysis.loss_change(cfg, text)
        diff = surgery_analysis.difference(cfg, text, separator)
        name = diff[2] if diff else (change or {}).get("bundle", "default")
        loss = loss_line(change)
        md = (f"**Surgery on bundle '{shown(name)}'**: {shown(_changes(cfg, weights.surgery))}, the trained weights "
              f"unchanged." + (f" Surgery: {loss}." if loss else " (No byte-level loss: this bundle is no language "
                               "model.)"))
        fig = difference_grid(diff[0].attention, diff[1].attention, diff[0].tokens, _changes(cfg, diff[3]), name) \
            if diff else empty
    elif exact is not None and weights is not None:
        name = exact.name
        md = (f"The controls show bundle **'{shown(name)}'** as trained. Change the architecture to see what the change "
              f"does to its trained weights. {SAFE_HINT}")
        fig = empty
    else:
        name = "default" if "default" in bundled.names() else None
        why = surgery_analysis.why_not(cfg) if weights is None else "the weights drawn are your run's"
        md = f"No surgery here: {shown(why)}. {SAFE_HINT}"
        fig = empty
    table = surgery_analysis.stored_table(name) if name else None
    return {"surgery_md": md, "surgery_diff": fig, "surgery_table": table_figure(table),
            "surgery_table_md": table_markdown(table)}


def checkpoint_outputs(cfg: ModelConfig, text: str, separator, weights) -> dict:
    """The tab for a pretrained checkpoint: the perplexity change of the controls' surgery on the text and
    on a fixed passage, the difference view against the checkpoint as trained, its stored table."""
    ckpt = weights.checkpoint
    loaded = checkpoints.load(ckpt)
    table = checkpoint_surgery.stored_table(ckpt)
    out = {"surgery_table": table_figure(table) if table else message_figure(
               f"No Surgery table stored for this checkpoint (python -m explorer.analysis.checkpoint_surgery {ckpt} "
               "--write makes it).", "Surgery table"),
           "surgery_table_md": table_markdown(table)}
    if not weights.surgery:
        return {**out, "surgery_md": f"The controls show **{shown(loaded.describe())}** as trained. Change the "
                                     f"architecture to see what the change does to its weights. {SAFE_HINT}",
                "surgery_diff": message_figure("No surgery: the controls show the checkpoint as trained.",
                                               "Difference view")}
    change = checkpoint_surgery.loss_change(ckpt, cfg, text)
    after = attention_maps(cfg, text, separator=separator, weights=weights)
    before = attention_maps(loaded.config, text, separator=separator, weights=loaded.weights)
    changes = _changes(cfg, weights.surgery)
    loss = perplexity_line(change) if change else "no next-token perplexity (the checkpoint is no causal LM)"
    md = f"**Surgery on {shown(loaded.describe())}**: {shown(changes)}, the pretrained weights unchanged. {loss}."
    fig = difference_grid(after.attention, before.attention, after.tokens, changes, loaded.name, what="checkpoint")
    return {**out, "surgery_md": md, "surgery_diff": fig}


def perplexity_line(change: dict) -> str:
    """"perplexity 12.31 → 15.08 (+0.204 nats/token) on a fixed held-out passage; 8.40 → 9.02 on your text"."""
    p, d = change["perplexity"], change["delta"]
    return (f"Perplexity **{p['heldout'][0]:.2f} → {p['heldout'][1]:.2f}** ({d['heldout']:+.3f} nats/token) on a "
            f"fixed held-out passage; {p['text'][0]:.2f} → {p['text'][1]:.2f} ({d['text']:+.3f}) on your text")


def refresh_surgery(values: dict, text, separator=None, state=None, weights=None) -> dict:
    """The tab for the controls' config; skipped like the other tabs when the grid drew nothing new."""
    if state is not None and not read_state(state)["fresh"]:
        return {k: gr.skip() for k in OUTPUTS}
    try:
        return surgery_outputs(current_config(values), text, separator, weights)
    except Exception as exc:  # the attention event already warned about a bad value
        msg = problem(exc)
        return {"surgery_md": f"⚠️ {shown(msg)}", **{k: gr.skip() for k in OUTPUTS[1:]}}


def build_surgery_tab(first: dict) -> SimpleNamespace:
    """The tab's components (inside the caller's ``gr.Tabs``), filled with ``first`` (the first paint)."""
    with gr.Tab("Surgery", id="surgery", elem_id="surgery-tab") as tab:
        md = gr.Markdown(first["surgery_md"], elem_id="surgery-reading")
        train = gr.Button("Train this config in the Train tab", size="sm", elem_id="surgery-train", scale=0,
                          min_width=280)
        diff = gr.Plot(first["surgery_diff"], label="Difference view", elem_id="surgery-diff")
        table = gr.Plot(first["surgery_table"], label="Surgery table", elem_id="surgery-table")
        table_md = gr.Markdown(first["surgery_table_md"], elem_id="surgery-table-md")
    return SimpleNamespace(tab=tab, md=md, diff=diff, table=table, table_md=table_md, train=train)


TRAIN_OUT = ("train_config", "train_task", "tabs", "status")


def to_train_tab(values: dict) -> dict:
    """The controls' config into the Train tab's config box (task: byte LM when it is causal), and that tab
    opened: what a config that needs other weights is offered."""
    try:
        cfg = current_config(values)
    except Exception as exc:
        return {"train_config": gr.skip(), "train_task": gr.skip(), "tabs": gr.skip(),
                "status": f"⚠️ {shown(problem(exc))}"}
    task = "lm" if cfg.causal and cfg.architecture == "decoder_only" else "copy"
    return {"train_config": json.dumps(cfg.to_dict(), indent=1), "train_task": task, "tabs": gr.Tabs(selected="train"),
            "status": f"The Train tab holds this config (task {task}): press ▶ Play there. "
                      f"{shown(surgery_analysis.why_not(cfg))}."}
