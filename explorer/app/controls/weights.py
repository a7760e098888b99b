"""The "Weights" control: which weights every tab draws, and the handlers that pass them down.

Four kinds of choice:
- ``bundled`` (the default): the weights on screen (the default bundle) under the controls' surgery when
  their weights still mean the same under it (``explorer.analysis.surgery``), else the bundle trained with
  the config that needs other weights; a config no bundle serves is drawn at initialisation, and the
  weights line says why and what to train. ``bundle:<name>``: bundle ``name`` on screen, chosen explicitly:
  by a "Trained: ..." preset (``after_fill``, a link's ``with_trained_preset``) or by the button the page
  shows when a bundle was trained with exactly the controls' config while other weights are operated on
  ("A model trained with this pattern exists: show it", ``show_trained``). A preset, Reset, Undo or an
  upload that leaves that bundle's config goes back to ``bundled``.
- ``initial``: the config's initial weights (its seed).
- ``trained`` ("your run"): the Train tab's model, snapshotted by ``switch`` into the session's
  ``trained`` state (a bounded copy, so training on does not change what the tabs show until the
  switch is pressed again); it turns itself back to ``bundled`` with a message when there is no run or
  the controls describe another config. A run of the controls' model scaled down to the training cap
  (``explorer.app.controls.train_source``) is not another config: the switch sets the size controls to the
  run's (``SWITCH_OUT`` names them) and draws it.
- ``checkpoint:<id>``: a pretrained checkpoint (``explorer.analysis.weights.checkpoints``). Choosing one fills every
  control with its architecture (``open_checkpoint``); while it is chosen the handlers get the control
  values with the loaded checkpoint (``drawing``), so ``current_config`` is the checkpoint's config with
  the controls' surgery, and the weights line reports the loss and perplexity change. A preset, Reset or an uploaded
  config switches back to bundled (``after_fill``), as does choosing another weight (the controls go
  back to the defaults when the checkpoint's sizes are past the explorer's caps).

``with_weights(handler)`` resolves the choice once per request (``source_of``: an
``explorer.analysis.source.WeightsSource``, the kind, the config drawn, its record, the loaded checkpoint)
and hands it to a compute handler as its ``weights`` argument; the handler takes the config from it and
passes it down to the analyses, which use the record only for the config it belongs to.
``attention_with_weights`` does the same for the first event of a redraw, adds the weights line
(``weights_md``: which weights are drawn and where they came from), relabels the radio's "bundled" entry
while no bundle serves the controls (``radio_update``: the radio and the line never disagree) and turns
the switch off when a commit moves the config away from the session's run.

The share link and the config export carry the configuration only: a session's own weights never
leave it except through the Train tab's download; the bundled ones are the app's; a checkpoint's link
carries its id.
"""

from __future__ import annotations

import gradio as gr

from explorer.analysis import source as weights_source
from explorer.analysis import surgery
from explorer.analysis.source import (
    BUNDLED,
    INITIAL,
    TRAINED,
    WeightsSource,
    bundle_choice,
    bundle_name,
    checkpoint_choice,
    checkpoint_id,
)
from explorer.analysis.surgery.origin import DEFAULT_BUNDLE
from explorer.analysis.weights import checkpoints
from explorer.analysis.weights import trained as tw
from explorer.app.controls import train_source
from explorer.app.controls.fields import (
    CHECKPOINT_KEY,
    CONTROL_FIELDS,
    config_updates,
    current_config,
    values_to_config,
    without_checkpoint,
)
from explorer.app.controls.state import read_state
from explorer.app.controls.your_run import trained_snapshot
from explorer.app.server.messages import problem, shown_problem
from explorer.figures.readings import loss_line
from explorer.runtime.limits import check_caps
from explorer.runtime.presets import BUNDLE_PRESETS
from explorer.runtime.untrusted import shown, shown_html
from models import ModelConfig

CKPT = weights_source.CHECKPOINT_PREFIX  # a pretrained checkpoint's choice: "checkpoint:<id>"
CHOICES = [("bundled (trained)", BUNDLED), ("initial", INITIAL), ("your run (Train tab)", TRAINED)]
SHARE_NOTE = (
    "The share link and the config export carry the configuration only, never your run's weights: "
    "those stay in this browser session (download them from the Train tab). A checkpoint's link "
    "carries its name."
)
# and every control: set to the run's sizes when it is the controls' model scaled down to the training cap, to a
# checkpoint's architecture when one is opened
WEIGHTS_IN = ("trained", "weights")  # what ``with_weights`` resolves into the request's one WeightsSource
SWITCH_OUT = ("weights", "trained", "state", "status", *CONTROL_FIELDS)


