"""Per-session state."""
from __future__ import annotations
from explorer.app import seq2seq as ui_encdec
from explorer.app.grid_pick import normalise
from explorer.app.share import clip_text
from models import ModelConfig
from explorer.runtime.digest import digest
from explorer.app.controls import ui_digest


def new_state(cfg: ModelConfig | None = None, text: str | None = None) -> dict:
    """``{"drawn": digest of the figures' config and text, "fresh": drawn by the last edit,
    "ui": digest of the controls' visibility, "sweep": last sweep records}``; ``text`` given: the
    page was built showing ``cfg``'s figures for it."""
    cfg = cfg or ModelConfig()
    drawn = None if text is None else drawn_digest(cfg, text)
    return {"drawn": drawn, "fresh": False, "ui": ui_digest(cfg.to_json()), "sweep": None}


def read_state(state) -> dict:
    return {**new_state(), **state} if isinstance(state, dict) else new_state()


def drawn_digest(cfg: ModelConfig, text: str, separator=None, picks=(None, None)) -> str:
    """Digest of what the attention figures show: config, used text, separator, grid picks."""
    return digest([cfg.to_json(), clip_text(text), ui_encdec.separator(separator), *map(normalise, picks)])


