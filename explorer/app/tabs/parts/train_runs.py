"""The Train tab's run: Play, Step, Pause, Reset and the weights switch of its maps.

Per visitor: the run (model, optimizer, data generator, history) lives in the session's ``gr.State``;
nothing is module-global. A press of Play (or Step) is a heavy job of the "train" family
(``explorer.app.server.jobs``): its inputs are bounded and its config passes the training door
(``train_inputs.training_config``: caps and the memory budget of one optimizer step, from the config
alone) before anything is built; admitted, it reserves its predicted bytes in the server's memory pool
(``explorer.runtime.pool``; "busy" when the pool is held by others) and trains in a low-priority worker
thread, which builds each snapshot's figures there and hands them to the page as they come, at most
one every ``SEND_EVERY_S`` seconds (the newest; stale ones are dropped, the last one always sent), its
maps at most every ``MAPS_EVERY_S`` seconds.

Pause and Reset stop the visitor's running press through ``HEAVY.stop`` (the press checks inside every
module of its forward and backward passes, ``explorer.runtime.stopping``), as do a cancelled event, a
client that left and the ``MAX_WALL_S`` cap per press; the stopped press sends its last snapshot
("stopped at step N") and frees its slot once its thread has ended.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from contextlib import aclosing
from dataclasses import replace

import gradio as gr

from explorer.app.server.jobs import HEAVY, stream_job, visitor_of
from explorer.app.server.messages import problem, shown_problem
from explorer.app.tabs.parts.train_inputs import WEIGHTS, choice, run_config, training_config
from explorer.figures import training as plots_train
from explorer.figures.base import message_figure
from explorer.runtime.configs import as_config
from explorer.runtime.pool import POOL
from explorer.runtime.text import reads_pair
from explorer.runtime.tokens import token_label
from explorer.runtime.untrusted import shown, shown_html
from explorer.training import seq2seq as train_encdec
from explorer.training.tasks import get_task, ideal_pattern
from explorer.training.trainer import (
    MAX_BATCH_TOKENS,
    MAX_TRAIN_PARAMS,
    MAX_TRAIN_STEPS,
    MAX_WALL_S,
    PROBE_MAX_LEN,
    RunConfig,
    Trainer,
    model_probe_attention,
)
from models import ConfigError, build_model

# While a press trains, the page gets a snapshot at most every SEND_EVERY_S seconds (plus the last one):
# a browser redraws three figures per snapshot, and snapshots sent faster than it draws queue up on the
# page (the display lagging the trainer, the page's main thread busy). A snapshot not yet sent when a
# newer one is ready is dropped.
SEND_EVERY_S = 0.75
# The probe map and the gradient norms (most of a redraw's cost on the page) follow at most every
# MAPS_EVERY_S seconds; the last snapshot of a press always carries them.
MAPS_EVERY_S = 3.0

CAPS_TEXT = (
    f"Caps per run on this server: ≤ {MAX_TRAIN_PARAMS:,} parameters, ≤ {MAX_TRAIN_STEPS} steps, "
    f"batch × length ≤ {MAX_BATCH_TOKENS} tokens, ≤ {MAX_WALL_S:g} s of work per press of ▶, one "
    "run or reproduction at a time per visitor."
)


def _labels(tokens) -> list:
    return [token_label(t) for t in tokens]


def status_text(snap, note: str = "") -> str:
    pct = 100 * snap.step / snap.steps
    parts = [
        f"**step {snap.step} / {snap.steps}** ({pct:.0f}%)",
        f"held-out loss {snap.heldout_loss:.3f}",
        f"accuracy {snap.heldout_acc:.1%}",
        f"lr {snap.lr:.2e}",
        f"{snap.tokens_per_s:,.0f} tokens/s",
        f"{snap.elapsed_s:.1f} s",
    ]
    msg = " · ".join(parts)
    if snap.message:
        msg += f"\n\n■ {snap.message}."
    elif snap.done:
        msg += "\n\n✓ Finished: download the trained model below, or ↺ reset."
    return msg + (f"\n\n{note}" if note else "")


def figures(state: dict, weights: str = "trained"):
    """(curves, probe attention beside the pattern that solves the task, gradient norms) of the run."""
    trainer, snap = state.get("trainer"), state.get("snap")
    if trainer is None and state.get("uploaded") is not None:  # an uploaded model: its task's probe
        return curves_figure(), uploaded_probe(state, weights), plots_train.grad_figure(None)
    if trainer is None or snap is None:
        empty = message_figure("Press ▶ Play to start training.", "")
        return curves_figure(), empty, plots_train.grad_figure(None)
    task = trainer.run_cfg.task
    probe = snap.probe_tokens
    attention, step = snap.attention, snap.step
    if weights == "initial":
        attention, step = _initial_attention(trainer), 0
    if trainer.seq2seq:  # the probe's cross-attention (target x source), beside the alignment that solves it
        ideal, labels = train_encdec.cross_ideal(task, probe), None
    else:
        ideal, labels = ideal_pattern(task, probe), _labels(probe)
    return (
        curves_figure(trainer.history, trainer.task.chance),
        plots_train.attention_figure(attention, ideal, labels, step),
        plots_train.grad_figure(snap.grad_norms),
    )


CURVES_HEIGHT = 300  # px: beside the controls, ▶ Play and the whole curves fit a 1280 x 720 screen


def curves_figure(history=(), chance: str = ""):
    """The loss and accuracy curves at the height the tab gives them (beside its controls)."""
    return plots_train.curves_figure(list(history), chance).update_layout(height=CURVES_HEIGHT)


def _curves(state: dict):
    trainer = state["trainer"]
    return curves_figure(trainer.history, trainer.task.chance)


def _initial_attention(trainer: Trainer):
    """The probe's attention under the run's initial weights (rebuilt from the config: deterministic)."""
    return model_probe_attention(trainer.cfg, build_model(trainer.cfg), trainer.probe)


def uploaded_probe(state: dict, weights: str = "trained"):
    """The probe attention map of the uploaded model's task (the one in its file's header), beside the
    pattern that solves it; ``weights="initial"``: the same config's initial weights."""
    cfg, task = as_config(state["uploaded_key"]), state.get("uploaded_task") or "copy"
    try:
        if reads_pair(cfg):
            train_encdec.check_task(task)
        probe = get_task(task).probe(min(int(state.get("uploaded_seq_len") or 32), PROBE_MAX_LEN))
        tokens = probe.tokens[0].tolist()
        model = build_model(cfg) if weights == "initial" else state["uploaded"]
        attention = model_probe_attention(cfg, model, probe)
        if reads_pair(cfg):
            ideal, labels = train_encdec.cross_ideal(task, tokens), None
        else:
            ideal, labels = ideal_pattern(task, tokens), _labels(tokens)
    except ConfigError as exc:  # a task this model cannot read (e.g. an encoder-decoder on lm)
        return message_figure(f"No probe map for this model: {shown(str(exc))}", "")
    except Exception as exc:  # never a traceback or an internal message on the page
        return message_figure(f"No probe map for this model: {shown_problem(exc)}", "")
    step = 0 if weights == "initial" else int(state.get("uploaded_step") or 0)
    return plots_train.attention_figure(attention, ideal, labels, step)