SHOW_TRAINED = "A model trained with this pattern exists: show it"


# the "bundled" entry's label while no bundle serves the controls: the radio says what the tabs draw
NO_BUNDLE_LABEL = "bundled: none serves these controls, so initial weights"


def all_choices(extra=(), bundle: str | None = None, bundled_label: str | None = None) -> list:
    """The Weights choices: bundled, initial, your run, and a checkpoint per id the host offers (and ``extra``
    ids: a Hub model or an upload this session opened); ``bundle``: the bundle chosen by name, after bundled;
    ``bundled_label``: the "bundled" entry's label (default "bundled (trained)")."""
    ids = list(dict.fromkeys([*checkpoints.choice_ids(), *(extra or ())]))
    named = [(f"bundle '{bundle}' as trained", bundle_choice(bundle))] if bundle else []
    first = [(bundled_label or CHOICES[0][0], BUNDLED)]
    return (
        first + named + CHOICES[1:] + [(f"checkpoint: {checkpoints.shown_name(i)}", checkpoint_choice(i)) for i in ids]
    )


def radio_update(src: WeightsSource | None, choice, extra=()) -> dict:
    """The Weights radio as one source of truth: its choices again (the value kept), the "bundled" entry
    reading ``NO_BUNDLE_LABEL`` while "bundled" is chosen and no bundle serves the controls (the tabs then
    draw the initial weights, as the line under it says)."""
    none_serves = choice == BUNDLED and (src is None or src.weights is None)
    return gr.update(
        choices=all_choices(extra, bundle=_named_bundle(choice), bundled_label=NO_BUNDLE_LABEL if none_serves else None)
    )


def bundle_update(name: str) -> dict:
    """The Weights control set to bundle ``name`` (its choice added)."""
    return gr.update(choices=all_choices(bundle=name), value=bundle_choice(name))


def trained_preset(name: str) -> str | None:
    """The "Trained: ..." preset of bundle ``name``, if any."""
    return next((p for p, b in BUNDLE_PRESETS.items() if b == name), None)


def show_button(src: WeightsSource | None) -> dict:
    """The "show it" button: visible when the weights drawn are under surgery and a bundle was trained with
    exactly the controls' config (``WeightsSource.trained_exists``)."""
    name = src.trained_exists if src is not None else ""
    return gr.update(visible=bool(name), value=f"{SHOW_TRAINED} (bundle '{name}')" if name else SHOW_TRAINED)


SHOW_OUT = ("weights", "preset", "state", "status", "weights_show")


def show_trained(values: dict, weights=BUNDLED, state=None) -> dict:
    """The explicit switch the page offers: the bundle trained with exactly the controls' config, as trained
    (the Weights choice "bundle:<name>", the preset its "Trained: ..." one so the share link and Undo carry
    it); the chain that follows redraws every tab."""
    state = {**read_state(state), "drawn": None}
    try:
        src = source_of(values, weights)
    except Exception as exc:  # a bad control value: nothing switched
        return {
            "weights": gr.skip(),
            "preset": gr.skip(),
            "state": state,
            "status": f"⚠️ {shown_problem(exc)}",
            "weights_show": gr.skip(),
        }
    name = src.trained_exists
    if not name:
        return {
            "weights": gr.skip(),
            "preset": gr.skip(),
            "state": state,
            "weights_show": gr.update(visible=False),
            "status": "No bundle was trained with exactly these controls: the weights on screen stay.",
        }
    preset = trained_preset(name)
    return {
        "weights": bundle_update(name),
        "preset": preset if preset else gr.skip(),
        "state": state,
        "weights_show": gr.update(visible=False),
        "status": f"Showing **bundle '{shown(name)}'**, trained with this configuration (before: "
        f"{shown(src.source)}). Choose 'bundled' in Weights to operate on the default model again.",
    }


def with_trained_preset(out: dict) -> dict:
    """A filled page (a link) whose preset is a "Trained: ..." one (not the default's) draws that bundle by name."""
    name = BUNDLE_PRESETS.get(out.get("preset")) if isinstance(out.get("preset"), str) else None
    if not name or name == DEFAULT_BUNDLE or "weights" in out:
        return out
    return {**out, "weights": bundle_update(name)}


