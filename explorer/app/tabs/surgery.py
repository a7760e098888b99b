"""The Surgery tab: what a change of architecture does to a *trained* model.

When the weights drawn are a bundle's or a checkpoint's moved to the controls' config
(``explorer.analysis.surgery``), the tab shows the change in loss (held out and on the visitor's text,
each with its length against the trained length), the difference view (the new maps minus the model's
own, on the same text), its Surgery table (every change that keeps its weights, at the trained length
and at 4x it: stored beside the model, so it costs nothing to show) and the KV-cache frontier drawn from it
(every way to shrink the decoder's cache, its bytes per token against the loss it costs). For a model as
trained it says which changes keep the weights; for a config no bundle serves, why, and what to train.

Filled after the other tabs by one event of the redraw chain (skipped when the grid drew nothing new).
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import gradio as gr

from explorer.analysis import surgery
from explorer.analysis.source import drawn_for
from explorer.analysis.surgery.frontier import points as frontier_points
from explorer.analysis.weights import bundled
from explorer.app.controls.events import QUIET
from explorer.app.controls.fields import CONTROL_FIELDS, current_config
from explorer.app.controls.state import drawn_config, read_state
from explorer.app.server.messages import problem, shown_problem
from explorer.app.tabs.contract import Landing, Page, Step, Tab
from explorer.figures.base import message_figure
from explorer.figures.kv_frontier import TITLE as FRONTIER_TITLE
from explorer.figures.kv_frontier import frontier_figure, frontier_reading
from explorer.figures.readings import loss_line
from explorer.figures.surgery import (
    difference_grid,
    moved_fraction,
    moved_sentence,
    table_figure,
    table_markdown,
    unmoved,
)
from explorer.runtime.untrusted import shown
from models import ModelConfig

OUTPUTS = ("surgery_md", "surgery_diff", "surgery_table", "surgery_table_md", "surgery_frontier")
SAFE_HINT = (
    "Changes that keep the trained weights: any structured pattern and its sizes, attention sinks, "
    "linear / Performer / routing / axial / ProbSparse / RealFormer attention, the softcap, RoPE's base "
    "and position scale, fewer or more K/V heads."
)


def why_unmoved(before: ModelConfig, after: ModelConfig, length: int) -> str:
    """Why every head of the difference view reads 0%: ``before`` and ``after`` allow exactly the same pairs
    at this text's ``length`` tokens (``surgery.same_pairs``: the pattern differs only past it), or the change
    moves less than half a percent of any head's attention here. Both point at the Long context tab."""
    go_long = "the Long context tab draws both at 1024 to 16384 tokens, where patterns part"
    share = surgery.same_pairs(before, after, length)
    if share is not None:
        return (
            f"Every head reads 0%: at this text's {length} tokens, attention={after.attention!r} allows exactly "
            f"the pairs attention={before.attention!r} allows ({share:.1%} of all pairs), so "
            f"the same weights give the same maps; {go_long}."
        )
    return (
        f"Every head reads 0%: on this text's {length} tokens the change moves less than 0.5% of any head's "
        f"attention (the pairs it removes carry almost none); {go_long}."
    )


def _changes(cfg: ModelConfig, changed) -> str:
    return ", ".join(f"{k}={getattr(cfg, k)!r}" for k in changed)


def _table(origin) -> tuple:
    """``(table figure, table markdown, KV-cache frontier figure)`` of ``origin``'s stored Surgery table."""
    table = surgery.stored_table(origin) if origin is not None else None
    if table is None:
        hint = (
            ""
            if origin is None
            else (
                " (python -m explorer.analysis.surgery "
                + (f"--checkpoint {origin.name}" if origin.kind == "checkpoint" else origin.name)
                + " --write makes it)"
            )
        )
        none = f"No Surgery table stored for this model{hint}."
        return message_figure(none, "Surgery table"), "", message_figure(none, FRONTIER_TITLE)
    pts = frontier_points(table)
    reading = frontier_reading(table, pts)
    md = table_markdown(table) + (f"\n\n**KV-cache frontier.** {reading}" if reading else "")
    return table_figure(table), md, frontier_figure(table, pts)


def surgery_outputs(cfg: ModelConfig, text: str, separator=None, weights=None) -> dict:
    """``{surgery_md, surgery_diff, surgery_table, surgery_table_md}`` for ``cfg`` drawn with ``weights``
    (a bundle's, moved or not, or a checkpoint's: the same verbs, ``explorer.analysis.surgery``)."""
    ckpt = weights.checkpoint if weights is not None and weights.checkpoint else None
    base = weights.bundle if weights is not None and weights.bundle else None  # the bundle on screen
    empty = message_figure(
        "No surgery: the controls show the trained model as trained, or a model no bundle serves.", "Difference view"
    )
    if weights is not None and weights.surgery:
        change = surgery.loss_change(cfg, text, checkpoint=ckpt, bundle=base)
        diff = surgery.difference(cfg, text, separator, checkpoint=ckpt, weights=weights)
        origin = diff[2] if diff else surgery.origin_of(cfg, ckpt, base)
        loss = loss_line(change) or ("no next-token loss (this model is no causal language model)")
        md = (
            f"**Surgery on {shown(origin.label)}**: {shown(_changes(cfg, weights.surgery))}, the trained weights "
            f"unchanged. {loss}."
        )
        why = (
            why_unmoved(origin.config, cfg, len(diff[0].tokens))
            if diff and unmoved(diff[0].attention, diff[1].attention)
            else ""
        )
        md += f" {why}" if why else ""
        if diff and not why and diff[0].attention.shape == diff[1].attention.shape:
            md += " " + moved_sentence(moved_fraction(diff[0].attention, diff[1].attention))
        fig = (
            difference_grid(
                diff[0].attention,
                diff[1].attention,
                diff[0].tokens,
                _changes(cfg, diff[3]),
                origin.name,
                what=origin.kind,
                why_unmoved=why,
            )
            if diff
            else empty
        )
    elif ckpt or (weights is not None and bundled.bundle_for(cfg) is not None):
        origin = surgery.origin_of(cfg, ckpt, base)
        md = (
            f"The controls show **{shown(origin.label)}** as trained. Change the architecture to see what the "
            f"change does to its trained weights. {SAFE_HINT}"
        )
        fig = empty
    else:
        origin = surgery.bundle_origin("default") if "default" in bundled.names() else None
        why = surgery.why_not(cfg) if weights is None else "the weights drawn are your run's"
        md = f"No surgery here: {shown(why)}. {SAFE_HINT}"
        fig = empty
    table_fig, table_md, frontier = _table(origin)
    return {
        "surgery_md": md,
        "surgery_diff": fig,
        "surgery_table": table_fig,
        "surgery_table_md": table_md,
        "surgery_frontier": frontier,
    }