def _key(cfg_json: str, run: RunConfig) -> str:
    """What identifies a run; ``steps`` and ``every`` are left out, so raising the steps continues it.
    The text enters as its digest (the key is kept with the session)."""
    d = run.to_dict()
    d["text"] = None if run.text is None else hashlib.sha256(run.text.encode("utf-8", "surrogatepass")).hexdigest()
    d.pop("steps"), d.pop("every")
    return json.dumps([json.loads(cfg_json), d], sort_keys=True)


def _plan(state: dict, cfg_json, run: RunConfig) -> dict:
    """Everything a press decides before it is admitted: the checked config, its predicted bytes, and
    whether it continues the session's run (``ConfigError`` for a refusal)."""
    cfg, need = training_config(cfg_json, run)
    key = _key(cfg.to_json(), run)
    trainer = state.get("trainer")
    same = trainer is not None and state.get("key") == key
    note = "Settings changed: a new run started from fresh weights." if trainer is not None and not same else ""
    return {
        "cfg": cfg,
        "need": need,
        "key": key,
        "continue": same,
        "note": note,
        "finished": same and trainer.step > 0 and run.steps <= trainer.step,
    }


def finished_text(state: dict, steps: int) -> str:
    """The status of a press that has nothing to train: the run's last summary, kept, and what to do."""
    trainer = state["trainer"]
    snap = state.get("snap") or trainer.stopped_snapshot("")
    if trainer.done:
        why = f"This run is finished ({trainer.step} of {trainer.run_cfg.steps} steps)"
    else:
        why = f"This run has done {trainer.step} steps and Steps is {steps}"
    return status_text(
        snap,
        f"ℹ️ {why}: raise Steps above {trainer.step} to continue it, or ↺ Reset to train "
        "again from the initial weights.",
    )


def _start(state: dict, plan: dict, run: RunConfig) -> tuple:
    """The run a press trains (the session's, continued, or a fresh one) -> ``(trainer, note)``."""
    if plan["continue"]:
        trainer = state["trainer"]
        if run.steps != trainer.run_cfg.steps:  # continue with the new total (the schedule stretches)
            trainer.run_cfg = replace(trainer.run_cfg, steps=run.steps, every=run.every)
        return trainer, ""
    cfg = plan["cfg"]
    model = state.pop("uploaded", None) if state.get("uploaded_key") == cfg else None
    trainer = Trainer(cfg, run, model=model)
    state.update(trainer=trainer, key=plan["key"], snap=None)
    state.pop("uploaded_key", None), state.pop("uploaded_step", None)
    return trainer, "Continuing from the uploaded weights (fresh optimizer)." if model is not None else plan["note"]


def _refusal(state, message: str) -> tuple:
    return state, f"⚠️ **{shown(message)}**\n\n{CAPS_TEXT}", gr.skip(), gr.skip(), gr.skip()