def with_checkpoint(values: dict, choice) -> dict:
    """The control values, plus the checkpoint key when ``choice`` is a checkpoint (``current_config``
    then gives the checkpoint's config with the controls' surgery)."""
    ckpt = checkpoint_id(choice)
    return {**without_checkpoint(values), CHECKPOINT_KEY: ckpt} if ckpt else without_checkpoint(values)


def drawing(values: dict, loaded) -> dict:
    """The control values with the loaded checkpoint under ``CHECKPOINT_KEY`` (``current_config`` then
    applies the controls' surgery to its config without looking the checkpoint up again)."""
    return {**without_checkpoint(values), CHECKPOINT_KEY: loaded}


def source_of(values: dict, choice, trained=None, loaded=None) -> WeightsSource:
    """The request's one resolution of the Weights ``choice`` for the controls (``ConfigError`` for a bad
    control value, a change the checkpoint cannot take, a checkpoint that cannot be loaded; ``loaded``: the
    checkpoint, when the caller loaded it already)."""
    ckpt = checkpoint_id(choice)
    if ckpt is not None:
        loaded = loaded if loaded is not None else checkpoints.load(ckpt)
        return weights_source.resolve(choice, current_config(drawing(values, loaded)), loaded=loaded)
    return weights_source.resolve(choice, current_config(without_checkpoint(values)), trained)


def _resolved(values: dict, choice, trained=None, loaded=None) -> tuple:
    """``(source or None, values for the handler)``: None when the choice cannot be drawn with these
    controls (the handler, reading the config itself, warns naming the field)."""
    try:
        src = source_of(values, choice, trained, loaded)
    except Exception:  # a bad control value, a change the checkpoint cannot take: the handler says it
        return None, with_checkpoint(values, choice)
    return src, (drawing(values, src.loaded) if src.loaded is not None else without_checkpoint(values))


def chosen(values: dict, choice, trained):
    """The record ``choice`` means for the config on the controls (None: initial weights); the page's
    first paint (``explorer.app.page.layout``) draws with it."""
    src = _resolved(values, choice, trained)[0]
    return src.weights if src is not None else None


def weights_line(values: dict, choice, record, text=None) -> str:
    """The weights line of the page's first paint (``explorer.app.page.layout``): ``source_line`` of the choice."""
    return source_line(_resolved(values, choice, record if choice == TRAINED else None)[0], text, choice)


def source_line(src: WeightsSource | None, text=None, choice=None) -> str:
    """The line under the switch: which weights the tabs draw, where they came from, and (a bundle or a
    checkpoint moved to another architecture) what the move costs on ``text`` (None: not measured)."""
    if src is None:
        if checkpoint_id(choice):
            return "⚠️ The checkpoint cannot be drawn with these controls (the status line says why)."
        return (
            "ℹ️ No bundled model serves this config (the controls do not describe a valid config): drawing "
            "the **initial weights**."
        )
    if src.kind == INITIAL:
        return "Drawing the **initial weights** (untrained, from the config's seed)."
    if src.loaded is not None:
        return checkpoint_line(src, text)
    if src.weights is None:
        why = src.why or "your run belongs to another config"
        return f"ℹ️ No bundled model serves this config ({shown(why)}): drawing the **initial weights**."
    line = f"Drawing the weights of the **{shown(src.weights.source or 'session run')}**."
    if src.trained_exists:
        line += (
            f" A model trained with this pattern exists (bundle '{shown(src.trained_exists)}'): the button "
            "below shows it; until then the weights on screen are operated on."
        )
    if src.surgery and text is not None:
        try:
            change = surgery.loss_change(src.config, text, bundle=src.weights.bundle or None)
        except Exception as exc:  # over the budget, say: the line says so instead of the figures
            return f"{line} (Loss not measured: {shown_problem(exc)})"
        return f"{line} Surgery: {loss_line(change)}."
    return line


def checkpoint_line(src: WeightsSource, text=None) -> str:
    """The weights line of a checkpoint: which one, and (surgery) the loss and perplexity change on the
    text and on the held-out passage."""
    line = f"Drawing **{shown(src.source)}**."
    if not src.surgery or text is None:
        return line
    try:
        change = surgery.loss_change(src.config, text, checkpoint=src.loaded)
    except Exception as exc:  # over the budget, say: the line says so instead of the figures
        return f"{line} (Perplexity not measured: {shown_problem(exc)})"
    return f"{line} Surgery: {loss_line(change)}." if change else line


