"""Config controls generated from the ModelConfig dataclass and the registries.

Every ModelConfig field (except the fixed byte-level ``vocab_size``) gets one control chosen by
its type: int -> ``gr.Number(precision=0)``, float -> ``gr.Number``, bool -> ``gr.Checkbox``,
category -> ``gr.Dropdown`` of the registry keys, other str -> ``gr.Dropdown`` of its values.
A parameter control is visible only while a chosen variant lists it in ``Variant.params``, so a
variant registered later brings its own controls without any change here; the category dropdowns
(norm placement included), causal, the sizes and the seed are always visible. Each category's
info line explains the selected variant (``explorer.app.controls.control_info``) and updates with the selection;
a category the current choices do not read says so there (norm with placement ``none``). Number boxes
act on commit (Enter / leaving the box), show their range, and a whole-number field given 3.5 is
refused with a message instead of being rounded behind the user's back. Optional numbers
(``n_kv_heads``, ``head_dim``, ``d_ff``, ``softcap``) show 0 for None (a number box cannot be empty): every
such field is a positive size or scale, so 0 is free to mean "default / off".
"""

from __future__ import annotations

import functools
from dataclasses import fields

import gradio as gr

from explorer.app.controls.control_info import choice_info
from explorer.runtime.configs import app_config, as_config
from explorer.runtime.digest import digest
from explorer.runtime.presets import CUSTOM, preset_info
from models import ConfigError, ModelConfig, registries
from models.config import CATEGORIES, FIELDS

# byte-level tokens: vocab_size fixed at 256; the fields a pretrained checkpoint's fidelity needs (models.hf:
# LayerNorm eps, projection biases, tanh GELU, an embedding norm, Gemma's embedding scale and logit cap, the FFN
# of a schedule's ':dense' layers) keep their defaults in the app's controls
HIDDEN_FIELDS = (
    "vocab_size",
    "norm_eps",
    "attn_bias",
    "gelu_approx",
    "embed_norm",
    "embed_scale",
    "final_softcap",
    "dense_ffn",
    "dense_d_ff",
)
SIZE_FIELDS = ("n_layers", "d_model", "n_heads", "n_kv_heads", "head_dim")
# what the 2024-2026 families add to every attention (models.schedule, qk_norm, sinks, the output gate): fields of
# the model, not of one variant, so always shown, in their own group
MODERN_FIELDS = ("layer_schedule", "qk_norm", "attn_sinks", "attn_gate")
CONTROL_FIELDS = tuple(f.name for f in fields(ModelConfig) if f.name not in HIDDEN_FIELDS)
# views of the fields' records (models.config.FIELDS): a string field's values, the control labels
STR_CHOICES = {name: list(p.choices) for name, p in FIELDS.items() if p.choices}
LABELS = {name: p.label for name, p in FIELDS.items() if p.label is not None}


def field_type(name: str) -> tuple:
    """``(base type, optional?)`` of a ModelConfig field, from its record."""
    p = FIELDS[name]
    return p.type, p.optional


def always_visible() -> set:
    """The choices that define the model: never hidden, whatever another choice reads."""
    return set(CATEGORIES) | {"causal", "seed"} | set(SIZE_FIELDS) | set(MODERN_FIELDS)


def relevant(choice: dict) -> set:
    """Fields read by the chosen variants (``choice``: category -> key); unknown keys read nothing."""
    regs = registries()
    out = set()
    for cat in CATEGORIES:
        variant = regs[cat].get(choice.get(cat))
        if variant is not None:
            out |= set(variant.params)
    return out


def visible_fields(choice: dict) -> set:
    return always_visible() | relevant(choice)


def value_range(name: str) -> tuple | None:
    """``(lowest, highest)`` accepted for an integer field in the app: its record's range, capped
    by its interactive cap (None for a field without a range)."""
    p = FIELDS[name]
    if p.range is None:
        return None
    lo, hi = p.range
    return lo, hi if p.cap is None else min(hi, p.cap)


def number_info(name: str) -> str | None:
    """The range shown under an integer box: "1–12, whole numbers"."""
    r = value_range(name)
    if r is None:
        return None
    base, optional = field_type(name)
    extra = ", 0 = default" if optional else ""
    return f"{r[0]}–{r[1]:,}, whole numbers{extra}; applied on Enter or leaving the box"


def unused_categories(choice: dict) -> set:
    """Categories the chosen variants make irrelevant: a category some norm placements read
    (``norm``) that neither the chosen placement nor another chosen variant reads. (Layer structures
    list ``norm_placement`` only when they constrain it; every layer uses one, so it is never unused.)"""
    by_placement = {p for v in registries()["norm_placement"].values() for p in v.params} & set(CATEGORIES)
    return {c for c in by_placement if c not in relevant(choice)}


