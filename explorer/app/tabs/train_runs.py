"""The Train tab's run: Play, Step, Pause, Reset and the weights switch of its maps.

Per visitor: the run (model, optimizer, data generator, history) lives in the session's ``gr.State``;
nothing is module-global. A press of Play (or Step) is a heavy job of the "train" family
(``explorer.app.jobs``): its inputs are bounded and its config passes the training door
(``train_inputs.training_config``: caps and the memory budget of one optimizer step, from the config
alone) before anything is built; admitted, it reserves its predicted bytes in the server's memory pool
(``explorer.runtime.pool``; "busy" when the pool is held by others) and trains in a low-priority worker
thread, which builds each snapshot's figures there and hands them to the page as they come.

Pause and Reset stop the visitor's running press through ``HEAVY.stop`` (the press checks inside every
module of its forward and backward passes, ``explorer.runtime.stopping``), as do a cancelled event, a
client that left and the ``MAX_WALL_S`` cap per press; the stopped press sends its last snapshot
("stopped at step N") and frees its slot once its thread has ended.
"""
from __future__ import annotations

import hashlib
import json
from contextlib import aclosing
from dataclasses import replace

import gradio as gr
import torch

from explorer.analysis import weights as trained_weights
from explorer.app.jobs import HEAVY, stream_job, visitor_of
from explorer.app.messages import problem
from explorer.app.tabs.train_inputs import WEIGHTS, choice, run_config, training_config
from explorer.figures import training as plots_train
from explorer.figures.base import message_figure
from explorer.runtime.configs import as_config
from explorer.runtime.pool import POOL
from explorer.runtime.tokens import token_label
from explorer.runtime.untrusted import shown, shown_html
from explorer.training import seq2seq as train_encdec
from explorer.training.tasks import ideal_pattern, model_input
from explorer.training.trainer import (
    MAX_BATCH_TOKENS,
    MAX_TRAIN_PARAMS,
    MAX_TRAIN_STEPS,
    MAX_WALL_S,
    RunConfig,
    Trainer,
    stack_attention,
)
from models import ConfigError, build_model

CAPS_TEXT = (f"Caps per run on this server: ≤ {MAX_TRAIN_PARAMS:,} parameters, ≤ {MAX_TRAIN_STEPS} steps, "
             f"batch × length ≤ {MAX_BATCH_TOKENS} tokens, ≤ {MAX_WALL_S:g} s of work per press of ▶, one "
             "run or reproduction at a time per visitor.")


def _labels(tokens) -> list:
    return [token_label(t) for t in tokens]


def status_text(snap, note: str = "") -> str:
    pct = 100 * snap.step / snap.steps
    parts = [f"**step {snap.step} / {snap.steps}** ({pct:.0f}%)", f"held-out loss {snap.heldout_loss:.3f}",
             f"accuracy {snap.heldout_acc:.1%}", f"lr {snap.lr:.2e}", f"{snap.tokens_per_s:,.0f} tokens/s",
             f"{snap.elapsed_s:.1f} s"]
    msg = " · ".join(parts)
    if snap.message:
        msg += f"\n\n■ {snap.message}."
    elif snap.done:
        msg += "\n\n✓ Finished: download the trained model below, or ↺ reset."
    return msg + (f"\n\n{note}" if note else "")


def figures(state: dict, weights: str = "trained"):
    """(curves, probe attention beside the pattern that solves the task, gradient norms) of the run."""
    trainer, snap = state.get("trainer"), state.get("snap")
    if trainer is None or snap is None:
        empty = message_figure("Press ▶ Play to start training.", "")
        return plots_train.curves_figure([]), empty, plots_train.grad_figure(None)
    task = trainer.run_cfg.task
    probe = snap.probe_tokens
    attention, step = snap.attention, snap.step
    if weights == "initial":
        attention, step = _initial_attention(trainer), 0
    if trainer.seq2seq:  # the probe's cross-attention (target x source), beside the alignment that solves it
        ideal, labels = train_encdec.cross_ideal(task, probe), None
    else:
        ideal, labels = ideal_pattern(task, probe), _labels(probe)
    return (plots_train.curves_figure(trainer.history, trainer.task.chance),
            plots_train.attention_figure(attention, ideal, labels, step),
            plots_train.grad_figure(snap.grad_norms))


def _initial_attention(trainer: Trainer):
    """The probe's attention under the run's initial weights (rebuilt from the config: deterministic)."""
    model = build_model(trainer.cfg).eval()
    with torch.no_grad():
        if trainer.seq2seq:
            return stack_attention(train_encdec.forward(model, trainer.probe, True)[0].cross_attentions)
        out = model(model_input(trainer.probe, trainer.cfg.causal), return_attention=True)
    return stack_attention(out.attentions)


def _key(cfg_json: str, run: RunConfig) -> str:
    """What identifies a run; ``steps`` and ``every`` are left out, so raising the steps continues it.
    The text enters as its digest (the key is kept with the session)."""
    d = run.to_dict()
    d["text"] = None if run.text is None else hashlib.sha256(run.text.encode("utf-8", "surrogatepass")).hexdigest()
    d.pop("steps"), d.pop("every")
    return json.dumps([json.loads(cfg_json), d], sort_keys=True)


