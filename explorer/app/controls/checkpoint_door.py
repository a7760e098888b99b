"""The "Open a pretrained checkpoint" box: a checkpoint by name (or Hub id), or uploaded files.

Opening one puts "checkpoint: <name>" among the Weights choices (an upload's name:
``checkpoints.shown_name``) and selects it, fills every control with its architecture
(``explorer.app.controls.weights.open_checkpoint``), and the redraw chain that follows draws it in every
tab. Hub ids and uploads this session opened are kept in ``ckpt_extra`` (a per-session list of ids, never
weights: an upload's weights live in the server's small memo of uploads by their digest).
"""

from __future__ import annotations

import gradio as gr

from explorer.analysis.weights import checkpoint_upload, checkpoints
from explorer.app.controls import weights as weights_switch
from explorer.app.controls.state import read_state
from explorer.app.server import request_limits
from explorer.app.server.messages import problem
from explorer.runtime.untrusted import shown, shown_html

OUT = (*weights_switch.SWITCH_OUT, "ckpt_extra")
MAX_EXTRA = 8


def door_hint() -> str:
    names = checkpoints.choice_ids()
    hub = (
        "Hub ids (`hub:owner/name`) are downloaded on this host."
        if checkpoints.hub_allowed()
        else f"This host does not download from the Hub (`{checkpoints.HUB_ENV}=1` allows it)."
    )
    offered = ", ".join(f"`{n}`" for n in names) if names else "none"
    return (
        f"Offered here: {offered} (folders under `{checkpoints.ROOTS_ENV}`). {hub} Upload: config.json, "
        "model.safetensors, tokenizer.json (a `save_pretrained` folder's other files are ignored), "
        f"at most {checkpoint_upload.max_bytes() / 1e6:.0f} MB in all. "
        f"Models up to {checkpoints.max_params() / 1e6:.0f} M parameters (Llama / Mistral / Qwen2 / SmolLM, "
        "GPT-2, BERT, T5)."
    )


def build_door(comps: dict) -> None:
    """The box's components, added to ``comps`` (inside the caller's column)."""
    with gr.Accordion("Open a pretrained checkpoint", open=False, elem_id="checkpoint-door"):
        gr.Markdown(door_hint(), elem_classes="hint", elem_id="checkpoint-hint")
        comps["ckpt_id"] = gr.Textbox(
            "",
            label="Checkpoint name or hub:owner/name",
            elem_id="checkpoint-id",
            max_length=checkpoints.MAX_ID_CHARS,
            max_lines=1,
        )
        with gr.Row():
            comps["ckpt_open"] = gr.Button("Open", size="sm", elem_id="checkpoint-open", scale=0, min_width=90)
            comps["ckpt_upload"] = gr.UploadButton(
                "Upload checkpoint files",
                file_count="multiple",
                file_types=[".json", ".safetensors", ".txt", ".model", ".jinja"],  # save_pretrained's extras, ignored
                size="sm",
                elem_id="checkpoint-upload",
            )
    comps["ckpt_extra"] = gr.State([])


def _extra(extra, ckpt_id: str) -> list:
    kept = [i for i in (extra or []) if isinstance(i, str)][-MAX_EXTRA:]
    if ckpt_id in checkpoints.choice_ids() or ckpt_id in kept:
        return kept
    return [*kept, ckpt_id][-MAX_EXTRA:]


def _refused(state, exc) -> dict:
    """Nothing opened: the message (named field, escaped), every other output left as it is."""
    why = problem(exc)
    gr.Warning(shown_html(why))
    return {**{name: gr.skip() for name in OUT}, "state": read_state(state), "status": f"⚠️ **{shown(why)}**"}


def open_named(values: dict, ckpt_id=None, ckpt_extra=None, state=None) -> dict:
    """The Open button: the id in the box (checked, then loaded)."""
    try:
        ckpt_id = checkpoints.check_id(str(ckpt_id or "").strip())
        checkpoints.load(ckpt_id)
    except Exception as exc:
        return _refused(state, exc)
    extra = _extra(ckpt_extra, ckpt_id)
    return {**weights_switch.open_checkpoint(read_state(state), ckpt_id, extra, select=True), "ckpt_extra": extra}


def open_upload(values: dict, ckpt_upload=None, ckpt_extra=None, state=None) -> dict:
    """The upload button: the files checked, copied and read (``explorer.analysis.weights.checkpoint_upload``)."""
    try:
        loaded = checkpoint_upload.receive(ckpt_upload, owned=request_limits.owns)  # this visitor's uploads only
    except Exception as exc:
        return _refused(state, exc)
    extra = _extra(ckpt_extra, loaded.id)
    out = weights_switch.open_checkpoint(read_state(state), loaded.id, extra, select=True)
    skipped = checkpoint_upload.ignored(ckpt_upload)
    unread = f" Ignored (not needed here): {shown(', '.join(skipped))}." if skipped else ""
    return {
        **out,
        "ckpt_extra": extra,
        "status": f"{out['status']} Uploaded files read; "
        f"this server keeps the model in memory for a while as {shown(loaded.name)}.{unread}",
    }