def category_info(name: str, value, unused: bool) -> str | None:
    """The line under a category dropdown: the selected variant's summary (``explorer.app.controls.control_info``)."""
    return choice_info(name, value, unused)


def make_control(name: str, value, visible: bool = True, unused: bool = False, choices: list | None = None):
    """The widget of one field (created inside the caller's Blocks context)."""
    base, optional = field_type(name)
    label = LABELS.get(name, name)
    kw = dict(label=label, visible=visible, elem_id=f"ctl-{name}")
    if name in CATEGORIES:
        return gr.Dropdown(
            choices=choices or list(registries()[name]), value=value, info=category_info(name, value, unused), **kw
        )
    if base is bool:
        return gr.Checkbox(value=value, **kw)
    if base is str:
        choices = STR_CHOICES.get(name)
        if choices is None:
            return gr.Textbox(value=value, **kw)
        return gr.Dropdown(choices=choices, value=value, **kw)
    # precision None for ints too: 3.5 must reach the check (and be refused), not be rounded to 4
    return gr.Number(
        value=_shown(name, value),
        precision=None,
        info=number_info(name) if base is int else "applied on Enter or leaving the box",
        **kw,
    )


def _shown(name: str, value):
    """None is shown as 0 in an optional number box."""
    base, optional = field_type(name)
    return 0 if optional and value is None and base in (int, float) else value


def values_to_config(values: dict) -> ModelConfig:
    """Control values by field name (``{"attention": "full", "n_layers": 4, ...}``) -> ``ModelConfig``.

    Fields left out keep their defaults; unknown names, wrong types and fractional values of
    whole-number fields raise ConfigError naming the field (never a silent rounding)."""
    if not isinstance(values, dict):
        raise ConfigError("controls", type(values).__name__, "a mapping of ModelConfig field names to values")
    d = {}
    for name, v in values.items():
        if name not in CONTROL_FIELDS:
            raise ConfigError("controls", name, f"ModelConfig fields: {list(CONTROL_FIELDS)}")
        base, optional = field_type(name)
        if isinstance(v, str) and base in (int, float) and not v.strip():
            v = None
        if optional and base in (int, float) and not isinstance(v, bool) and v == 0:
            v = None
        if isinstance(v, float) and base is int:
            if not v.is_integer():
                r = value_range(name)
                raise ConfigError(name, v, "a whole number" + (f" in [{r[0]}, {r[1]}]" if r else ""))
            v = int(v)
        d[name] = v
    return ModelConfig.from_dict(d)


def config_values(cfg: ModelConfig) -> dict:
    """``{field: value shown in its control}``."""
    return {name: _shown(name, getattr(cfg, name)) for name in CONTROL_FIELDS}


def _choice(values: dict) -> dict:
    return {c: values.get(c) for c in CATEGORIES}


def config_updates(cfg: ModelConfig) -> dict:
    """``{field: gr.update}``: the config's value and the visibility / notes its variants imply."""
    return {n: {**u, "value": _shown(n, getattr(cfg, n))} for n, u in visibility_updates(cfg.to_dict()).items()}


def visibility_updates(values: dict) -> dict:
    """``{field: gr.update}`` of visibility (and the category notes) for these control values."""
    choice = _choice(values)
    shown, unused = visible_fields(choice), unused_categories(choice)
    out = {}
    for n in CONTROL_FIELDS:
        if n in CATEGORIES:
            out[n] = gr.update(visible=True, info=category_info(n, values.get(n), n in unused))
        else:
            out[n] = gr.update(visible=n in shown)
    return out


# the key ``explorer.app.controls.weights`` adds to the control values while a pretrained checkpoint is drawn
CHECKPOINT_KEY = "checkpoint"


def current_config(values: dict) -> ModelConfig:
    """The controls' config through the one door (``explorer.runtime.configs.app_config``); while a
    checkpoint is drawn (``values[CHECKPOINT_KEY]``: its id), the checkpoint's config with the controls'
    surgery-safe changes (``explorer.analysis.surgery.config_for``: its sizes are its own,
    past the app's caps, and its weights are within the checkpoint cap and the memory budget)."""
    if isinstance(values, dict) and values.get(CHECKPOINT_KEY):
        from explorer.analysis.surgery import config_for

        plain = without_checkpoint(values)
        parsed = values_to_config(plain)
        return config_for(values[CHECKPOINT_KEY], {k: getattr(parsed, k) for k in plain})
    return app_config(values_to_config(values))


def without_checkpoint(values: dict) -> dict:
    """The control values alone (``CHECKPOINT_KEY`` dropped)."""
    return {k: v for k, v in values.items() if k != CHECKPOINT_KEY}


