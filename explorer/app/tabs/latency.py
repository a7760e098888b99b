"""The Latency & memory tab: the sweep of the current config against its baseline, measured on this machine,
and the KV cache a decoder keeps (filled in the chain's analysis stage).

The baseline is what the choice is compared with: the same model with full attention, or with
standard layers for a reversible stack. A model of several inputs sweeps the length of one of them
(or all), the others held at ``FIXED_LEN``. The sweep is a heavy job of the "sweep" family
(``explorer.app.server.jobs``): one at a time on the server, at low priority, stopped between two modules
when Stop is pressed or the page goes away.
"""

from __future__ import annotations

import gradio as gr

from explorer.analysis import kv_cache_bytes, latency_memory_sweep
from explorer.analysis.cost.sweep import DEFAULT_LENGTHS, sweep_axes
from explorer.app.controls import weights as weights_switch
from explorer.app.controls.events import QUIET
from explorer.app.controls.fields import CONTROL_FIELDS, current_config
from explorer.app.controls.state import after_the_grid, drawn_config, read_state
from explorer.app.server.jobs import run_job
from explorer.app.server.messages import problem, warn
from explorer.app.tabs.contract import Landing, Page, Step, Tab
from explorer.app.tabs.parts import stacks
from explorer.app.tabs.parts.stacks import FIXED_LEN  # the other inputs' length when a sweep varies one of several
from explorer.figures.latency import kv_cache_figure, sweep_figure
from explorer.figures.readings import sweep_reading
from explorer.runtime.limits import MAX_SWEEP_LEN, SWEEP_BUDGET_S, parse_lengths
from models import ConfigError, ModelConfig
from models.architectures import arrangement


def sweep_baseline(cfg: ModelConfig):
    """``(name, config)`` the sweep compares against: a reversible stack against the same model with
    standard layers (its activation memory is what stays flat in depth), otherwise the same model
    with ``full`` attention; ``(None, None)`` when the config is its own baseline."""
    if cfg.layer == "reversible":
        return "standard layers", cfg.replace(layer="standard")
    if cfg.attention != "full":
        return "full", cfg.replace(attention="full")
    return None, None


def sweep_outputs(
    cfg: ModelConfig, lengths: list, mode: str, progress=None, should_stop=None, seq2seq_axis: str = "both"
) -> tuple:
    """Sweep the current config and its baseline -> (figure, reading, records). A model of several
    inputs sweeps ``seq2seq_axis`` (one input's length or all of them; ``explorer.analysis.cost.sweep``)."""
    axis = dict(seq2seq_axis=seq2seq_axis or "both", fixed_len=FIXED_LEN) if sweep_axes(cfg) else {}

    def part(lo, hi):
        if progress is None:
            return None
        return lambda frac, msg: progress(lo + (hi - lo) * frac, desc=msg)

    base_name, base_cfg = sweep_baseline(cfg)
    current = latency_memory_sweep(
        cfg,
        lengths,
        mode,
        time_budget_s=SWEEP_BUDGET_S,
        should_stop=should_stop,
        progress=part(0.0, 0.5 if base_cfg is not None else 1.0),
        **axis,
    )
    baseline = None
    if base_cfg is not None:
        try:
            baseline = latency_memory_sweep(
                base_cfg,
                lengths,
                mode,
                time_budget_s=SWEEP_BUDGET_S,
                should_stop=should_stop,
                progress=part(0.5, 1.0),
                **axis,
            )
        except ConfigError:  # the baseline is not valid with this config: no baseline
            baseline = None
    name = cfg.attention if base_name != "standard layers" else f"{cfg.attention}, reversible layers"
    if axis:
        name += axis_note(arrangement(cfg).inputs, axis["seq2seq_axis"])
    fig = sweep_figure(current, baseline, name, base_name or "full")
    reading = sweep_reading(current, baseline, name, base_name or "full")
    if base_cfg is None and cfg.attention == "full":
        reading += (
            " Full attention is its own baseline: choose sliding_window, longformer or bigbird under Attention "
            "and sweep again to see a structured pattern pull away from it past a few thousand tokens."
        )
    if cfg.layer == "reversible" and mode == "forward":
        reading += (
            " Reversible layers save *activation* memory, which only exists when gradients are taken:"
            " measure forward_backward to see it."
        )
    return (
        fig,
        reading,
        {"current": current, "baseline": baseline, "attention": name, "baseline_name": base_name or "full"},
    )


