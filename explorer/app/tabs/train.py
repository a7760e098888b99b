"""The Train tab: press play and watch the assembled model learn; reproductions one button each.

``build_train_tab(default_config=None)`` must be called inside an open ``gr.Blocks()`` (and
``gr.Tab("Train")``) context; it creates the whole tab, wires its own events (api names prefixed
``train_``) and returns a namespace of its components. ``default_config`` is a zero-argument
callable returning the ``ModelConfig`` the tab starts from (default: ``small_config()``); the
config box (``.config``, JSON) is the model that trains, so the app can keep it in sync with the
main controls by writing the JSON of the current config into it.

Per user: the run (model, optimizer, data RNG, history) lives in this session's ``gr.State``;
nothing is module-global. Play streams snapshots from ``Trainer.run`` (a generator); Pause sets
the run's stop flag (checked between optimizer steps) and cancels the streaming event; caps on
model size, steps, batch x length and wall time per press are those of ``explorer.training.trainer``.
"""
from __future__ import annotations

import json
import logging
import queue
import tempfile
import threading
from dataclasses import replace
from types import SimpleNamespace

import gradio as gr
import pandas as pd

from explorer.analysis import weights as trained_weights
from explorer.figures import training as plots_train
from explorer.figures.base import message_figure
from explorer.runtime.configs import as_config
from models import build_model
from explorer.runtime.tokens import token_label
from explorer.training import checkpoint, reproductions
from explorer.training import seq2seq as train_encdec
from explorer.training.tasks import ideal_pattern, model_input, task_names
from explorer.training.trainer import (
    MAX_BATCH_TOKENS,
    MAX_TRAIN_PARAMS,
    MAX_TRAIN_STEPS,
    MAX_WALL_S,
    RunConfig,
    Trainer,
    check_caps,
    stack_attention,
)
from models import ConfigError, ModelConfig

log = logging.getLogger(__name__)
CAPS_TEXT = (f"Caps per run on this server: ≤ {MAX_TRAIN_PARAMS:,} parameters, ≤ {MAX_TRAIN_STEPS} steps, "
             f"batch × length ≤ {MAX_BATCH_TOKENS} tokens, ≤ {MAX_WALL_S:g} s of work per press of ▶.")


def small_config() -> ModelConfig:
    """A model that learns the tasks in a minute on two CPU cores."""
    return ModelConfig(n_layers=2, d_model=64, n_heads=4, max_len=256, position="rope")


