"""The Latency & memory tab's sweep: the current config against its baseline, measured on this machine.

The baseline is what the choice is compared with: the same model with full attention, or with
standard layers for a reversible stack. A model of several inputs sweeps the length of one of them
(or all), the others held at ``FIXED_LEN``. The sweep is a heavy job of the "sweep" family
(``explorer.app.server.jobs``): one at a time on the server, at low priority, stopped between two modules
when Stop is pressed or the page goes away.
"""
from __future__ import annotations

import gradio as gr

from explorer.analysis import latency_memory_sweep
from explorer.analysis.sweep import sweep_axes
from explorer.app.controls.fields import current_config
from explorer.app.server.jobs import run_job
from explorer.app.server.messages import problem, warn
from explorer.app.controls.state import read_state
from explorer.figures.latency import sweep_figure
from explorer.figures.readings import sweep_reading
from explorer.runtime.limits import parse_lengths
from models import ConfigError, ModelConfig
from models.architectures import arrangement
from explorer.runtime.limits import SWEEP_BUDGET_S

FIXED_LEN = 64  # the other inputs' length when a sweep varies one input of several


def sweep_baseline(cfg: ModelConfig):
    """``(name, config)`` the sweep compares against: a reversible stack against the same model with
    standard layers (its activation memory is what stays flat in depth), otherwise the same model
    with ``full`` attention; ``(None, None)`` when the config is its own baseline."""
    if cfg.layer == "reversible":
        return "standard layers", cfg.replace(layer="standard")
    if cfg.attention != "full":
        return "full", cfg.replace(attention="full")
    return None, None


def sweep_outputs(cfg: ModelConfig, lengths: list, mode: str, progress=None, should_stop=None,
                  seq2seq_axis: str = "both") -> tuple:
    """Sweep the current config and its baseline -> (figure, reading, records). A model of several
    inputs sweeps ``seq2seq_axis`` (one input's length or all of them; ``explorer.analysis.sweep``)."""
    axis = dict(seq2seq_axis=seq2seq_axis or "both", fixed_len=FIXED_LEN) if sweep_axes(cfg) else {}

    def part(lo, hi):
        if progress is None:
            return None
        return lambda frac, msg: progress(lo + (hi - lo) * frac, desc=msg)

    base_name, base_cfg = sweep_baseline(cfg)
    current = latency_memory_sweep(cfg, lengths, mode, time_budget_s=SWEEP_BUDGET_S, should_stop=should_stop,
                                      progress=part(0.0, 0.5 if base_cfg is not None else 1.0), **axis)
    baseline = None
    if base_cfg is not None:
        try:
            baseline = latency_memory_sweep(base_cfg, lengths, mode, time_budget_s=SWEEP_BUDGET_S,
                                               should_stop=should_stop, progress=part(0.5, 1.0), **axis)
        except ConfigError:  # the baseline is not valid with this config: no baseline
            baseline = None
    name = cfg.attention if base_name != "standard layers" else f"{cfg.attention}, reversible layers"
    if axis:
        name += axis_note(arrangement(cfg).inputs, axis["seq2seq_axis"])
    fig = sweep_figure(current, baseline, name, base_name or "full")
    reading = sweep_reading(current, baseline, name, base_name or "full")
    if base_cfg is None and cfg.attention == "full":
        reading += (" Full attention is its own baseline: choose sliding_window, longformer or bigbird under Attention "
                    "and sweep again to see a structured pattern pull away from it past a few thousand tokens.")
    if cfg.layer == "reversible" and mode == "forward":
        reading += (" Reversible layers save *activation* memory, which only exists when gradients are taken:"
                    " measure forward_backward to see it.")
    return fig, reading, {"current": current, "baseline": baseline, "attention": name,
                          "baseline_name": base_name or "full"}


def axis_note(inputs: tuple, axis: str) -> str:
    """" (source = target length)", " (source length; target 64)": what the sweep's length is."""
    if axis == "both":
        return f" ({' = '.join(inputs)} length)"
    others = ", ".join(f"{name} {FIXED_LEN}" for name in inputs if name != axis)
    return f" ({axis} length; {others})"


def run_sweep(values: dict, lengths, mode, state, progress=None, should_stop=None, seq2seq_axis="both") -> dict:
    """-> sweep figure, reading, state (the records kept for the export)."""
    state = read_state(state)
    try:
        cfg = current_config(values)
        lengths = parse_lengths(lengths)
        if mode not in ("forward", "forward_backward"):
            raise ConfigError("mode", mode, "'forward' or 'forward_backward'")
        fig, reading, records = sweep_outputs(cfg, lengths, mode, progress, should_stop, seq2seq_axis)
    except Exception as exc:
        return {"sweep": gr.skip(), "sweep_md": warn(problem(exc)), "state": state}
    if any(r["status"] == "cancelled" for r in records["current"] + (records["baseline"] or [])):
        reading = "⏹ Sweep stopped: the lengths it did not reach are marked cancelled. " + reading
    return {"sweep": fig, "sweep_md": reading, "state": {**state, "sweep": records}}


async def run_sweep_job(values: dict, lengths, mode, state, progress=None, seq2seq_axis="both", request=None) -> dict:
    """``run_sweep`` as a heavy job of the sweep family, stopped between two modules when the event is
    cancelled or its client leaves; a busy server answers with a message (the figure is kept)."""
    try:
        return await run_job("sweep", request, lambda should_stop: run_sweep(values, lengths, mode, state, progress,
                                                                            should_stop, seq2seq_axis))
    except ConfigError as exc:
        return {"sweep": gr.skip(), "sweep_md": warn(problem(exc)), "state": read_state(state)}
