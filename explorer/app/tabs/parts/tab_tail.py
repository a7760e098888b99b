"""The foot of a tab that draws on demand (Long context, Why): its CSV download, its own share link, and the
flag that it was drawn in this session.

``build_tail(prefix, csv_label)`` makes ``<prefix>_csv`` (a read-only file), ``<prefix>_link`` (the link to
this tab's view, with a copy button), ``<prefix>_qs`` (the hidden query the tab's handlers fill) and
``<prefix>_drawn`` (a ``gr.State``); ``wire_link(ui, prefix)`` turns the query into the link in the page
(``TAB_LINK_JS``: this address with the query, no request).
"""

from __future__ import annotations

import gradio as gr

from explorer.app.controls.share_js import TAB_LINK_JS


def build_tail(prefix: str, csv_label: str) -> dict:
    out = {}
    with gr.Row():
        out[f"{prefix}_csv"] = gr.File(None, label=csv_label, interactive=False, elem_id=f"{prefix}-csv")
        out[f"{prefix}_link"] = gr.Textbox(
            "", label="Share link (this view)", buttons=["copy"], interactive=False, elem_id=f"{prefix}-link"
        )
    out[f"{prefix}_qs"] = gr.Textbox("", visible=False)
    out[f"{prefix}_drawn"] = gr.State(False)
    return out


def wire_link(ui, prefix: str) -> None:
    qs, link = ui[f"{prefix}_qs"], ui[f"{prefix}_link"]
    qs.change(None, [qs], [link], js=TAB_LINK_JS, queue=False, api_visibility="private")
