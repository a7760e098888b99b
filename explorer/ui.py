"""The Gradio app: widgets and event wiring, nothing else (logic: ``explorer.ui_handlers``).

Controls on the left (generated from ModelConfig and the registries), four tabs on the right.
Every control change redraws the Attention tab and, as a second event, the Gradient and Model
tabs; piled-up requests collapse (``trigger_mode="always_last"``). The attention figures of the
default config are computed when the app is built, so the first page paints without a request;
the other tabs fill on page load. The page's query string restores a shared configuration.
"""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import gradio as gr

from models import ModelConfig
from models.config import CATEGORIES

from . import ui_handlers as h
from . import ui_views
from .device import configure_threads, device_label
from .limits import MAX_SWEEP_LEN, MAX_TEXT_BYTES
from .presets import CUSTOM, available
from .share import DEFAULT_TEXT
from .sweep import DEFAULT_LENGTHS
from .ui_controls import CONTROL_FIELDS, SIZE_FIELDS, make_control, visibility_updates, visible_fields

ASSETS = Path(__file__).resolve().parent.parent / "assets"
THEME = gr.themes.Soft(primary_hue="indigo", secondary_hue="sky", neutral_hue="slate",
                       font=["DejaVu Sans", "Inter", "system-ui", "sans-serif"])
LAUNCH_OPTIONS = {"theme": THEME, "css_paths": [ASSETS / "style.css"]}

# Runs in the browser: put the config in the address bar and return the full link to copy.
SHARE_JS = """(qs) => {
  const url = window.location.origin + window.location.pathname + (qs ? '?' + qs : '');
  try { window.history.replaceState(null, '', url); } catch (e) {}
  return url;
}"""

RESIZE_JS = "() => { setTimeout(() => window.dispatchEvent(new Event('resize')), 80); }"


def _header() -> str:
    return (f"<div id='app-header'><h1>Transformer Family Explorer</h1>"
            f"<p>Assemble a transformer from the catalogue and see what each choice does: attention maps, "
            f"gradient norms at initialisation, and latency / memory measured on this machine.</p>"
            f"<span class='device-badge'>running on {device_label()}</span></div>")


def _controls(cfg: ModelConfig) -> dict:
    """Create every control in its group; return ``{field: component}``."""
    shown = visible_fields({c: getattr(cfg, c) for c in CATEGORIES})
    ctl = {}

    def make(names):
        for n in names:
            ctl[n] = make_control(n, getattr(cfg, n), visible=n in shown)

    with gr.Group():
        make([*CATEGORIES, "causal"])
    with gr.Accordion("Size", open=True):
        with gr.Row():
            make(SIZE_FIELDS[:2])
        with gr.Row():
            make(SIZE_FIELDS[2:])
        make(["seed"])
    rest = [n for n in CONTROL_FIELDS if n not in ctl]
    with gr.Accordion("Variant parameters (shown when the chosen variants use them)", open=True):
        make(rest)
    return ctl


def build_app() -> gr.Blocks:
    configure_threads()
    cfg = ModelConfig()
    grid0, stats0, reading0 = h.attention_outputs(cfg, DEFAULT_TEXT)  # first paint needs no request
    # analytics off: no telemetry calls from an offline host (and Gradio 6.31 crashes comparing a
    # theme whose font list mixes names and Font objects with its built-in themes when it is on).
    with gr.Blocks(title="Transformer Family Explorer", fill_width=True, analytics_enabled=False) as demo:
        state = gr.State(h.new_state(cfg))
        gr.HTML(_header())
        with gr.Row(equal_height=False):
            with gr.Column(scale=1, min_width=330, elem_id="controls"):
                preset = gr.Dropdown([CUSTOM, *available()], value=CUSTOM, label="Preset", elem_id="preset",
                                     info="A named architecture fills every control (sizes kept small).")
                status = gr.Markdown("", elem_id="status")
                ctl = _controls(cfg)
                text = gr.Textbox(DEFAULT_TEXT, lines=3, label=f"Input text (one token per byte, first "
                                  f"{MAX_TEXT_BYTES} bytes)", elem_id="text")
                with gr.Accordion("Share & export", open=True):
                    share_url = gr.Textbox("", label="Share link (this configuration)", elem_id="share-url",
                                           buttons=["copy"], interactive=False)
                    share_qs = gr.Textbox("", visible=False, elem_id="share-qs")
                    with gr.Row():
                        upload = gr.UploadButton("Upload config JSON", file_types=[".json"], size="sm")
                        export = gr.Button("Export config + figures", size="sm", elem_id="export")
                    files = gr.File(label="Downloads (config JSON, figures as HTML)", file_count="multiple",
                                    elem_id="downloads", visible=False, interactive=False)
                    gr.Markdown("PNG: the camera button in each figure's toolbar (hover the figure).", elem_classes="hint")
            with gr.Column(scale=3, min_width=600):
                with gr.Tabs(elem_id="tabs"):
                    with gr.Tab("Attention", id="attention"):
                        maps_md = gr.Markdown(reading0, elem_id="maps-reading")
                        grid = gr.Plot(grid0, label="Attention maps", elem_id="attention-grid")
                        stats = gr.Plot(stats0, label="Pattern and per-head statistics", elem_id="attention-stats")
                    views = ui_views.build_views_tab()
                    with gr.Tab("Gradients", id="gradients"):
                        grad_md = gr.Markdown("", elem_id="grad-reading")
                        grad = gr.Plot(None, label="Gradient norms", elem_id="grad-plot")
                    with gr.Tab("Latency & memory", id="latency"):
                        with gr.Row():
                            lengths = gr.Textbox(",".join(map(str, DEFAULT_LENGTHS)), elem_id="lengths",
                                                 label=f"Sequence lengths (comma-separated, up to {MAX_SWEEP_LEN})")
                            mode = gr.Radio(["forward", "forward_backward"], value="forward", label="Measure",
                                            elem_id="mode")
                            run = gr.Button("Run sweep", variant="primary", elem_id="run-sweep")
                        sweep_md = gr.Markdown("Press **Run sweep** to time the current attention against "
                                               "full attention on this machine.", elem_id="sweep-reading")
                        sweep = gr.Plot(None, label="Latency and memory", elem_id="sweep-plot")
                        kv = gr.Plot(None, label="KV cache", elem_id="kv-plot")
                    with gr.Tab("Model", id="model"):
                        model_md = gr.Markdown("", elem_id="model-card")
                        config_code = gr.Code(cfg.to_json(), language="json", label="Config (JSON)", elem_id="config-json")
        _wire(demo, ctl, SimpleNamespace(
            state=state, preset=preset, status=status, text=text, share_url=share_url, share_qs=share_qs,
            upload=upload, export=export, files=files, maps_md=maps_md, grid=grid, stats=stats,
            grad_md=grad_md, grad=grad, lengths=lengths, mode=mode, run=run, sweep_md=sweep_md,
            sweep=sweep, kv=kv, model_md=model_md, config_code=config_code, views=views))
    return demo


