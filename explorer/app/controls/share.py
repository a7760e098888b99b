"""Share links: the whole config (and the input text) in the URL query string; no gradio here.

``to_query(cfg, text)`` writes only what differs from the defaults (or from a preset, named by
``preset=``), so links stay short, and only the part of the text the model reads
(``explorer.runtime.text.model_input``): a link never holds more than ``MAX_QUERY_CHARS`` characters,
far below what browsers and the server accept, so a pasted novel cannot make every later request
fail. ``from_query(params)`` never raises: a field it refuses (unknown, bad value, over a cap) is
dropped and named in a notice while the rest of the link is used; an unreadable query string (absurd
size) gives the defaults back with a notice naming the problem. Keys starting with ``__`` (Hugging Face adds ``__sign``,
Gradio ``__theme``) and Gradio's ``view`` are not ours and are ignored, nor are the page's ``tab``, grid picks and
checkpoint id (``PAGE_PARAMS``) and the parameters each tab reads itself (``Tab.link``, handed in as ``owned``).

An encoder-decoder's link also carries the source | target separator as ``sep`` when it is not the
default ``=>`` (a link without it splits at ``=>``); ``link_separator(params)`` reads it back, checked
like the separator box (``explorer.runtime.text.check_separator``: at most 16 visible characters). A bad
``sep`` keeps the rest of the link and falls back to the default separator, with a notice naming it.
"""

from __future__ import annotations

import logging
from urllib.parse import urlencode

from explorer.app.server.request_limits import LONG_LINK_PARAM
from explorer.runtime.configs import app_config
from explorer.runtime.limits import MAX_TEXT_BYTES
from explorer.runtime.presets import CUSTOM, PRESETS, preset_config
from explorer.runtime.text import (
    DEFAULT_SEPARATOR,
    DEFAULT_TEXT,
    MAX_SEPARATOR_CHARS,
    check_separator,
    clip_text,
    model_input,
    reads_pair,
)
from models import ConfigError, ModelConfig

log = logging.getLogger(__name__)

MAX_QUERY_CHARS = 4000
# the page's own parameters that are no config field: Gradio's view, the tab to open (explorer.app.page.wiring),
# the grid's picks (explorer.app.controls.grid_pick) and a checkpoint's id (explorer.app.controls.checkpoint_link);
# the tabs' own (Tab.link: pin, lc_len, why_pos, ...) are handed to from_query by its caller as ``owned``
PAGE_PARAMS = frozenset({"view", "tab", "grid_layers", "grid_heads", "ckpt"})
# a source / target text is up to MAX_TEXT_BYTES of its two sides plus the separator between them
MAX_LINK_TEXT_BYTES = MAX_TEXT_BYTES + 4 * MAX_SEPARATOR_CHARS
SEP_PARAM = "sep"  # the encoder-decoder's source | target separator (read by link_separator)
CKPT_PARAM = "ckpt"  # a pretrained checkpoint's id (explorer.app.controls.checkpoint_link reads it back)


def _text_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if v is None:
        return "none"
    return str(v)


def to_query(
    cfg: ModelConfig, text: str = DEFAULT_TEXT, preset: str = CUSTOM, separator: str | None = DEFAULT_SEPARATOR
) -> str:
    """``"attention=sliding_window&window=32"``: the fields that differ from the base config, the used
    part of the text, and an encoder-decoder's separator when it is not the default; at most
    ``MAX_QUERY_CHARS`` characters (the text is left out if needed). An encoder-decoder's separator
    that the box would refuse raises ``ConfigError`` (its figures were not drawn with it either)."""
    base = preset_config(preset) if preset in PRESETS else ModelConfig()
    items = {}
    if preset in PRESETS:
        items["preset"] = preset
    base_d = base.to_dict()
    for k, v in cfg.to_dict().items():
        if base_d[k] != v:
            items[k] = _text_value(v)
    try:
        text = model_input(cfg, text, separator).text  # what the figures were drawn from
    except ConfigError:
        text = clip_text(text)
    if text != DEFAULT_TEXT:
        items["text"] = text
    if reads_pair(cfg):  # only a source / target model reads the separator
        separator = check_separator(separator or None)  # "" (an emptied box) is the default
        if separator != DEFAULT_SEPARATOR:
            items[SEP_PARAM] = separator
    query = urlencode(items)
    if len(query) > MAX_QUERY_CHARS:  # 256 bytes of text percent-encode to at most 768 characters
        items.pop("text", None)
        query = urlencode(items)
    return query


