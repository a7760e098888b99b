"""Your run: the session's trained model (the Train tab's run, or a model uploaded there) as the other tabs read it.

The run itself lives in the Train tab's per-session state (``explorer.app.tabs.parts.train_runs``); the Weights
choice "your run" (``explorer.app.controls.weights``) reads it only through these three functions, so the
controls never import a tab.
"""

from __future__ import annotations

from explorer.analysis.weights import trained as trained_weights
from explorer.runtime.configs import as_config


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