def _wire(demo, ctl: dict, c: SimpleNamespace) -> None:
    """Connect the events; ``ctl`` are the config controls, ``c`` the other components."""
    controls = [ctl[n] for n in CONTROL_FIELDS]
    n = len(controls)
    fill_outputs = [*controls, c.text, c.preset, c.status]
    triggers = [x.change for x in controls] + [c.text.change]

    c.preset.input(h.apply_preset, [c.preset], fill_outputs, api_name="preset",
                      api_visibility="undocumented")
    gr.on([ctl[k].change for k in CATEGORIES], visibility_updates, [ctl[k] for k in CATEGORIES], controls,
          queue=False, api_name="visibility", api_visibility="undocumented")
    attention = gr.on(triggers, lambda *a: h.refresh_attention(a[:n], a[n], a[n + 1]),
                      [*controls, c.text, c.state],
                      [c.grid, c.stats, c.maps_md, c.status, c.share_qs, c.preset, c.state],
                      trigger_mode="always_last", show_progress="minimal", api_name="refresh_attention",
                      api_visibility="undocumented")
    # the views read the same (cached) forward pass, so they follow the attention event
    v = c.views
    view_inputs = [*controls, c.text, v.layer, v.head]
    view_outputs = [v.tab, v.md, v.pick, v.layer, v.head, *v.plots.values()]

    def views(*a):
        return ui_views.refresh_views(a[:n], a[n], a[n + 1], a[n + 2])

    attention.then(views, view_inputs, view_outputs, show_progress="hidden", api_name="refresh_views",
                   api_visibility="undocumented")
    demo.load(views, view_inputs, view_outputs, show_progress="hidden", api_visibility="private")
    # figures drawn while their tab was hidden have Plotly's default width: re-measure on opening it
    v.tab.select(None, None, None, js=RESIZE_JS, queue=False, api_visibility="private")
    gr.on([v.layer.input, v.head.input], lambda *a: ui_views.redraw_approximation(a[:n], a[n], a[n + 1], a[n + 2]),
          view_inputs, [v.plots["approximation"]], trigger_mode="always_last", show_progress="minimal",
          api_name="redraw_view", api_visibility="undocumented")
    gr.on([*triggers, demo.load], lambda *a: h.refresh_analysis(a[:n], a[n]), [*controls, c.text],
          [c.grad, c.grad_md, c.model_md, c.kv, c.config_code],
          trigger_mode="always_last", show_progress="hidden", api_name="refresh_analysis",
          api_visibility="undocumented")
    c.share_qs.change(None, [c.share_qs], [c.share_url], js=SHARE_JS, queue=False,
                         api_visibility="private")
    demo.load(None, None, [c.share_url], js="() => window.location.href", queue=False, api_visibility="private")
    demo.load(h.load_from_url, None, fill_outputs, api_name="load_link", api_visibility="undocumented")
    c.upload.upload(h.upload_config, [c.upload], fill_outputs, api_name="upload_config",
                       api_visibility="undocumented")

    def export(*a):
        return h.export_files(a[:n], a[n], a[n + 1])

    c.export.click(export, [*controls, c.text, c.state], [c.files], api_name="export",
                      api_visibility="undocumented")

    def sweep(*a, progress=gr.Progress()):
        return h.run_sweep(a[:n], a[n], a[n + 1], a[n + 2], progress)

    c.run.click(sweep, [*controls, c.lengths, c.mode, c.state], [c.sweep, c.sweep_md, c.state],
                   api_name="run_sweep", api_visibility="undocumented", concurrency_id="sweep",
                   concurrency_limit=1)
    gr.api(h.api_analyze, api_name="analyze")
    gr.api(h.api_gradients, api_name="gradients")
    gr.api(h.api_benchmark, api_name="benchmark", concurrency_id="sweep", concurrency_limit=1)