def from_query(params: dict, owned=frozenset()) -> tuple:
    """``(cfg, text, preset, notice)``; ``notice`` is None when the query string was used as is. ``owned``:
    parameters the tabs read themselves (``explorer.app.tabs.link_params``), left out like ``PAGE_PARAMS``.

    A link whose fields are refused one by one keeps the others: each field the config refuses (its
    ``ConfigError`` names it) is dropped and named in the notice, the rest of the link (its text, its
    preset, its other fields) is used. Only a link that cannot be read at all (too long, or refused
    for a reason no single field of it explains) gives the defaults. ``LONG_LINK_PARAM`` stands for a
    link the server would not hand on whole (its length): it is refused as too long."""
    long_link = dict(params or {}).get(LONG_LINK_PARAM)
    params = {
        str(k): v
        for k, v in dict(params or {}).items()
        if not str(k).startswith("__") and str(k) not in PAGE_PARAMS and str(k) not in owned
    }
    if not params and not str(long_link).isdigit():
        return ModelConfig(), DEFAULT_TEXT, CUSTOM, None
    try:
        size = sum(len(str(k)) + len(str(v)) for k, v in params.items())
        if str(long_link).isdigit():  # the server had the whole link's length only
            size = max(size, int(long_link))
        if size > MAX_QUERY_CHARS:
            raise ConfigError("link", f"{size} characters", f"a query string of at most {MAX_QUERY_CHARS} characters")
        params.pop(SEP_PARAM, None)  # the separator: link_separator
        text = str(params.pop("text", DEFAULT_TEXT))
        cfg, preset, refused = _kept_fields(str(params.pop("preset", CUSTOM)), params)
    except ConfigError as exc:
        return ModelConfig(), DEFAULT_TEXT, CUSTOM, f"The link could not be used ({_short(exc)}); showing the defaults."
    except Exception as exc:  # anything else a hostile string could provoke: never raise
        log.warning("unusable share link %r: %s", params, exc)
        return ModelConfig(), DEFAULT_TEXT, CUSTOM, "The link could not be read; showing the defaults."
    notes = []
    if refused:
        names = ", ".join(refused)
        why = "; ".join(_short(e, 120) for e in refused.values())
        notes.append(f"The link's {names} could not be used ({why}); the rest of the link is kept.")
    most = MAX_LINK_TEXT_BYTES if reads_pair(cfg) else MAX_TEXT_BYTES
    if len(text.encode("utf-8")) > most:
        text = clip_text(text, most)
        notes.append(f"The text in the link was cut to its first {most} bytes.")
    return cfg, text, preset, " ".join(notes) or None


def _short(exc: Exception, most: int = 200) -> str:
    why = str(exc)
    return why if len(why) <= most else why[:most] + "…"  # the echoed value can be huge


def _kept_fields(preset: str, fields: dict) -> tuple:
    """``(cfg, preset, refused)``: the config of ``preset`` (CUSTOM: the defaults) with every field of
    ``fields`` the config accepts; ``refused`` maps each dropped field (an unknown preset is the field
    ``preset``) to its ``ConfigError``. A refusal naming no field of the link raises it."""
    refused = {}
    try:
        base = preset_config(preset).to_dict() if preset != CUSTOM else ModelConfig().to_dict()
    except ConfigError as exc:
        refused["preset"] = exc
        preset, base = CUSTOM, ModelConfig().to_dict()
    fields = dict(fields)
    for name in [k for k in fields if k not in base]:  # unknown fields: refused without a try each
        refused[name] = ConfigError(name, _short(ValueError(fields.pop(name)), 40), "not a field of the model")
    while True:  # each round drops one field, so at most len(fields) + 1 rounds
        try:
            return app_config({**base, **fields}), preset, refused
        except ConfigError as exc:
            if exc.field not in fields:
                raise
            refused[exc.field] = exc
            del fields[exc.field]


def link_separator(params: dict) -> tuple:
    """``(separator, notice)`` of a link: its ``sep`` (checked like the separator box), else the
    default; never raises. ``notice`` names the field and what it accepts when ``sep`` was refused."""
    raw = dict(params or {}).get(SEP_PARAM)
    if raw is None:
        return DEFAULT_SEPARATOR, None
    try:
        return check_separator(raw), None
    except ConfigError as exc:
        return (
            DEFAULT_SEPARATOR,
            f"The link's separator could not be used ({_short(exc)}); splitting at {DEFAULT_SEPARATOR!r}.",
        )


def compare_query(a: ModelConfig, b: ModelConfig, text: str, separator=None) -> str:
    """The share query of the comparison: B's own query, A's query under ``pin``, and the tab."""
    qb = to_query(b, text, separator=separator)
    extra = urlencode({"pin": to_query(a, separator=separator), "tab": "compare"})
    return f"{qb}&{extra}" if qb else extra


def checkpoint_query(
    ckpt_id: str, base: ModelConfig, cfg: ModelConfig, used_text: str, separator: str | None = None
) -> str:
    """A checkpoint's share query: its id, the fields the controls changed from its config (its surgery),
    the part of the text its tokenizer read (``used_text``) and an encoder-decoder's separator when it is
    not the default; never its weights."""
    items = {CKPT_PARAM: ckpt_id}
    base_d = base.to_dict()
    items.update({k: _text_value(v) for k, v in cfg.to_dict().items() if base_d[k] != v})
    if used_text != DEFAULT_TEXT:
        items["text"] = used_text
    if reads_pair(cfg) and separator and separator != DEFAULT_SEPARATOR:
        items[SEP_PARAM] = check_separator(separator)
    query = urlencode(items)
    return query if len(query) <= MAX_QUERY_CHARS else urlencode({k: v for k, v in items.items() if k != "text"})