def axis_note(inputs: tuple, axis: str) -> str:
    """ " (source = target length)", " (source length; target 64)": what the sweep's length is."""
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
        return await run_job(
            "sweep",
            request,
            lambda should_stop: run_sweep(values, lengths, mode, state, progress, should_stop, seq2seq_axis),
        )
    except ConfigError as exc:
        return {"sweep": gr.skip(), "sweep_md": warn(problem(exc)), "state": read_state(state)}


# ---------------------------------------------------------------------------- the tab (explorer.app.tabs.contract)
KV_LENGTHS = [2**k for k in range(7, 18)]


def refresh_kv(values: dict, state=None, weights=None) -> dict:
    """-> the KV-cache figure of the drawn config; skipped like the other tabs of the analysis stage."""
    return after_the_grid(
        state, ("kv",), lambda: {"kv": kv_cache_figure(kv_cache_bytes(drawn_config(values, weights), KV_LENGTHS))}
    )


def build(landing: Landing) -> dict:
    out = {}
    with gr.Tab("Latency & memory", id="latency"):
        with gr.Row():
            out["lengths"] = gr.Textbox(
                ",".join(map(str, DEFAULT_LENGTHS)),
                elem_id="lengths",
                label=f"Sequence lengths (comma-separated, up to {MAX_SWEEP_LEN})",
            )
            out["mode"] = gr.Radio(["forward", "forward_backward"], value="forward", label="Measure", elem_id="mode")
            out["sweep_axis"] = stacks.axis_radio()
            with gr.Column(min_width=120):
                out["run"] = gr.Button("Run sweep", variant="primary", elem_id="run-sweep")
                out["stop"] = gr.Button("Stop", variant="stop", elem_id="stop-sweep", size="sm")
        out["sweep_md"] = gr.Markdown(
            "Press **Run sweep** to time the current attention against full attention on this machine.",
            elem_id="sweep-reading",
        )
        out["sweep"] = gr.Plot(None, label="Latency and memory", elem_id="sweep-plot")
        out["kv"] = gr.Plot(
            kv_cache_figure(kv_cache_bytes(landing.cfg, KV_LENGTHS)), label="KV cache", elem_id="kv-plot"
        )
    return out


def wire(page: Page) -> None:
    """Run sweep (a heavy job of the sweep family, at a checkpoint's sizes when one is drawn) and Stop."""
    ui = page.ui

    async def sweep_fn(data, request: gr.Request, progress=gr.Progress()):
        values, named = ui.split(data)
        values = weights_switch.with_checkpoint(values, named.get("weights"))  # a checkpoint: at its sizes
        return ui.back(
            await run_sweep_job(
                values, named["lengths"], named["mode"], named["state"], progress, named.get("sweep_axis"), request
            )
        )

    run = ui["run"].click(
        sweep_fn,
        ui.inputs(*CONTROL_FIELDS, "lengths", "mode", "sweep_axis", "state", "weights"),
        ui.outputs("sweep", "sweep_md", "state"),
        api_name="run_sweep",
        concurrency_limit=None,
        **QUIET,
    )
    ui["stop"].click(None, None, None, cancels=[run], api_name="stop_sweep", queue=False, **QUIET)


def export(scene) -> list:
    """The KV cache of the config and the session's sweep, when it ran one."""
    sections = [("KV cache for decoding", [("kv-cache", kv_cache_figure(kv_cache_bytes(scene.cfg, KV_LENGTHS)))])]
    sweep = scene.session.get("sweep")
    if sweep:
        fig = sweep_figure(sweep["current"], sweep["baseline"], sweep["attention"], sweep.get("baseline_name", "full"))
        sections.append(("Latency and memory vs sequence length", [("latency-memory", fig)]))
    return sections


def export_sweeps(session: dict) -> list:
    """The session's sweep rows for the zip's CSV: the current config and its baseline."""
    sweep = session.get("sweep")
    if not sweep:
        return []
    return [
        ("current", sweep["attention"], sweep["current"]),
        ("baseline", sweep.get("baseline_name", "full"), sweep["baseline"]),
    ]


TAB = Tab(
    "latency",
    build,
    steps=(Step("analysis", refresh_kv, ("state",), ("kv",)),),
    wire=wire,
    export=export,
    export_sweeps=export_sweeps,
)