# ---------------------------------------------------------------------------- controls
def choice_marks(values: dict) -> dict:
    """``{category: [(label, key), ...]}``: keys that cannot run with the current causal setting are
    labelled (``linformer (needs causal off)``), so the list shows it before a choice is made."""
    try:
        cfg = values_to_config({k: v for k, v in values.items() if k in CONTROL_FIELDS})
        return {c: list(items) for c, items in _marks(cfg).items()}
    except Exception:
        return {c: [(k, k) for k in registries()[c]] for c in CATEGORIES}


@functools.lru_cache(maxsize=256)
def _marks(cfg: ModelConfig) -> dict:
    """``choice_marks`` of one config, memoised by it: every alternative key validated once."""
    out = {}
    for cat in CATEGORIES:
        items = []
        for key in registries()[cat]:
            label = key
            try:
                as_config(cfg.replace(**{cat: key}))
            except ConfigError as e:
                if e.field == "causal":
                    label = f"{key} (needs causal {'off' if cfg.causal else 'on'})"
            except Exception:
                pass
            items.append((label, key))
        out[cat] = items
    return out


def control_ui(values: dict) -> tuple:
    """(``{field: gr.update}`` of visibility, notes and marked choices; the plain data they show)."""
    vis = visibility_updates(values)
    marks = choice_marks(values)
    for cat, items in marks.items():
        vis[cat] = {**vis[cat], "choices": items}
    plain = {n: [u.get("visible"), u.get("info"), u.get("choices")] for n, u in vis.items()}
    return vis, plain


FIELD_DIGEST_CHARS = 6  # hex characters per control in ``state["ui"]``: 82 controls -> 492 characters a session


def field_digests(plain: dict) -> str:
    """One short digest per control of its look (visibility, note, marked choices), in
    ``CONTROL_FIELDS`` order: what ``state["ui"]`` keeps (a string, so a session's state stays small)."""
    return "".join(digest(plain.get(n))[:FIELD_DIGEST_CHARS] for n in CONTROL_FIELDS)


def _field_digest(sig, i: int) -> str | None:
    part = sig[i * FIELD_DIGEST_CHARS : (i + 1) * FIELD_DIGEST_CHARS] if isinstance(sig, str) else ""
    return part if len(part) == FIELD_DIGEST_CHARS else None


def control_outputs(values: dict, state: dict) -> tuple:
    """Updates of the controls whose look differs from what the page shows (``state["ui"]``, one
    digest per control), ``gr.skip()`` for the others; and the new digests. Picking a pattern that
    shows one more field re-sends that field, not every dropdown with its whole list of choices
    (each update the page applies costs its main thread; each re-send is a copy in Gradio's session)."""
    ups, plain = control_ui(values)
    sig = field_digests(plain)
    shown = state.get("ui")
    return {
        n: ups[n] if n in ups and _field_digest(sig, i) != _field_digest(shown, i) else gr.skip()
        for i, n in enumerate(CONTROL_FIELDS)
    }, sig


def adjust_causal(values: dict) -> tuple:
    """When the only problem is ``causal`` (linformer / Nystromformer are bidirectional only,
    adaptive span causal only), flip it -> (values, note); otherwise the values unchanged."""
    try:
        as_config(values_to_config(values))
        return values, ""
    except ConfigError as e:
        if e.field != "causal":
            return values, ""
    flipped = {**values, "causal": not values.get("causal", True)}
    try:
        as_config(values_to_config(flipped))
    except Exception:
        return values, ""
    state = "ticked" if flipped["causal"] else "unticked"
    why = "it is causal only" if flipped["causal"] else "it attends in both directions"
    who = next((f"{values[c]}" for c in ("attention", "position") if values.get(c) is not None), "this choice")
    return flipped, f"ℹ️ Causal {state}: {who} cannot run otherwise ({why})."


@functools.lru_cache(maxsize=64)
def ui_digest(cfg: ModelConfig) -> str:
    """``field_digests`` of the controls' look for a config (memoised: every handler reading a state
    needs the default's)."""
    return field_digests(control_ui(cfg.to_dict())[1])


def preset_update(match: str) -> dict:
    """The Preset dropdown after a redraw whose controls match the preset ``match`` (``CUSTOM``: none).
    A match is said in the line under the dropdown and the dropdown keeps what the visitor chose (it
    used to switch itself, e.g. to "BLOOM (2022)" after picking ALiBi); controls that match no preset
    put it back on ``CUSTOM``, so it never names a preset the figures do not show."""
    if match == CUSTOM:
        return gr.update(value=CUSTOM, info=preset_info(CUSTOM))
    return gr.update(info=preset_info(match))