def trained_model(state):
    """``(ModelConfig, model in eval mode)`` of this session's run (or its uploaded model), else None:
    what the other tabs draw when their "weights: trained" switch is on (pass ``tab.state``)."""
    state = state or {}
    if state.get("trainer") is not None:
        return state["trainer"].cfg, state["trainer"].model.eval()
    if state.get("uploaded") is not None:
        return as_config(state["uploaded_key"]), state["uploaded"].eval()
    return None


def trained_snapshot(state):
    """A ``TrainedWeights`` copy of this session's run (taken between optimizer steps, so a run that
    is training meanwhile is never caught half-updated) or of its uploaded model; None without one."""
    state = state or {}
    trainer = state.get("trainer")
    if trainer is not None:
        with trainer.weights_lock:
            return trained_weights.snapshot(trainer.cfg, trainer.model, trainer.step)
    if state.get("uploaded") is not None:
        return trained_weights.snapshot(as_config(state["uploaded_key"]), state["uploaded"], trained_step(state))
    return None


def trained_step(state) -> int:
    """Optimizer steps behind ``trained_model(state)``: the run's, or the uploaded file's."""
    state = state or {}
    if state.get("trainer") is not None:
        return int(state["trainer"].step)
    return int(state.get("uploaded_step") or 0)


def _plan(state: dict, cfg_json, run: RunConfig) -> dict:
    """Everything a press decides before it is admitted: the checked config, its predicted bytes, and
    whether it continues the session's run (``ConfigError`` for a refusal)."""
    cfg, need = training_config(cfg_json, run)
    key = _key(cfg.to_json(), run)
    trainer = state.get("trainer")
    same = trainer is not None and state.get("key") == key
    if same and trainer.done and run.steps <= trainer.step:
        raise ConfigError("steps", run.steps, f"more than the {trainer.step} steps this run has done (or ↺ Reset "
                          "to train again from the initial weights)")
    note = "Settings changed: a new run started from fresh weights." if trainer is not None and not same else ""
    return {"cfg": cfg, "need": need, "key": key, "continue": same, "note": note}


def _start(state: dict, plan: dict, run: RunConfig) -> tuple:
    """The run a press trains (the session's, continued, or a fresh one) -> ``(trainer, note)``."""
    if plan["continue"]:
        trainer = state["trainer"]
        if run.steps != trainer.run_cfg.steps:  # continue with the new total (the schedule stretches)
            trainer.run_cfg = replace(trainer.run_cfg, steps=run.steps, every=run.every)
        return trainer, ""
    cfg = plan["cfg"]
    model = state.pop("uploaded", None) if state.get("uploaded_key") == cfg.to_json() else None
    trainer = Trainer(cfg, run, model=model)
    state.update(trainer=trainer, key=plan["key"], snap=None)
    state.pop("uploaded_key", None), state.pop("uploaded_step", None)
    return trainer, "Continuing from the uploaded weights (fresh optimizer)." if model is not None else plan["note"]


def _refusal(state, message: str) -> tuple:
    return state, f"⚠️ **{shown(message)}**\n\n{CAPS_TEXT}", gr.skip(), gr.skip(), gr.skip()


async def press(state, cfg_json, task, steps, lr, warmup, schedule, batch, seq_len, seed, text, weights,
                request=None, one_step: bool = False):
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

    def work(should_stop, emit):
        with POOL.reserve(plan["need"], "this training run", wait_s=0):
            trainer, note = _start(state, plan, run)
            for snap in trainer.run(max_steps=1 if one_step else None, stop=should_stop, max_wall_s=MAX_WALL_S,
                                    every=1 if one_step else None):
                state["snap"] = snap
                if snap.message and "cap" in snap.message:
                    gr.Info(snap.message)
                emit((state, status_text(snap, note), *figures(state, weights)))

    first = (state, "⏳ Training: the first evaluation is on its way …", gr.skip(), gr.skip(), gr.skip())
    try:
        async with aclosing(stream_job("train", request, work, first=first)) as outs:
            async for out in outs:
                yield out
    except (ConfigError, FloatingPointError) as exc:  # refused (busy, a task that does not fit) or diverged
        gr.Warning(shown_html(str(exc)))
        yield _refusal(state, str(exc))
    except Exception as exc:  # never a traceback or an internal message on the page
        yield _refusal(state, problem(exc))


async def play(state, cfg_json, task, steps, lr, warmup, schedule, batch, seq_len, seed, text, weights,
               request: gr.Request = None):
    """▶ Play: train to the run's last step (or the cap per press)."""
    async with aclosing(press(state, cfg_json, task, steps, lr, warmup, schedule, batch, seq_len, seed, text,
                              weights, request)) as outs:
        async for out in outs:
            yield out


async def step(state, cfg_json, task, steps, lr, warmup, schedule, batch, seq_len, seed, text, weights,
               request: gr.Request = None):
    """Step: one optimizer step, then a snapshot."""
    async with aclosing(press(state, cfg_json, task, steps, lr, warmup, schedule, batch, seq_len, seed, text,
                              weights, request, one_step=True)) as outs:
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