async def press(
    state,
    cfg_json,
    task,
    steps,
    lr,
    warmup,
    schedule,
    batch,
    seq_len,
    seed,
    text,
    weights,
    request=None,
    one_step: bool = False,
):
    """Async generator of ``(state, status, curves, attention, gradient norms)``: the first right away,
    then one per snapshot of the press (see the module docstring)."""
    state = dict(state or {})
    try:
        run = run_config(task, steps, lr, warmup, schedule, batch, seq_len, seed, text)
        weights = choice("weights", weights, WEIGHTS)
        plan = _plan(state, cfg_json, run)
    except ConfigError as exc:
        gr.Warning(shown_html(str(exc)))
        yield _refusal(state, str(exc))
        return
    if plan["finished"]:  # nothing to train: the summary stays, with what would continue the run
        yield state, finished_text(state, run.steps), gr.skip(), gr.skip(), gr.skip()
        return

    latest, taken = [(0, None)], [0]  # (number, page answer) of the newest snapshot; the number the page took

    def work(should_stop, emit):
        with POOL.reserve(plan["need"], "this training run", wait_s=0):
            trainer, note = _start(state, plan, run)
            sent = maps_sent = -math.inf
            pending = None

            def send(snap, last: bool):  # figures are built for the snapshots the page gets, no others
                nonlocal maps_sent
                now = time.monotonic()
                if last or now - maps_sent >= MAPS_EVERY_S:
                    curves, attention, grads = figures(state, weights)
                    maps_sent = now
                else:  # the curves move; the maps (the page's costliest redraw) wait for their turn
                    curves, attention, grads = _curves(state), gr.skip(), gr.skip()
                    number, answer = latest[0]
                    if number > taken[0] and not isinstance(answer[3], dict):  # maps the page has not taken: kept
                        attention, grads = answer[3], answer[4]
                latest[0] = (latest[0][0] + 1, (state, status_text(snap, note), curves, attention, grads))
                emit(latest[0][0])
                return time.monotonic()

            for snap in trainer.run(
                max_steps=1 if one_step else None,
                stop=should_stop,
                max_wall_s=MAX_WALL_S,
                every=1 if one_step else None,
            ):
                state["snap"] = snap
                if snap.message and "cap" in snap.message:
                    gr.Info(snap.message)
                final = bool(snap.done or snap.message)
                if final or time.monotonic() - sent >= SEND_EVERY_S:
                    sent, pending = send(snap, final), None
                else:
                    pending = snap  # sent at the end if nothing newer is
            if pending is not None:
                send(pending, True)

    first = (state, "⏳ Training: the first evaluation is on its way …", gr.skip(), gr.skip(), gr.skip())
    try:
        async with aclosing(stream_job("train", request, work, first=first)) as outs:
            async for out in outs:
                if isinstance(out, int):  # a snapshot's number: only the newest is sent, older ones are stale
                    number, answer = latest[0]
                    if out < number:
                        continue
                    taken[0], out = number, answer
                yield out
    except (ConfigError, FloatingPointError) as exc:  # refused (busy, a task that does not fit) or diverged
        gr.Warning(shown_html(str(exc)))
        yield _refusal(state, str(exc))
    except Exception as exc:  # never a traceback or an internal message on the page
        yield _refusal(state, problem(exc))


async def play(
    state, cfg_json, task, steps, lr, warmup, schedule, batch, seq_len, seed, text, weights, request: gr.Request = None
):
    """▶ Play: train to the run's last step (or the cap per press)."""
    async with aclosing(
        press(state, cfg_json, task, steps, lr, warmup, schedule, batch, seq_len, seed, text, weights, request)
    ) as outs:
        async for out in outs:
            yield out


async def step(
    state, cfg_json, task, steps, lr, warmup, schedule, batch, seq_len, seed, text, weights, request: gr.Request = None
):
    """Step: one optimizer step, then a snapshot."""
    async with aclosing(
        press(
            state,
            cfg_json,
            task,
            steps,
            lr,
            warmup,
            schedule,
            batch,
            seq_len,
            seed,
            text,
            weights,
            request,
            one_step=True,
        )
    ) as outs:
        async for out in outs:
            yield out


def pause(state, request: gr.Request = None):
    """Stop the visitor's running press (inside its current step); it sends its last snapshot."""
    HEAVY.stop(visitor_of(request), {"train"})
    return state


def reset(state, request: gr.Request = None):
    """Stop the visitor's press and forget the run (the next ▶ starts from the initial weights)."""
    HEAVY.stop(visitor_of(request), {"train"})
    curves, att, grads = figures({})
    return {}, "↺ Reset: ▶ Play starts a fresh run.", curves, att, grads, gr.update(value=None, visible=False)


def redraw(state, weights):
    """The maps again, with the trained or the initial weights."""
    try:
        weights = choice("weights", weights, WEIGHTS)
    except ConfigError:
        weights = "trained"
    return figures(state or {}, weights)