def _run_config(task, steps, lr, warmup, schedule, batch, seq_len, seed, text) -> RunConfig:
    steps = int(steps)
    return RunConfig(task=task, steps=steps, lr=float(lr), warmup=int(warmup), schedule=schedule,
                     batch_size=int(batch), seq_len=int(seq_len), seed=int(seed), every=max(5, steps // 40),
                     text=text if task in ("lm", "masked") and str(text or "").strip() else None)


def _labels(tokens) -> list:
    return [token_label(t) for t in tokens]


def _status(trainer: Trainer, snap, note: str = "") -> str:
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


def _figures(state: dict, weights: str = "trained"):
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
    import torch
    with torch.no_grad():
        if trainer.seq2seq:
            return stack_attention(train_encdec.forward(model, trainer.probe, True)[0].cross_attentions)
        out = model(model_input(trainer.probe, trainer.cfg.causal), return_attention=True)
    return stack_attention(out.attentions)


def _key(cfg_json: str, run: RunConfig) -> str:
    """What identifies a run; ``steps`` and ``every`` are left out, so raising the steps continues it."""
    d = {**run.to_dict(), "text": run.text}
    d.pop("steps"), d.pop("every")
    return json.dumps([json.loads(cfg_json), d], sort_keys=True)


def _trainer_for(state: dict, cfg_json: str, run: RunConfig) -> tuple:
    """The session's run if its settings are unchanged, else a fresh one; ``(state, note)``."""
    cfg = check_caps(as_config(cfg_json), run)
    key = _key(cfg.to_json(), run)
    if state.get("trainer") is not None and state.get("key") == key:
        trainer = state["trainer"]
        if run.steps != trainer.run_cfg.steps:  # continue with the new total (the schedule stretches)
            trainer.run_cfg = replace(trainer.run_cfg, steps=run.steps, every=run.every)
        if trainer.done:
            raise ConfigError("steps", run.steps, f"more than the {trainer.step} steps this run has done (or ↺ Reset "
                              "to train again from the initial weights)")
        return state, ""
    note = ""
    if state.get("trainer") is not None and state.get("key") != key:
        note = "Settings changed: a new run started from fresh weights."
    model = state.pop("uploaded", None) if state.get("uploaded_key") == cfg.to_json() else None
    trainer = Trainer(cfg, run, model=model)
    if model is not None:
        note = "Continuing from the uploaded weights (fresh optimizer)."
    return {**state, "trainer": trainer, "key": key, "snap": None, "stop": threading.Event()}, note


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


def _int_or_zero(x) -> int:
    try:
        return max(0, int(x))
    except (TypeError, ValueError):
        return 0


# ---------------------------------------------------------------------------- handlers
def play(state, cfg_json, task, steps, lr, warmup, schedule, batch, seq_len, seed, text, weights, one_step=False):
    """Generator: (state, status, curves, attention, grads) after every snapshot."""
    state = dict(state or {})
    try:
        run = _run_config(task, steps, lr, warmup, schedule, batch, seq_len, seed, text)
        state, note = _trainer_for(state, cfg_json, run)
    except ConfigError as e:
        gr.Warning(str(e))
        yield state, f"⚠️ **{e}**\n\n{CAPS_TEXT}", gr.skip(), gr.skip(), gr.skip()
        return
    trainer, stop = state["trainer"], state["stop"]
    stop.clear()
    try:
        for snap in trainer.run(max_steps=1 if one_step else None, stop=stop.is_set, max_wall_s=MAX_WALL_S,
                                every=1 if one_step else None):
            state["snap"] = snap
            curves, att, grads = _figures(state, weights)
            if snap.message and "cap" in snap.message:
                gr.Info(snap.message)
            yield state, _status(trainer, snap, note), curves, att, grads
    except (ConfigError, FloatingPointError) as e:
        gr.Warning(str(e))
        yield state, f"⚠️ **{e}**", gr.skip(), gr.skip(), gr.skip()
    except Exception as e:  # never a traceback on the page
        log.exception("training failed")
        yield state, f"⚠️ Training failed ({type(e).__name__}: {str(e)[:200]}).", gr.skip(), gr.skip(), gr.skip()


def pause(state):
    """Set the run's stop flag: the training loop stops before its next optimizer step."""
    if state and state.get("stop") is not None:
        state["stop"].set()
    return state


def reset(state, cfg_json):
    """Forget the run (the next ▶ starts from the initial weights)."""
    if state and state.get("stop") is not None:
        state["stop"].set()
    curves, att, grads = _figures({})
    return {}, "↺ Reset: ▶ Play starts a fresh run.", curves, att, grads, gr.update(value=None, visible=False)


def redraw(state, weights):
    return _figures(state or {}, weights)


def download(state):
    trainer = (state or {}).get("trainer")
    if trainer is None:
        gr.Warning("Nothing to download yet: train first (or upload a model).")
        return gr.update(value=None, visible=False)
    out = tempfile.mkdtemp(prefix="train-")
    run = trainer.run_cfg.to_dict()
    paths = checkpoint.save(trainer.model, out, trainer.cfg, extra={"step": trainer.step, "run": run},
                            stem=f"{trainer.cfg.attention}-{run['task']}-step{trainer.step}")
    return gr.update(value=[str(p) for p in paths], visible=True)


def upload(state, file):
    """Load a saved model: its config fills the config box; ▶ continues training from its weights."""
    state = dict(state or {})
    try:
        path = file if isinstance(file, str) else getattr(file, "name", file)
        cfg, model, meta = checkpoint.load(path)
    except ConfigError as e:
        gr.Warning(str(e))
        return state, gr.skip(), f"⚠️ **Refused:** {e}"
    if state.get("stop") is not None:
        state["stop"].set()
    state = {"uploaded": model, "uploaded_key": cfg.to_json(), "uploaded_step": _int_or_zero(meta.get("step"))}
    return state, json.dumps(cfg.to_dict(), indent=1), (f"Loaded a model trained for {meta.get('step', '?')} steps. "
                                                       "▶ Play continues training it with the settings above.")


def run_reproduction(name, state):
    """Generator: streams the reproduction's progress, then its figure, table and reading."""
    state = dict(state or {})
    cancel = threading.Event()
    state["repro_stop"] = cancel
    messages: queue.Queue = queue.Queue()
    box = {}

    def progress(msg):
        if cancel.is_set():
            raise InterruptedError("stopped")
        messages.put(msg)

    def work():
        try:
            box["result"] = reproductions.run(name, progress=progress)
        except InterruptedError:
            box["error"] = "stopped"
        except Exception as e:  # reported on the page, logged
            log.exception("reproduction failed")
            box["error"] = f"{type(e).__name__}: {str(e)[:200]}"

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    last = f"Running **{name}** … (about 1-3 minutes on two CPU cores)"
    yield state, last, gr.skip(), gr.skip()
    try:
        while thread.is_alive() or not messages.empty():
            try:
                last = messages.get(timeout=0.5)
                yield state, f"Running **{name}** … {last}", gr.skip(), gr.skip()
            except queue.Empty:
                continue
    finally:
        if thread.is_alive():  # the event was cancelled: stop the work at its next progress report
            cancel.set()
    if "error" in box:
        yield state, f"⚠️ {name}: {box['error']}", gr.skip(), gr.skip()
        return
    result = box["result"]
    mod = reproductions.REPRODUCTIONS[name]
    table = pd.DataFrame(mod.table_rows(result), columns=mod.COLUMNS)
    text = (f"**{mod.TITLE}** · {result['wall_s']:.0f} s on this machine\n\n{result['reading']}\n\n"
            + "\n\n".join(f"`{line}`" for line in mod.extra_lines(result)))
    yield state, text, plots_train.repro_figure(result), table


def stop_reproduction(state):
    if state and state.get("repro_stop") is not None:
        state["repro_stop"].set()
    return state


# ---------------------------------------------------------------------------- layout
RUN_TTL_S = 1800  # seconds an idle session keeps its run

def build_train_tab(default_config=None) -> SimpleNamespace:
    """Create the Train tab's components inside the current Blocks context and wire them."""
    cfg = (default_config or small_config)()
    # A run holds a model and its optimizer (up to ~32 MB at the parameter cap): an idle session's
    # run is dropped after RUN_TTL_S, so abandoned tabs do not pin memory (None = start afresh).
    state = gr.State(None, time_to_live=RUN_TTL_S)
    gr.Markdown("Train the model in the box on a task generated on the fly and watch it learn: loss, the probe's "
                "attention next to the pattern that solves the task, and gradient norms per layer. "
                + CAPS_TEXT, elem_classes="hint")
    with gr.Row():
        task = gr.Dropdown(task_names(), value="copy", label="Task", elem_id="train-task",
                           info="lm: next byte of the Python docs (or your text); masked: 15% of bytes hidden")
        steps = gr.Number(300, label="Steps", precision=0, minimum=1, maximum=MAX_TRAIN_STEPS, elem_id="train-steps")
        lr = gr.Number(3e-3, label="Learning rate", minimum=1e-6, maximum=1.0, elem_id="train-lr")
        warmup = gr.Number(30, label="Warm-up steps", precision=0, minimum=0, elem_id="train-warmup")
        schedule = gr.Radio(["cosine", "constant"], value="cosine", label="After warm-up", elem_id="train-schedule")
    with gr.Row():
        batch = gr.Number(32, label="Batch size", precision=0, minimum=1, elem_id="train-batch")
        seq_len = gr.Number(32, label="Sequence length", precision=0, minimum=8, elem_id="train-len")
        seed = gr.Number(0, label="Data seed", precision=0, minimum=0, elem_id="train-seed")
        weights = gr.Radio(["trained", "initial"], value="trained", label="Weights shown in the maps",
                           elem_id="train-weights")
    with gr.Row():
        play_btn = gr.Button("▶ Play", variant="primary", elem_id="train-play")
        pause_btn = gr.Button("❚❚ Pause", elem_id="train-pause")
        step_btn = gr.Button("Step", elem_id="train-step")
        reset_btn = gr.Button("↺ Reset", elem_id="train-reset")
    status = gr.Markdown("Press ▶ Play.", elem_id="train-status")
    curves = gr.Plot(plots_train.curves_figure([]), label="Loss and accuracy", elem_id="train-curves")
    attention = gr.Plot(None, label="Probe attention", elem_id="train-attention")
    grads = gr.Plot(None, label="Gradient norms", elem_id="train-grads")
    with gr.Accordion("Model and data", open=False):
        config = gr.Code(json.dumps(cfg.to_dict(), indent=1), language="json", label="Model config (JSON)",
                         interactive=True, elem_id="train-config")
        text = gr.Textbox("", lines=3, label="Your text for the lm / masked tasks (empty: the Python documentation)",
                          elem_id="train-text")
    with gr.Row():
        download_btn = gr.Button("Download trained model (config + safetensors)", size="sm", elem_id="train-download")
        upload_btn = gr.UploadButton("Upload a trained model (.safetensors)", file_types=[".safetensors"], size="sm",
                                     elem_id="train-upload")
    files = gr.File(label="Trained model", file_count="multiple", visible=False, interactive=False,
                    elem_id="train-files")
    with gr.Accordion("Reproductions: the source texts' results on this machine", open=False):
        with gr.Row():
            repro_name = gr.Dropdown(list(reproductions.REPRODUCTIONS), value="induction", label="Reproduction",
                                     elem_id="train-repro-name")
            repro_btn = gr.Button("Run", variant="primary", elem_id="train-repro-run")
            repro_stop = gr.Button("Stop", elem_id="train-repro-stop")
        repro_md = gr.Markdown("", elem_id="train-repro-reading")
        repro_plot = gr.Plot(None, label="Result", elem_id="train-repro-plot")
        repro_table = gr.Dataframe(None, label="Table", elem_id="train-repro-table", interactive=False)

    inputs = [state, config, task, steps, lr, warmup, schedule, batch, seq_len, seed, text, weights]
    outputs = [state, status, curves, attention, grads]
    # at most two trainings or reproductions at once on the server: each uses one core
    play_ev = play_btn.click(play, inputs, outputs, api_name="train_play", concurrency_id="train",
                             concurrency_limit=2, show_progress="hidden")

    def one_step(*a):
        yield from play(*a, one_step=True)

    step_ev = step_btn.click(one_step, inputs, outputs, api_name="train_step", concurrency_id="train",
                             concurrency_limit=2, show_progress="hidden")
    # no cancels=: the loop sees the flag before its next step and sends its last snapshot ("stopped at")
    pause_btn.click(pause, [state], [state], api_name="train_pause", queue=False)
    reset_btn.click(reset, [state, config], [state, status, curves, attention, grads, files], api_name="train_reset",
                    cancels=[play_ev, step_ev])
    weights.change(redraw, [state, weights], [curves, attention, grads], api_name="train_redraw",
                   show_progress="hidden")
    download_btn.click(download, [state], [files], api_name="train_download")
    upload_btn.upload(upload, [state, upload_btn], [state, config, status], api_name="train_upload")
    repro_btn.click(run_reproduction, [repro_name, state], [state, repro_md, repro_plot, repro_table],
                               api_name="train_reproduce", concurrency_id="train", concurrency_limit=2,
                               show_progress="minimal")
    repro_stop.click(stop_reproduction, [state], [state], api_name="train_reproduce_stop", queue=False)
    return SimpleNamespace(state=state, config=config, task=task, steps=steps, lr=lr, warmup=warmup,
                           schedule=schedule, batch=batch, seq_len=seq_len, seed=seed, text=text, weights=weights,
                           play=play_btn, pause=pause_btn, step=step_btn, reset=reset_btn, status=status, curves=curves,
                           attention=attention, grads=grads, download=download_btn, upload=upload_btn, files=files,
                           repro_name=repro_name, repro_run=repro_btn, repro_md=repro_md, repro_plot=repro_plot,
                           repro_table=repro_table)
