"""A share link that names a pretrained checkpoint (``ckpt=<id>``): opened here, or the bundled model.

The link carries the checkpoint's id, the fields the controls changed from its config (its surgery) and
the text. ``restore(params)`` loads the checkpoint (only one this host offers, or a Hub id where
downloads are allowed, or an upload it still holds), applies the changes through the same check as the
controls (``explorer.analysis.surgery.config_for``) and fills every control and the Weights
choice. A host that cannot load it says so, names why, and opens the rest of the link on the bundled
models (the changes the catalogue's default config can take, the text).
"""

from __future__ import annotations

import gradio as gr

from explorer.analysis import surgery
from explorer.analysis.source import checkpoint_choice
from explorer.analysis.weights import checkpoints
from explorer.app.controls.fields import CONTROL_FIELDS, HIDDEN_FIELDS
from explorer.app.controls.share import CKPT_PARAM, SEP_PARAM, from_query, link_separator
from explorer.app.controls.weights import all_choices
from explorer.app.server.messages import problem
from explorer.runtime.presets import CUSTOM
from explorer.runtime.untrusted import shown, shown_html
from models import ConfigError


def restore(params: dict, fill_controls) -> dict:
    """``fill_controls(cfg, text, preset, status)`` of the link's checkpoint and changes, plus the Weights
    choice; or, when this host cannot load it, of the rest of the link, with the reason."""
    raw = str(params.get(CKPT_PARAM, ""))[: checkpoints.MAX_ID_CHARS + 1]
    separator, sep_notice = link_separator(params)
    rest = {k: v for k, v in params.items() if k not in (CKPT_PARAM, SEP_PARAM)}
    text = str(rest.get("text", ""))[:4096] or None
    try:
        ckpt_id = checkpoints.check_id(raw)
        loaded = checkpoints.load(ckpt_id)
        changes = {k: v for k, v in rest.items() if k in CONTROL_FIELDS}
        unknown = sorted(k for k in rest if k not in CONTROL_FIELDS and k != "text" and not k.startswith("__"))
        if unknown:
            raise ConfigError(
                unknown[0],
                str(rest[unknown[0]])[:40],
                f"fields of the checkpoint's config: {', '.join(CONTROL_FIELDS)}",
            )
        cfg = loaded.config.replace(**changes)  # strings coerced like a link's other values
        cfg = surgery.config_for(loaded, {k: getattr(cfg, k) for k in changes})
    except Exception as exc:
        why = problem(exc)
        msg = (
            f"This link opens checkpoint {raw[:60]!r}, which this host cannot load ({why}); showing the bundled "
            "model instead."
        )
        gr.Warning(shown_html(msg))
        keep = {k: v for k, v in rest.items() if k not in HIDDEN_FIELDS}  # a checkpoint's own, not the app's
        cfg, text2, preset, notice = from_query(keep)
        status = f"⚠️ {shown(msg)}" + (f" {shown(notice)}" if notice else "")
        return {**fill_controls(cfg, text2, preset, status, separator=separator), "weights": gr.update(value="bundled")}
    extra = [] if ckpt_id in checkpoints.choice_ids() else [ckpt_id]
    status = f"Opened {shown(loaded.describe())} from the link." + (f" ⚠️ {shown(sep_notice)}" if sep_notice else "")
    return {
        **fill_controls(cfg, text, CUSTOM, status, separator=separator),
        "weights": gr.update(choices=all_choices(extra), value=checkpoint_choice(ckpt_id)),
        "ckpt_extra": extra,
    }