def _skip_controls() -> dict:
    return {name: gr.skip() for name in CONTROL_FIELDS}


def _off(state: dict, why: str) -> dict:
    gr.Warning(shown_html(why))
    return {"weights": BUNDLED, "trained": None, "state": state, "status": f"⚠️ **{shown(why)}**", **_skip_controls()}


def open_checkpoint(state: dict, ckpt_id: str, extra=(), select: bool = False) -> dict:
    """Load checkpoint ``ckpt_id`` and fill every control with its architecture (the chain that follows
    draws it; ``select``: the Weights choice is set to it, with ``extra`` ids among the choices); refused
    with a message naming the problem, the weights back to bundled."""
    try:
        loaded = checkpoints.load(ckpt_id)
    except Exception as exc:  # not offered, past the cap or the budget, a malformed file: said, nothing drawn
        return _off(state, problem(exc))
    fill = {n: gr.update(value=u["value"]) for n, u in config_updates(loaded.config).items()}
    tok = "its tokenizer's tokens" if loaded.tokenizer is not None else "token ids (it has no tokenizer.json)"
    status = (
        f"✓ Opened **{shown(loaded.describe())}** (read in {loaded.load_s:.2f} s; the maps show {tok}). "
        "The controls show its architecture: change the attention pattern, window, sinks, K/V heads, RoPE "
        "scale or ablated heads to operate on it (the Surgery tab measures what each change costs); other "
        "choices need other weights."
    )
    weights = gr.update(choices=all_choices(extra), value=checkpoint_choice(loaded.id)) if select else gr.skip()
    return {"weights": weights, "trained": None, "state": state, "status": status, **fill}


def after_fill(out: dict, weights) -> dict:
    """A preset, Reset or an uploaded config filled the controls while a checkpoint was drawn: the
    catalogue's model is drawn from now on (bundled weights), and the status says so. A "Trained: ..."
    preset of a bundle other than the default draws that bundle by name; any other fill leaves a bundle
    chosen by name for ``bundled`` (the default bundle on screen)."""
    filled = any(
        not (isinstance(out[n], dict) and set(out[n]) == {"__type__"}) for n in CONTROL_FIELDS if n in out
    )  # gr.skip() is an update without values
    name = BUNDLE_PRESETS.get(out.get("preset")) if filled and isinstance(out.get("preset"), str) else None
    named = name if name and name != DEFAULT_BUNDLE else None
    if not filled or not (named or _named_bundle(weights) or checkpoint_id(weights)):
        return {**out, "weights": gr.skip()}
    out = {**out, "weights": bundle_update(named) if named else BUNDLED}
    if not checkpoint_id(weights):
        return out
    note = "Weights switched to bundled: the controls now describe a model of the catalogue."
    status = out.get("status")
    return {**out, "status": f"{status} {note}".strip() if isinstance(status, str) else note}


def _named_bundle(weights) -> str | None:
    try:
        return bundle_name(weights)
    except Exception:  # a name that is no bundle (a hostile value): not a bundle choice
        return None


def _leave_checkpoint(values: dict) -> dict | None:
    """Every control back to the defaults when they hold a checkpoint's sizes (past the explorer's caps)."""
    try:
        check_caps(values_to_config(without_checkpoint(values)))
        return None
    except Exception:
        return {n: gr.update(value=u["value"]) for n, u in config_updates(ModelConfig()).items()}


