"""The Train tab: press play and watch the assembled model learn; reproductions one button each.

``build_train_tab(default_config=None, controls_config=None)`` must be called inside an open
``gr.Blocks()`` (and ``gr.Tab("Train")``) context; it creates the whole tab, wires its own events (api
names prefixed ``train_``) and returns a namespace of its components. The config box (``.config``,
JSON) is the model that trains. In the app, ``controls_config`` is the config on the main controls as
the page opens: the box starts with it (scaled down to the training caps), a visible line (``.source``)
says what trains and what was scaled down, and ``.synced`` remembers the controls' config the box was
written from; the app's redraws keep the box in step with the controls (``train_source.follow``).
Alone (``benchmarks.train_tab``), ``default_config`` is a zero-argument callable returning the
``ModelConfig`` the box starts from (default: ``small_config()``).

The handlers live beside this file: the run (``train_runs``: play, step, pause, reset), its files
(``train_files``: download, upload), the reproductions (``train_repro``) and the bounds of every input
(``train_inputs``). Play, Step and the reproductions are heavy jobs (``explorer.app.server.jobs``): wired
with no Gradio concurrency limit, so a flood of presses never fills the queue every event shares;
they are admitted in their own family instead (one heavy job per visitor, "busy" when the family's
slots are taken) and run at low priority beside the interactive tabs.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import gradio as gr

from explorer.app.controls import train_source
from explorer.app.controls.your_run import trained_model, trained_snapshot, trained_step
from explorer.app.tabs.contract import Landing, Tab
from explorer.app.tabs.parts import train_files, train_repro, train_runs
from explorer.app.tabs.parts.train_inputs import MAX_SEED, MAX_TRAIN_TEXT_BYTES, NUMBERS, WEIGHTS, lenient_number
from explorer.app.tabs.parts.train_runs import CAPS_TEXT
from explorer.training import reproductions
from explorer.training.reproductions import stored as stored_runs
from explorer.training.tasks import learns_in, task_names
from models import ModelConfig

__all__ = ["build_train_tab", "small_config", "trained_model", "trained_snapshot", "trained_step", "RUN_TTL_S"]


def small_config() -> ModelConfig:
    """A model that learns the tasks in a minute on two CPU cores."""
    return ModelConfig(n_layers=2, d_model=64, n_heads=4, max_len=256, position="rope")


def _number(value, label: str, field: str, elem_id: str, **kw):
    lo, hi, integer = NUMBERS[field]
    return lenient_number(
        value, label=label, precision=0 if integer else None, minimum=lo, maximum=hi, elem_id=elem_id, **kw
    )


def step_info(task: str) -> str:
    return f"{task} here: {learns_in(task)[1]}"


def task_steps(task):
    """The steps box for a newly picked task: its measured steps to learn, and what they do (a bad name: unchanged)."""
    if task not in task_names():
        return gr.skip()
    return gr.update(value=learns_in(task)[0], info=step_info(task))


# ---------------------------------------------------------------------------- layout
RUN_TTL_S = 1800  # seconds an idle session keeps its run
HEAVY_EVENT = dict(concurrency_limit=None)  # admitted by explorer.app.server.jobs, never queued by Gradio


def build_train_tab(default_config=None, controls_config=None) -> SimpleNamespace:
    """Create the Train tab's components inside the current Blocks context and wire them."""
    if controls_config is not None:  # the app: the model on the controls, within the training caps
        box, line, synced = train_source.initial(controls_config)
    else:
        box, line, synced = json.dumps((default_config or small_config)().to_dict(), indent=1), "", None
    # A run holds a model and its optimizer (up to ~32 MB at the parameter cap): an idle session's
    # run is dropped after RUN_TTL_S, so abandoned tabs do not pin memory (None = start afresh).
    state = gr.State(None, time_to_live=RUN_TTL_S)
    source = gr.Markdown(line, elem_id="train-source", visible=controls_config is not None)
    synced = gr.State(synced)  # the controls' config (JSON) the box was last written from
    # one screen (1280 x 720): the buttons, the settings in short rows and the status beside the curves
    with gr.Row(elem_id="train-top"):
        with gr.Column(scale=1, min_width=320, elem_id="train-settings"):
            with gr.Row(elem_id="train-buttons"):
                play_btn = gr.Button("▶ Play", variant="primary", elem_id="train-play", min_width=70)
                pause_btn = gr.Button("❚❚ Pause", elem_id="train-pause", min_width=70)
                step_btn = gr.Button("Step", elem_id="train-step", min_width=60)
                reset_btn = gr.Button("↺ Reset", elem_id="train-reset", min_width=70)
            status = gr.Markdown("Press ▶ Play.", elem_id="train-status")
            with gr.Row():
                task = gr.Dropdown(task_names(), value="copy", label="Task", elem_id="train-task", min_width=100)
                steps = _number(
                    learns_in("copy")[0],
                    "Steps",
                    "steps",
                    "train-steps",
                    info=step_info("copy"),
                    min_width=160,
                    scale=2,
                )
            with gr.Row():
                lr = _number(3e-3, "LR", "lr", "train-lr", min_width=70)
                warmup = _number(30, "Warm-up", "warmup", "train-warmup", min_width=70)
                batch = _number(32, "Batch", "batch_size", "train-batch", min_width=70)
                seq_len = _number(32, "Length", "seq_len", "train-len", min_width=70)
        with gr.Column(scale=1, min_width=360):
            curves = gr.Plot(train_runs.curves_figure(), label="Loss and accuracy", elem_id="train-curves")
    weights = gr.Radio(list(WEIGHTS), value="trained", label="Weights shown in the maps", elem_id="train-weights")
    attention = gr.Plot(None, label="Probe attention", elem_id="train-attention")
    grads = gr.Plot(None, label="Gradient norms", elem_id="train-grads")
    with gr.Accordion("Model and data, seed and schedule", open=False):
        gr.Markdown(
            "Train the model in the box on a task generated on the fly and watch it learn: loss, the "
            "probe's attention next to the pattern that solves the task, and gradient norms per layer. "
            "Tasks: lm is the next byte of the Python docs (or your text below); masked hides 15% of the "
            "bytes. " + CAPS_TEXT,
            elem_classes="hint",
        )
        with gr.Row():
            seed = _number(0, "Data seed", "seed", "train-seed", info=f"0 to {MAX_SEED:,}")
            schedule = gr.Radio(["cosine", "constant"], value="cosine", label="After warm-up", elem_id="train-schedule")
        config = gr.Code(box, language="json", label="Model config (JSON)", interactive=True, elem_id="train-config")
        text = gr.Textbox(
            "",
            lines=3,
            max_length=MAX_TRAIN_TEXT_BYTES,
            elem_id="train-text",
            label=f"Your text for the lm / masked tasks (empty: the Python documentation; at most "
            f"{MAX_TRAIN_TEXT_BYTES // 1024} KiB)",
        )
    with gr.Row():
        download_btn = gr.Button("Download trained model (config + safetensors)", size="sm", elem_id="train-download")
        upload_btn = gr.UploadButton(
            "Upload a trained model (.safetensors)", file_types=[".safetensors"], size="sm", elem_id="train-upload"
        )
    files = gr.File(
        label="Trained model", file_count="multiple", visible=False, interactive=False, elem_id="train-files"
    )
    with gr.Accordion("Reproductions: the source texts' results on this machine", open=False):
        with gr.Row():
            repro_name = gr.Dropdown(
                list(reproductions.REPRODUCTIONS),
                value="induction",
                label="Reproduction",
                info=train_repro.choices_info(),
                elem_id="train-repro-name",
            )
            repro_btn = gr.Button("Run live on this machine", variant="primary", elem_id="train-repro-run")
            repro_stop = gr.Button("Stop", elem_id="train-repro-stop")
        first = train_repro.show_stored("induction")  # the stored run: on the page from the first second
        repro_md = gr.Markdown(first[0], elem_id="train-repro-reading")
        repro_plot = gr.Plot(first[1], label="Result", elem_id="train-repro-plot")
        repro_slider = gr.Slider(
            **{
                "minimum": 0,
                "maximum": 1,
                "step": 1,
                "label": "Timeline: step",
                **train_repro.slider_args(stored_runs.load("induction")),
            },
            elem_id="train-repro-step",
        )
        repro_timeline = gr.Plot(first[4], label="Timeline", elem_id="train-repro-timeline")
        repro_table = gr.Dataframe(first[2], label="Table", elem_id="train-repro-table", interactive=False)
        repro_live = gr.State(None, time_to_live=3600)  # this session's last live run (the timeline's source)

    inputs = [state, config, task, steps, lr, warmup, schedule, batch, seq_len, seed, text, weights]
    outputs = [state, status, curves, attention, grads]
    play_ev = play_btn.click(
        train_runs.play, inputs, outputs, api_name="train_play", show_progress="hidden", **HEAVY_EVENT
    )
    step_ev = step_btn.click(
        train_runs.step, inputs, outputs, api_name="train_step", show_progress="hidden", **HEAVY_EVENT
    )
    # no cancels=: the press stops inside its current step and sends its last snapshot ("stopped at")
    pause_btn.click(train_runs.pause, [state], [state], api_name="train_pause", queue=False)
    reset_btn.click(
        train_runs.reset,
        [state],
        [state, status, curves, attention, grads, files],
        api_name="train_reset",
        cancels=[play_ev, step_ev],
        queue=False,
    )
    weights.change(
        train_runs.redraw,
        [state, weights],
        [curves, attention, grads],
        api_name="train_redraw",
        show_progress="hidden",
        concurrency_id="compute",
    )
    # writing a run's small files (under the training cap) is light: it never waits behind the analyses
    download_btn.click(
        train_files.download, [state], [files], api_name="train_download", concurrency_id="files", concurrency_limit=2
    )
    upload_btn.upload(
        train_files.upload,
        [state, upload_btn],
        [state, config, status],
        api_name="train_upload",
        concurrency_id="compute",
    ).then(
        train_files.restored, [state, weights], [task, attention], api_visibility="private", concurrency_id="compute"
    )
    # a task brings the steps it needs here to learn visibly, and says what they were measured to do
    task.change(task_steps, [task], [steps], api_visibility="private", queue=False)
    repro_out = [repro_md, repro_plot, repro_table, repro_slider, repro_timeline, repro_live]
    repro_btn.click(
        train_repro.run_reproduction,
        [repro_name, state],
        [state, *repro_out],
        api_name="train_reproduce",
        show_progress="minimal",
        **HEAVY_EVENT,
    )
    repro_name.change(
        train_repro.show_stored,
        [repro_name],
        repro_out,
        api_name="train_reproduction_stored",
        show_progress="hidden",
        queue=False,
    )
    repro_slider.change(
        train_repro.show_step,
        [repro_name, repro_slider, repro_live],
        [repro_timeline],
        api_name="train_reproduction_step",
        show_progress="hidden",
        trigger_mode="always_last",
        concurrency_id="compute",
    )
    repro_stop.click(train_repro.stop_reproduction, [state], [state], api_name="train_reproduce_stop", queue=False)
    return SimpleNamespace(
        state=state,
        config=config,
        source=source,
        synced=synced,
        task=task,
        steps=steps,
        lr=lr,
        warmup=warmup,
        schedule=schedule,
        batch=batch,
        seq_len=seq_len,
        seed=seed,
        text=text,
        weights=weights,
        play=play_btn,
        pause=pause_btn,
        step=step_btn,
        reset=reset_btn,
        status=status,
        curves=curves,
        attention=attention,
        grads=grads,
        download=download_btn,
        upload=upload_btn,
        files=files,
        repro_name=repro_name,
        repro_run=repro_btn,
        repro_md=repro_md,
        repro_plot=repro_plot,
        repro_table=repro_table,
        repro_slider=repro_slider,
        repro_timeline=repro_timeline,
    )


# ---------------------------------------------------------------------------- the tab (explorer.app.tabs.contract)
def build(landing: Landing) -> dict:
    """The Train tab on the controls' model (fitted to the training caps); its events are wired as it is built."""
    with gr.Tab("Train", id="train", elem_id="train-tab"):
        train = build_train_tab(controls_config=landing.cfg)
    return {
        "train_state": train.state,
        "train_config": train.config,
        "train_task": train.task,
        "train_source": train.source,
        "train_synced": train.synced,
    }


def export(scene) -> list:
    """The run's curves, probe attention and gradient norms, when the session holds a run."""
    state = scene.train_state
    if not isinstance(state, dict) or state.get("trainer") is None or state.get("snap") is None:
        return []
    curves, probe, grads = train_runs.figures(state)
    return [
        (
            f"Training run ({state['trainer'].run_cfg.task} task, step {state['snap'].step})",
            [("train-curves", curves), ("train-probe-attention", probe), ("train-gradient-norms", grads)],
        )
    ]


TAB = Tab("train", build, export=export)
