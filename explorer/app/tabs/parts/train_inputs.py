"""The Train tab's inputs, bounded: every value a visitor or an API call sends is checked here.

Gradio's own checks of a number box (type, bounds) fail with a message that names no field, so the
tab's number boxes are ``lenient_number``-s: the raw value reaches ``run_config``, which refuses anything
but a finite number within the field's bounds with a ``ConfigError`` naming the field and the bounds.
The text of the ``lm`` / ``masked`` tasks is capped at ``MAX_TRAIN_TEXT_BYTES`` (a 50 MB text would
otherwise be kept with the session's run); choices (task, schedule, weights, reproduction) must be
among the offered ones. Refused values are echoed truncated (``explorer.runtime.untrusted``).

``training_config(source, run)`` is the door of a model that trains: the app's door (caps, validation,
the interactive budget), the training caps (parameters, steps, tokens per batch) and the memory budget
of one optimizer step of the run's batch, all from the config alone, before anything is allocated.
``upload_config(cfg)`` applies the same to the config in an uploaded file's header.
"""

from __future__ import annotations

import math

import gradio as gr

from explorer.runtime import budget
from explorer.runtime.configs import app_config
from explorer.runtime.untrusted import truncate
from explorer.training.tasks import task_names
from explorer.training.trainer import (
    MAX_BATCH_TOKENS,
    MAX_TRAIN_PARAMS,
    MAX_TRAIN_STEPS,
    SCHEDULES,
    RunConfig,
    check_caps,
)
from models import ConfigError, ModelConfig

MAX_TRAIN_TEXT_BYTES = 512 * 1024  # a corpus as long as the Python documentation the lm task uses by default
MAX_SEED = 2**31 - 1
WEIGHTS = ("trained", "initial")
# field: (lowest, highest, integer only?)
NUMBERS = {
    "steps": (1, MAX_TRAIN_STEPS, True),
    "lr": (1e-6, 1.0, False),
    "warmup": (0, MAX_TRAIN_STEPS, True),
    "batch_size": (1, MAX_BATCH_TOKENS // 8, True),
    "seq_len": (8, MAX_BATCH_TOKENS, True),
    "seed": (0, MAX_SEED, True),
}


def lenient_number(value, **kw) -> gr.Number:
    """A number box whose value reaches the handler as sent (no rounding, no bound check by Gradio), so
    the handler's check can name the field; the page still shows ``minimum`` / ``maximum``. The
    instance's ``preprocess`` is replaced, not the class subclassed: Gradio writes a ``.pyi`` interface
    file beside the source of every component subclass it sees."""
    box = gr.Number(value, **kw)
    box.preprocess = lambda payload: payload
    return box


def number(field: str, value):
    """``value`` as the field's number (int or float) within its bounds, else ``ConfigError``."""
    lo, hi, integer = NUMBERS[field]
    kind = "an integer" if integer else "a number"
    valid = f"{kind} from {lo:g} to {hi:g}"
    if isinstance(value, bool) or value is None:
        raise ConfigError(field, truncate(value, 40), valid)
    if isinstance(value, str):
        try:
            value = float(value.strip()[:40])
        except ValueError:
            raise ConfigError(field, truncate(value, 40), valid) from None
    if not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigError(field, truncate(value, 40), valid)
    if integer:
        if value != int(value):
            raise ConfigError(field, value, valid)
        value = int(value)
    if not lo <= value <= hi:
        raise ConfigError(field, value, valid)
    return value


def choice(field: str, value, valid) -> str:
    """``value`` if it is one of ``valid`` (strings), else ``ConfigError`` listing them."""
    if not isinstance(value, str) or value not in valid:
        raise ConfigError(field, truncate(value, 60), f"one of {list(valid)}")
    return value


def corpus(task: str, text) -> str | None:
    """The text the lm / masked tasks train on (None: the Python documentation), bounded."""
    if text is None:
        return None
    if not isinstance(text, str):
        raise ConfigError("text", type(text).__name__, "a string")
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > MAX_TRAIN_TEXT_BYTES:
        raise ConfigError(
            "text",
            f"<{size:,} bytes>",
            f"a text of at most {MAX_TRAIN_TEXT_BYTES:,} bytes "
            "(about the size of the Python documentation the lm task reads by default)",
        )
    return text if task in ("lm", "lm_repeat", "masked") and text.strip() else None


def run_config(task, steps, lr, warmup, schedule, batch, seq_len, seed, text) -> RunConfig:
    """The Train tab's fields -> a validated ``RunConfig`` (``ConfigError`` names the first bad field)."""
    task = choice("task", task, task_names())
    steps = number("steps", steps)
    run = RunConfig(
        task=task,
        steps=steps,
        lr=number("lr", lr),
        warmup=number("warmup", warmup),
        schedule=choice("schedule", schedule, SCHEDULES),
        batch_size=number("batch_size", batch),
        seq_len=number("seq_len", seq_len),
        seed=number("seed", seed),
        every=max(5, steps // 40),
        text=corpus(task, text),
    )
    return run.validate()


def training_config(source, run: RunConfig) -> tuple:
    """``(ModelConfig, predicted bytes of a step)`` of a model that trains with ``run``, or ``ConfigError``."""
    cfg = check_caps(app_config(source), run)
    return cfg, budget.check(cfg, budget.TRAIN, run.seq_len, run.batch_size)


def upload_config(cfg) -> ModelConfig:
    """The config of an uploaded file, checked before its model is built: the app's door and the training
    cap on parameters (an uploaded model is one to train further)."""
    cfg = app_config(cfg)
    n_params = cfg.approx_params()
    if n_params > MAX_TRAIN_PARAMS:
        raise ConfigError(
            "weights",
            f"~{n_params:,} parameters",
            f"a model of at most {MAX_TRAIN_PARAMS:,} parameters, the cap of a model trained on this server",
        )
    return cfg
