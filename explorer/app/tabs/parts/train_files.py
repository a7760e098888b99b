"""The Train tab's files: download the trained model, upload one to continue training it.

Download writes the safetensors file and its config into a temporary folder, copies both into
Gradio's file cache (named by content, aged out by ``delete_cache``) and deletes the folder before it
returns: repeated downloads leave nothing behind. Upload checks the file's header before anything is
built: its size, the embedded config through the training door (the app's caps and budget, the
training cap on parameters: ``train_inputs.upload_config``), then the tensor names, shapes and dtypes
(``explorer.training.checkpoint``); building it holds its bytes in the server's memory pool. A refusal
is a message naming what is wrong, and keeps nothing. A loaded file restores its run's task (the
header's ``run``, checked like any input): ``restored`` sets the Task dropdown and draws that task's
probe map under the uploaded weights.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile

import gradio as gr

from explorer.app.server.gradio_compat import cache_file
from explorer.app.server.messages import shown_problem
from explorer.app.tabs.parts import train_runs
from explorer.app.tabs.parts.train_inputs import WEIGHTS, number, upload_config
from explorer.runtime.cache import release_memory
from explorer.runtime.pool import POOL
from explorer.runtime.untrusted import shown, shown_html
from explorer.training import checkpoint
from explorer.training.tasks import task_names
from models import ConfigError, ModelConfig
from models.config import CATEGORIES

MAX_UPLOAD_BYTES = 24 << 20  # the app's max_file_size: a model at the training cap is ~8 MB


def config_stem(cfg: ModelConfig) -> str:
    """The config's name in a file name: its attention, then each other choice (position, norm placement,
    ...) that differs from the default config's, ``-``-joined (``sliding_window-alibi``)."""
    default = ModelConfig()
    picked = [cfg.attention] + [
        str(getattr(cfg, c)) for c in CATEGORIES if c != "attention" and getattr(cfg, c) != getattr(default, c)
    ]
    return "-".join(re.sub(r"[^A-Za-z0-9_.]+", "_", p) for p in picked)


def download(state):
    """The run's model as ``<config>-<task>-step<N>.safetensors`` and ``.config.json`` (``config_stem``;
    or a warning)."""
    trainer = (state or {}).get("trainer")
    if trainer is None:
        gr.Warning("Nothing to download yet: train first (or upload a model).")
        return gr.update(value=None, visible=False)
    folder = tempfile.mkdtemp(prefix="train-")
    try:
        run = trainer.run_cfg.to_dict()
        with trainer.weights_lock:  # never half-way through an optimizer step
            paths = checkpoint.save(
                trainer.model,
                folder,
                trainer.cfg,
                extra={"step": trainer.step, "run": run},
                stem=f"{config_stem(trainer.cfg)}-{run['task']}-step{trainer.step}",
            )
        cached = [cache_file(p.read_bytes(), p.name)["path"] for p in paths]
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return gr.update(value=cached, visible=True)


def _int_or_zero(x) -> int:
    try:
        return max(0, int(x))
    except (TypeError, ValueError):
        return 0


def saved_run(meta: dict) -> tuple:
    """``(task, seq_len)`` of the run saved in a file's header (the Train tab's download writes it); a
    missing or invalid value (the header is the visitor's): ``(None, None)`` for that part."""
    try:
        run = json.loads(meta.get("run") or "{}")
    except (TypeError, ValueError):
        run = {}
    run = run if isinstance(run, dict) else {}
    task = run.get("task") if isinstance(run.get("task"), str) and run.get("task") in task_names() else None
    try:
        seq_len = number("seq_len", run.get("seq_len"))
    except ConfigError:
        seq_len = None
    return task, seq_len


def restored(state, weights="trained"):
    """After an upload: the Task dropdown set to the file's task, and that task's probe map under the
    uploaded weights (``gr.skip()`` for both when nothing was loaded)."""
    state = state or {}
    if state.get("uploaded") is None:
        return gr.skip(), gr.skip()
    task = state.get("uploaded_task")
    return (
        gr.skip() if task is None else gr.update(value=task),
        train_runs.uploaded_probe(state, weights if weights in WEIGHTS else "trained"),
    )


def upload(state, file):
    """Load a saved model: its config fills the config box; ▶ continues training from its weights."""
    state = dict(state or {})
    try:
        path = file if isinstance(file, str) else getattr(file, "name", None)
        if not isinstance(path, str) or not os.path.isfile(path):
            raise ConfigError("weights", type(file).__name__, "an uploaded .safetensors file")
        size = os.path.getsize(path)
        if size > MAX_UPLOAD_BYTES:
            raise ConfigError("weights", f"{size:,} bytes", f"a file of at most {MAX_UPLOAD_BYTES:,} bytes")
        # the file's bytes, the tensors read from it and the model built: about three copies
        with POOL.reserve(3 * size, "this upload", wait_s=5.0):
            cfg, model, meta = checkpoint.load(path, check=upload_config)
    except ConfigError as exc:
        release_memory()
        gr.Warning(shown_html(str(exc)))
        return state, gr.skip(), f"⚠️ **Refused:** {shown(str(exc))}"
    except Exception as exc:  # never an internal message on the page
        release_memory()
        return state, gr.skip(), f"⚠️ **Refused:** {shown_problem(exc)}"
    task, seq_len = saved_run(meta)
    state = {
        "uploaded": model,
        "uploaded_key": cfg,
        "uploaded_step": _int_or_zero(meta.get("step")),
        "uploaded_task": task,
        "uploaded_seq_len": seq_len,
    }
    on = f" on {task}" if task else ""
    return (
        state,
        json.dumps(cfg.to_dict(), indent=1),
        (
            f"Loaded a model trained for {_int_or_zero(meta.get('step'))}"
            f" steps{on}. ▶ Play continues training it with the settings "
            "above."
        ),
    )