def refresh_surgery(values: dict, text, separator=None, state=None, weights=None) -> dict:
    """The tab for the controls' config; skipped like the other tabs when the grid drew nothing new."""
    if state is not None and not read_state(state)["fresh"]:
        return {k: gr.skip() for k in OUTPUTS}
    try:
        cfg = drawn_config(values, weights)  # the request's weights source (explorer.app.controls.weights.with_weights)
        return surgery_outputs(cfg, text, separator, drawn_for(weights, cfg))
    except Exception as exc:  # the attention event already warned about a bad value
        msg = problem(exc)
        return {"surgery_md": f"⚠️ {shown(msg)}", **{k: gr.skip() for k in OUTPUTS[1:]}}


def build_surgery_tab(first: dict) -> SimpleNamespace:
    """The tab's components (inside the caller's ``gr.Tabs``), filled with ``first`` (the first paint)."""
    with gr.Tab("Surgery", id="surgery", elem_id="surgery-tab") as tab:
        md = gr.Markdown(first["surgery_md"], elem_id="surgery-reading")
        train = gr.Button(
            "Train this config in the Train tab", size="sm", elem_id="surgery-train", scale=0, min_width=280
        )
        diff = gr.Plot(first["surgery_diff"], label="Difference view", elem_id="surgery-diff")
        table = gr.Plot(first["surgery_table"], label="Surgery table", elem_id="surgery-table")
        table_md = gr.Markdown(first["surgery_table_md"], elem_id="surgery-table-md")
        frontier = gr.Plot(first["surgery_frontier"], label="KV-cache frontier", elem_id="surgery-frontier")
    return SimpleNamespace(tab=tab, md=md, diff=diff, table=table, table_md=table_md, frontier=frontier, train=train)


TRAIN_OUT = ("train_config", "train_task", "tabs", "status")


def to_train_tab(values: dict) -> dict:
    """The controls' config into the Train tab's config box (task: byte LM when it is causal), and that tab
    opened: what a config that needs other weights is offered."""
    try:
        cfg = current_config(values)
    except Exception as exc:
        return {
            "train_config": gr.skip(),
            "train_task": gr.skip(),
            "tabs": gr.skip(),
            "status": f"⚠️ {shown_problem(exc)}",
        }
    task = "lm" if cfg.causal and cfg.architecture == "decoder_only" else "copy"
    return {
        "train_config": json.dumps(cfg.to_dict(), indent=1),
        "train_task": task,
        "tabs": gr.Tabs(selected="train"),
        "status": f"The Train tab holds this config (task {task}): press ▶ Play there. {shown(surgery.why_not(cfg))}.",
    }


# ---------------------------------------------------------------------------- the tab (explorer.app.tabs.contract)
def build(landing: Landing) -> dict:
    cut = build_surgery_tab(surgery_outputs(landing.cfg, landing.text, None, landing.weights))
    return {
        "surgery_tab": cut.tab,
        "surgery_md": cut.md,
        "surgery_diff": cut.diff,
        "surgery_table": cut.table,
        "surgery_table_md": cut.table_md,
        "surgery_frontier": cut.frontier,
        "surgery_train": cut.train,
    }


def wire(page: Page) -> None:
    """ "Train this config in the Train tab": the controls' config into its box, that tab opened."""
    ui = page.ui
    ui["surgery_train"].click(
        ui.handler(to_train_tab),
        ui.inputs(*CONTROL_FIELDS),
        ui.outputs(*TRAIN_OUT),
        api_name="surgery_train",
        queue=False,
        **QUIET,
    )


def export(scene) -> list:
    """The difference view (when the trained weights are operated on) and the surgery table, drawn with
    trained weights only (the tab has nothing to say about initial weights)."""
    w = scene.w
    if w is None:
        return []
    out = surgery_outputs(scene.cfg, scene.text, scene.separator, w)
    figs = [("surgery-difference", out["surgery_diff"])] if w.surgery else []
    if out["surgery_table_md"]:
        figs.append(("surgery-table", out["surgery_table"]))
        figs.append(("surgery-kv-frontier", out["surgery_frontier"]))
    what = "the checkpoint's pretrained weights" if w.checkpoint else "the trained weights"
    return [(f"Surgery on {what}", figs)] if figs else []


TAB = Tab(
    "surgery",
    build,
    steps=(Step("surgery", refresh_surgery, ("text", "separator", "state"), OUTPUTS),),
    wire=wire,
    export=export,
)