def switch(values: dict, weights=BUNDLED, train_state=None, state=None) -> dict:
    """-> ``{weights, trained, state, status}``; the state's "drawn" digest is cleared so the chain
    that follows redraws every tab with the chosen weights."""
    state = {**read_state(state), "drawn": None}
    if checkpoint_id(weights):
        return open_checkpoint(state, checkpoint_id(weights))
    if weights not in (BUNDLED, INITIAL, TRAINED) and not _named_bundle(weights):
        return _off(state, f"weights={str(weights)[:40]!r} is not valid: one of {[c for _, c in all_choices()]}")
    values = without_checkpoint(values)
    sizes = _skip_controls()
    reset = _leave_checkpoint(values)
    if reset is not None:  # back from a checkpoint: its sizes are past the caps of every other choice
        return {
            "weights": gr.skip(),
            "trained": None,
            "state": state,
            **reset,
            "status": "Controls reset to the defaults: the checkpoint's sizes are past the explorer's caps.",
        }
    if weights != TRAINED:
        return {"weights": gr.skip(), "trained": None, "state": state, "status": "", **sizes}
    try:
        cfg = current_config(values)
        record = trained_snapshot(train_state)
    except Exception as exc:  # a bad control value, or weights over the byte cap
        return _off(state, problem(exc))
    if record is None:
        return _off(
            state,
            "No trained model in this session yet: train one in the Train tab (or upload one "
            "there), then switch to your run.",
        )
    diff = tw.mismatch(record, cfg)
    resized = train_source.apply_run(values, record) if diff else None
    if diff and resized is None:
        return _off(
            state,
            f"Your run belongs to another config: set {', '.join(diff[:6])} in the controls, "
            "then switch to your run again.",
        )
    note = ""
    if resized:  # the run is the controls' model scaled down to the training cap: draw it at its size
        sizes.update(resized)
        note = f"Controls set to your run's size ({', '.join(f'{k} = {v}' for k, v in resized.items())}). "
    record = tw.TrainedWeights(**{**record.__dict__, "source": f"your run, after {record.step} steps"})
    return {
        "weights": gr.skip(),
        "trained": record,
        "state": state,
        **sizes,
        "status": f"{note}Showing your run's weights, trained for {record.step} steps (switch again to pick up "
        "later steps). "
        "The gradient figure's other norm placements stay at initialisation.",
    }


def with_weights(handler):
    """``handler(values, **kw)`` called with the request's ``WeightsSource`` (``source_of``, resolved once
    here) as ``weights``, or None when the controls cannot be drawn (the handler warns)."""

    def run(values: dict, trained=None, weights=BUNDLED, **kw):
        src, values = _resolved(values, weights, trained)
        return handler(values, weights=src, **kw)

    return run


def attention_with_weights(handler):
    """Like ``with_weights``, plus the weights line (``weights_md``); a config that no longer matches
    the session's run, or a switch left on "your run" after the snapshot expired, turns the switch
    back to bundled (outputs ``weights`` and ``trained`` added to the handler's)."""

    def run(values: dict, trained=None, weights=BUNDLED, ckpt_extra=None, **kw):
        keep = {"trained": gr.skip()}
        loaded = None
        if checkpoint_id(weights):
            try:
                loaded = checkpoints.load(checkpoint_id(weights))  # resolved with it below, not looked up again
            except Exception as exc:  # an upload the server no longer holds, a folder removed meanwhile
                msg = f"Weights switched to bundled: {problem(exc)}"
                gr.Warning(shown_html(msg))
                values = without_checkpoint(values)
                return {
                    **{n: gr.skip() for n in CONTROL_FIELDS},
                    **(_leave_checkpoint(values) or {}),
                    "weights": BUNDLED,
                    "trained": None,
                    "status": f"⚠️ {shown(msg)}",
                    "weights_md": "",
                    "weights_show": gr.update(visible=False),
                }
        src, values = _resolved(values, weights, trained, loaded)
        if weights == TRAINED and (trained is None or (src is not None and src.weights is None)):
            if trained is None:  # the session's snapshot expired (its state's time to live)
                msg = "Weights switched to bundled: this session's snapshot of your run expired; switch again."
            else:
                diff = tw.mismatch(trained, src.config)
                msg = f"Weights switched to bundled: your run belongs to another config ({', '.join(diff[:6])})."
            gr.Info(shown_html(msg))
            src = weights_source.resolve(BUNDLED, src.config) if src is not None else None
            out = handler(values, weights=src, **kw)
            return {
                **out,
                "weights": gr.update(value=BUNDLED, choices=radio_update(src, BUNDLED, ckpt_extra)["choices"]),
                "trained": None,
                "status": f"ℹ️ {shown(msg)}",
                "weights_md": source_line(src, kw.get("text"), BUNDLED),
                "weights_show": show_button(src),
            }
        return {
            **handler(values, weights=src, **kw),
            **keep,
            "weights": radio_update(src, weights, ckpt_extra),
            "weights_md": source_line(src, kw.get("text"), weights),
            "weights_show": show_button(src),
        }

    return run
