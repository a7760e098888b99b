"""The Gradio app: widgets and event wiring, nothing else (logic: ``explorer.app.tabs.attention``,
``ui_jobs``, ``ui_api``).

Controls on the left (generated from ModelConfig and the registries), tabs on the right. Handlers
are wired by name: each event's inputs are a *set* of components, Gradio passes them as one dict,
``Named`` turns it into ``{name: value}`` (control values under their ModelConfig field names) and
maps the handler's ``{name: value}`` result back to components.

One user action = a bounded number of requests: controls act on *commit* (a dropdown when its
list closes after a pick, a checkbox on ``input``, a number or text box on Enter / leaving the box),
never on ``change``, so values the app itself writes (a preset, a link, an upload) cannot fire more
events. A commit runs one chain: attention grid (the first answer, kept small) -> statistics and
zoomed head -> variant views -> gradients / model card, and a commit that changes nothing redraws
nothing. The "Weights" switch runs the same chain with the session's trained weights
(``explorer.app.weights``; the Train tab is ``explorer.app.tabs.train``). A preset, link or upload fills
the controls, then runs the same chain once.

The attention figures of the default config are computed when the app is built, so the first page
paints without a request; the other tabs fill on page load. The queue is bounded (a full queue
answers "busy"), interactive work shares two slots and the sweep has its own slot, freed within one
module's run when the sweep is stopped or its client leaves.
"""
from __future__ import annotations

import os
from pathlib import Path

import gradio as gr

from explorer.analysis.sweep import DEFAULT_LENGTHS
from explorer.app import api as ui_api
from explorer.app import sessions
from explorer.app.tabs import attention as h
from explorer.app import history as ui_history
from explorer.app import seq2seq as ui_encdec
from explorer.app import weights as ui_trained
from explorer.app.controls import CONTROL_FIELDS, SIZE_FIELDS, make_control, unused_categories, visible_fields
from explorer.app.share import DEFAULT_TEXT
from explorer.app.share_js import SHARE_JS
from explorer.app.tabs import compare as ui_compare
from explorer.app.tabs import grid as ui_grid
from explorer.app.tabs import train as ui_train
from explorer.app.tabs import views as ui_views
from explorer.app.tabs import zoom as ui_zoom
from explorer.runtime.device import configure_threads, device_label
from explorer.runtime.limits import MAX_SWEEP_LEN, MAX_TEXT_BYTES
from explorer.runtime.load import LOAD
from explorer.runtime.presets import CUSTOM, available
from models import ModelConfig
from models.config import CATEGORIES
from explorer.app.controls import choice_marks
from explorer.app.export import cleanup_export, export_files
from explorer.app.sources import FILL, apply_preset, load_from_url, upload_config
from explorer.app.state import new_state
from explorer.app.tabs.analysis import ANALYSIS, analysis_outputs, refresh_analysis
from explorer.app.tabs.latency import run_sweep_cancellable

ASSETS = Path(__file__).resolve().parents[2] / "assets"
THEME = gr.themes.Soft(primary_hue="indigo", secondary_hue="sky", neutral_hue="slate",
                       font=["DejaVu Sans", "Inter", "system-ui", "sans-serif"])
# Queue and slots. Two analyses at once, one torch thread each, one per core of the 2-core host; a
# sweep has its own slot. Measure on the host with `python -m benchmarks.compute_slots` (requests/s and
# latency for 1-4 concurrent analyses) and set EXPLORER_COMPUTE_SLOTS to where throughput stops rising.
COMPUTE_LIMIT = max(1, int(os.environ.get("EXPLORER_COMPUTE_SLOTS", "2"))) \
    if os.environ.get("EXPLORER_COMPUTE_SLOTS", "2").isdigit() else 2
# beyond this many waiting events the browser shows Gradio's "This application is currently busy"
QUEUE_SIZE = int(os.environ["EXPLORER_QUEUE_SIZE"]) if os.environ.get("EXPLORER_QUEUE_SIZE", "").isdigit() else 24
SESSIONS = 200                # sessions kept (least recently used dropped first): bounds Gradio's per-session
                              # copies; besides, a session idle for EXPLORER_SESSION_TTL s (1 h) expires
MAX_TEXT_CHARS = 4096         # the text box refuses more (only the first 256 bytes are used anyway)
# uploads: config JSON (refused above 100 kB by its handler) and the Train tab's trained models
LAUNCH_OPTIONS = {"theme": THEME, "css_paths": [ASSETS / "style.css"], "max_file_size": "24mb",
                  "state_session_capacity": SESSIONS, "show_error": True}
DELETE_CACHE = (300, 900)     # every 5 min, delete served files (exports) older than 15 min

RESIZE_JS = "() => { setTimeout(() => window.dispatchEvent(new Event('resize')), 80); }"
# A step of the redraw chain that runs in the page only: it resolves after the next frame, so the
# browser draws the grid before it starts the next event (each event's bookkeeping in Gradio's page
# costs a few hundred ms of the main thread on a page of this size, and would otherwise come first).
PAINT_JS = "() => new Promise((done) => requestAnimationFrame(() => setTimeout(() => done([]), 0)))"
# Presentation mode and the collapsible control column are pure page state (a class on <body>, styled
# by assets/style.css): no request, nothing kept on the server; Plotly re-measures after the switch.
PRESENT_JS = ("() => { document.body.classList.toggle('presentation'); "
              "setTimeout(() => window.dispatchEvent(new Event('resize')), 120); }")
COLLAPSE_JS = ("() => { document.body.classList.toggle('controls-hidden'); "
               "setTimeout(() => window.dispatchEvent(new Event('resize')), 120); }")


def _header() -> str:
    return (f"<div id='app-header'><h1>Transformer Family Explorer</h1>"
            f"<p>Assemble a transformer from the catalogue and see what each choice does: attention maps, "
            f"gradient norms at initialisation, and latency / memory measured on this machine.</p>"
            f"<span class='device-badge'>running on {device_label()}</span></div>")


def _controls(cfg: ModelConfig, marks: dict) -> dict:
    """Create every control in its group; return ``{field: component}``."""
    choice = {c: getattr(cfg, c) for c in CATEGORIES}
    shown, unused = visible_fields(choice), unused_categories(choice)
    ctl = {}

    def make(names):
        for n in names:
            ctl[n] = make_control(n, getattr(cfg, n), visible=n in shown, unused=n in unused, choices=marks.get(n))

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


class Named:
    """Components by name. ``fn(handler)`` adapts a handler ``handler(values, **named) -> {name: value}``
    (``values``: the control values by field name) to Gradio's dict-in / dict-out convention."""

    def __init__(self, comps: dict):
        self.c = comps
        self.names = {comp: name for name, comp in comps.items()}

    def ins(self, *names) -> set:
        return {self.c[n] for n in names}

    def outs(self, *names) -> list:
        return [self.c[n] for n in names]

    def split(self, data: dict) -> tuple:
        args = {self.names[comp]: v for comp, v in data.items()}
        return {n: args.pop(n) for n in CONTROL_FIELDS if n in args}, args

    def back(self, out: dict) -> dict:
        return {self.c[n]: v for n, v in out.items()}

    def fn(self, handler, rename: dict | None = None):
        rename = rename or {}

        def run(data: dict):
            values, args = self.split(data)
            with LOAD.busy():
                return self.back(handler(values, **{rename.get(k, k): v for k, v in args.items()}))
        return run


def build_app() -> gr.Blocks:
    configure_threads()
    cfg = ModelConfig()
    grid0, stats0, reading0 = h.attention_outputs(cfg, DEFAULT_TEXT)  # first paint needs no request
    analysis0 = analysis_outputs(cfg, DEFAULT_TEXT)  # nor do the Gradients and Model tabs
    marks = choice_marks(cfg.to_dict())
    # analytics off: no telemetry calls from an offline host (and Gradio 6.31 crashes comparing a
    # theme whose font list mixes names and Font objects with its built-in themes when it is on).
    with gr.Blocks(title="Transformer Family Explorer", fill_width=True, analytics_enabled=False,
                   delete_cache=DELETE_CACHE) as demo:
        # no time_to_live of its own: it goes with its session (explorer.app.sessions: idle sessions expire,
        # and a page whose session expired redraws everything on its next commit)
        state = gr.State(new_state(cfg, DEFAULT_TEXT))
        export_dir = gr.State(None, time_to_live=600, delete_callback=cleanup_export)
        # this session's trained-weights snapshot (explorer.analysis.weights: at most MAX_TRAINED_BYTES)
        trained = gr.State(None, time_to_live=3600)
        gr.HTML(_header())
        with gr.Row(elem_id="view-buttons"):
            reset = gr.Button("Reset to defaults", size="sm", elem_id="reset", scale=0, min_width=150)
            undo = gr.Button("Undo", size="sm", elem_id="undo", scale=0, min_width=90)
            pin = ui_compare.pin_button()
            present = gr.Button("Presentation mode", size="sm", elem_id="present-toggle", scale=0, min_width=160)
            collapse = gr.Button("Hide / show controls", size="sm", elem_id="controls-toggle", scale=0,
                                 min_width=160)
        with gr.Row(equal_height=False):
            with gr.Column(scale=1, min_width=330, elem_id="controls"):
                preset = gr.Dropdown([CUSTOM, *available()], value=CUSTOM, label="Preset", elem_id="preset",
                                     info="A named architecture fills every control (sizes kept small).")
                status = gr.Markdown("", elem_id="status")
                weights = gr.Radio([ui_trained.INITIAL, ui_trained.TRAINED], value=ui_trained.INITIAL,
                                   label="Weights", elem_id="weights-switch",
                                   info="trained: the Train tab's model (same config) in every tab")
                gr.Markdown(ui_trained.SHARE_NOTE, elem_classes="hint", elem_id="weights-note")
                ctl = _controls(cfg, marks)
                text = gr.Textbox(DEFAULT_TEXT, lines=3, label=f"Input text (one token per byte, first "
                                  f"{MAX_TEXT_BYTES} bytes; applied on leaving the box)", elem_id="text",
                                  max_length=MAX_TEXT_CHARS)
                separator = ui_encdec.separator_box()
                with gr.Accordion("Share & export", open=True):
                    share_url = gr.Textbox("", label="Share link (this configuration)", elem_id="share-url",
                                           buttons=["copy"], interactive=False)
                    share_qs = gr.Textbox("", visible=False, elem_id="share-qs")
                    with gr.Row():
                        upload = gr.UploadButton("Upload config JSON", file_types=[".json"], size="sm")
                        export = gr.Button("Export zip", size="sm", elem_id="export")
                    files = gr.File(label="Download (zip: config JSON, a PNG per figure, sweep CSV, offline HTML page)",
                                    file_count="single", elem_id="downloads", visible=False, interactive=False)
                    gr.Markdown("The zip's README.txt lists its files. One figure as PNG: the camera button in its "
                                "toolbar (hover the figure).", elem_classes="hint")
            with gr.Column(scale=3, min_width=320, elem_id="figures"):
                with gr.Tabs(elem_id="tabs") as tab_set:
                    tabs = _tabs(cfg, grid0, stats0, reading0, analysis0)
        pinned = gr.State(None)  # the config dict pinned as A (Compare A/B tab)
        history = gr.State([cfg.to_dict()])  # configs drawn so far, for Undo (explorer.app.history)
        comps = {**ctl, "state": state, "export_dir": export_dir, "trained": trained, "weights": weights,
                 "preset": preset, "status": status, "text": text, "separator": separator,
                 "share_url": share_url, "share_qs": share_qs, "upload": upload, "export": export, "files": files,
                 "present": present, "collapse": collapse, "tabs": tab_set, "pinned": pinned, "pin": pin, "history": history, "reset": reset,
                 "undo": undo, **tabs}
        clash = set(ctl) & (set(comps) - set(ctl))
        assert not clash, f"component names shadow ModelConfig fields: {clash}"
        _wire(demo, ctl, Named(comps))
    demo.queue(max_size=QUEUE_SIZE, default_concurrency_limit=COMPUTE_LIMIT)
    sessions.start_expiry(demo)  # idle sessions (Gradio's copies of their outputs) expire
    return demo


def _tabs(cfg, grid0, stats0, reading0, analysis0) -> dict:
    """The output tabs (inside the caller's ``gr.Tabs``) -> ``{name: component}``. A new tab is one
    more ``with gr.Tab(...)`` here (and its names in the returned dict)."""
    out = {}
    with gr.Tab("Attention", id="attention"):
        out["maps_md"] = gr.Markdown(reading0, elem_id="maps-reading")
        g = ui_grid.build_pickers()
        out.update(grid_layers=g.layers, grid_heads=g.heads, grid_zoom_go=g.go)
        out["grid"] = gr.Plot(grid0, label="Attention maps", elem_id="attention-grid")
        out["stats"] = gr.Plot(stats0, label="Pattern and per-head statistics", elem_id="attention-stats")
        out.update(ui_encdec.attention_plots())
        z = ui_zoom.build_zoom()
        out.update(zoom_layer=z.layer, zoom_head=z.head, zoom=z.plot)
    v = ui_views.build_views_tab()
    out.update(views_tab=v.tab, views_md=v.md, views_pick=v.pick, views_layer=v.layer, views_head=v.head,
               **{f"view_{n}": p for n, p in v.plots.items()})
    with gr.Tab("Gradients", id="gradients"):
        out["grad_md"] = gr.Markdown(analysis0["grad_md"], elem_id="grad-reading")
        out["grad"] = gr.Plot(analysis0["grad"], label="Gradient norms", elem_id="grad-plot")
        out["grad_stacks"] = ui_encdec.gradient_plot()
    with gr.Tab("Latency & memory", id="latency"):
        with gr.Row():
            out["lengths"] = gr.Textbox(",".join(map(str, DEFAULT_LENGTHS)), elem_id="lengths",
                                        label=f"Sequence lengths (comma-separated, up to {MAX_SWEEP_LEN})")
            out["mode"] = gr.Radio(["forward", "forward_backward"], value="forward", label="Measure", elem_id="mode")
            out["sweep_axis"] = ui_encdec.axis_radio()
            with gr.Column(min_width=120):
                out["run"] = gr.Button("Run sweep", variant="primary", elem_id="run-sweep")
                out["stop"] = gr.Button("Stop", variant="stop", elem_id="stop-sweep", size="sm")
        out["sweep_md"] = gr.Markdown("Press **Run sweep** to time the current attention against "
                                      "full attention on this machine.", elem_id="sweep-reading")
        out["sweep"] = gr.Plot(None, label="Latency and memory", elem_id="sweep-plot")
        out["kv"] = gr.Plot(analysis0["kv"], label="KV cache", elem_id="kv-plot")
    with gr.Tab("Model", id="model"):
        out["model_md"] = gr.Markdown(analysis0["model_md"], elem_id="model-card")
        out["config_code"] = gr.Code(analysis0["config_code"], language="json", label="Config (JSON)",
                                     elem_id="config-json")
    cmp = ui_compare.build_compare_tab()
    out.update(compare_tab=cmp.tab, compare_run=cmp.refresh, compare_md=cmp.md, grid_a=cmp.grid_a,
               grid_b=cmp.grid_b, compare_grad=cmp.grad, compare_link=cmp.link, **cmp.ab)
    with gr.Tab("Train", id="train", elem_id="train-tab"):
        out["train_state"] = ui_train.build_train_tab(lambda: ui_trained.train_default(cfg)).state
    return out


ATTENTION_OUT = (*CONTROL_FIELDS, *h.FIGURES, "status", "share_qs", "preset", "state", "separator", "sweep_axis",
                 "weights", "trained")
VIEWS_IN = (*CONTROL_FIELDS, "text", "separator", "views_layer", "views_head", "trained", "state")
ANALYSIS_IN = (*CONTROL_FIELDS, "text", "trained", "state")
FILL_OUT = (*CONTROL_FIELDS, *FILL)
VIEWS_RENAME = {"views_layer": "layer", "views_head": "head"}
ZOOM_IN = (*CONTROL_FIELDS, "text", "zoom_layer", "zoom_head")
ZOOM_RENAME = {"zoom_layer": "layer", "zoom_head": "head"}


def _picked(dropdown: gr.Dropdown):
    """The event of a user's pick in ``dropdown``. Gradio 6.31's dropdown fires ``input`` twice for
    one pick with the mouse (on the option, then again from the blur that closes the list), which
    ran every redraw twice; its ``blur`` fires once per pick, mouse or keyboard (and ``input``
    fired on every blur anyway, so nothing that committed before is lost)."""
    return dropdown.blur


def _commit_events(ctl: dict, text, separator=None) -> list:
    """The events that mean "the user committed a value": never ``change`` (programmatic writes fire it)."""
    events = []
    for comp in ctl.values():
        if isinstance(comp, gr.Dropdown):
            events.append(_picked(comp))
        elif isinstance(comp, gr.Checkbox):
            events.append(comp.input)
        else:  # number and text boxes: Enter or leaving the box
            events += [comp.submit, comp.blur]
    extra = [] if separator is None else [separator.blur, separator.submit]
    return events + [text.blur, text.submit] + extra


DETAIL_IN = (*CONTROL_FIELDS, "text", "separator", "zoom_layer", "zoom_head", "trained", "state")


def _detail(values, text, layer=0, head=0, separator=None, state=None) -> dict:
    """The statistics figure and the zoomed head, after the grid; skipped like the grid was."""
    if state is not None and not h.read_state(state)["fresh"]:
        return {k: gr.skip() for k in ("stats", *ui_zoom.OUTPUTS)}
    return {**h.refresh_stats(values, text, None, separator), **ui_zoom.refresh_zoom(values, text, layer, head)}


def _redraw(n: Named, first, name: str, detail_state: bool = True):
    """Chain attention -> views -> analysis after ``first`` (an event that filled the controls, or a
    list of commit triggers). Each event after the grid skips when the grid event drew nothing new
    (``state["fresh"]``); with ``detail_state=False`` the statistics and zoomed head are drawn anyway
    (the page load: the zoomed head is not part of the pre-rendered page)."""
    fill = not isinstance(first, list)
    def attention(values, history=None, state=None, **kw):  # the grid and the undo history: the first answer, kept small
        state = sessions.page_state(state, loading=name == "load")  # an expired session: redraw everything
        out = h.refresh_attention(values, state=state, keep_status=fill, stats=False, **kw)
        return {**out, "history": ui_history.record(values, out, history)}

    args = dict(fn=n.fn(ui_trained.attention_with_weights(attention)),
                inputs=n.ins(*CONTROL_FIELDS, "text", "separator", "trained", "weights", "state", "history",
                             "grid_layers", "grid_heads"),
                outputs=n.outs(*ATTENTION_OUT, "history"), show_progress="minimal", show_progress_on=n.outs("grid"),
                api_name=f"{name}_attention",
                api_visibility="undocumented", concurrency_id="compute")
    if isinstance(first, list):
        att = gr.on(first, trigger_mode="always_last", **args)
    else:
        att = first.then(**args)
    v_in, a_in = VIEWS_IN, ANALYSIS_IN
    d_in = DETAIL_IN if detail_state else DETAIL_IN[:-1]
    # the rest of the Attention tab (statistics, zoomed head) follows the grid once it is painted,
    # then the other tabs
    painted = att.then(None, None, None, js=PAINT_JS, queue=False, api_visibility="private")
    detail = painted.then(n.fn(ui_trained.with_weights(_detail), ZOOM_RENAME), n.ins(*d_in),
                      n.outs("stats", *ui_zoom.OUTPUTS), show_progress="minimal",
                      show_progress_on=n.outs("stats", "zoom"), api_name=f"{name}_detail",
                      api_visibility="undocumented", concurrency_id="compute")
    views = detail.then(n.fn(ui_trained.with_weights(ui_views.refresh_views), VIEWS_RENAME), n.ins(*v_in),
                     n.outs(*ui_views.OUTPUTS),
                     show_progress="hidden", show_progress_on=n.outs("views_md"), api_name=f"{name}_views",
                     api_visibility="undocumented",
                     concurrency_id="compute")
    views.then(n.fn(ui_trained.with_weights(refresh_analysis)), n.ins(*a_in), n.outs(*ANALYSIS),
               show_progress="hidden", show_progress_on=n.outs("grad"), api_name=f"{name}_analysis",
               api_visibility="undocumented",
               concurrency_id="compute")
    return att


def _wire(demo, ctl: dict, n: Named) -> None:
    """Connect the events; every handler is called with values by name (see ``Named``)."""
    c = n.c
    _redraw(n, _commit_events(ctl, c["text"], c["separator"]), "refresh")

    def preset_fn(data):
        return n.back(apply_preset(data[c["preset"]]))

    _redraw(n, _picked(c["preset"])(preset_fn, {c["preset"]}, n.outs(*FILL_OUT), show_progress_on=n.outs("status"),
                                 api_name="preset", api_visibility="undocumented", queue=False), "preset")

    def link_fn(request: gr.Request):  # a comparison link also carries A and the tab to open
        return n.back({**load_from_url(request), **ui_compare.pinned_from_url(request)})

    # on load the figures of the default page are already drawn (grid, statistics, the Gradients,
    # Latency and Model tabs): the chain redraws only for a link (state["drawn"] differs), except the
    # zoomed head, which every load draws
    loaded = _redraw(n, demo.load(link_fn, None, n.outs(*FILL_OUT, "pinned", "tabs", "grid_layers", "grid_heads"),
                                  show_progress_on=n.outs("status"), api_name="load_link",
                                  api_visibility="undocumented"), "load", detail_state=False)
    _wire_compare(n, loaded)

    _redraw(n, c["reset"].click(lambda: n.back(ui_history.reset()), None, n.outs(*FILL_OUT),
                                show_progress_on=n.outs("status"), api_name="reset", api_visibility="undocumented",
                                queue=False), "reset")
    _redraw(n, c["undo"].click(lambda data: n.back(ui_history.undo(data[c["history"]])), {c["history"]},
                               n.outs(*FILL_OUT, "history"), show_progress_on=n.outs("status"), api_name="undo",
                               api_visibility="undocumented", queue=False), "undo")

    def upload_fn(data):
        return n.back(upload_config(data[c["upload"]]))

    _redraw(n, c["upload"].upload(upload_fn, {c["upload"]}, n.outs(*FILL_OUT), show_progress_on=n.outs("status"),
                                  api_name="upload_config", api_visibility="undocumented"), "upload")
    # figures drawn while their tab was hidden have Plotly's default width: re-measure on opening it
    c["views_tab"].select(None, None, None, js=RESIZE_JS, queue=False, api_visibility="private")
    gr.on([_picked(c["views_layer"]), _picked(c["views_head"])],
          n.fn(ui_trained.with_weights(lambda values, text, layer, head, state=None, separator=None: {
              "view_approximation": ui_views.redraw_approximation(values, text, layer, head, separator)}),
               VIEWS_RENAME),
          n.ins(*VIEWS_IN[:-1]), n.outs("view_approximation"), trigger_mode="always_last", show_progress="minimal",
          api_name="redraw_view", api_visibility="undocumented", concurrency_id="compute")
    # the weights switch: snapshot (or drop) the trained weights, then redraw every tab once
    _redraw(n, c["weights"].input(n.fn(ui_trained.switch), n.ins(*CONTROL_FIELDS, "weights", "train_state", "state"),
                                  n.outs(*ui_trained.SWITCH_OUT), show_progress_on=n.outs("status"),
                                  api_name="weights_switch", api_visibility="undocumented", concurrency_id="compute"),
            "weights")
    c["present"].click(None, None, None, js=PRESENT_JS, queue=False, api_visibility="private")
    c["collapse"].click(None, None, None, js=COLLAPSE_JS, queue=False, api_visibility="private")
    gr.on([_picked(c["zoom_layer"]), _picked(c["zoom_head"])], n.fn(ui_trained.with_weights(ui_zoom.refresh_zoom), ZOOM_RENAME),
          n.ins(*ZOOM_IN, "trained"), n.outs(*ui_zoom.OUTPUTS), trigger_mode="always_last", show_progress="minimal",
          api_name="zoom_head", api_visibility="undocumented", concurrency_id="compute")
    ui_grid.wire(demo, n, ZOOM_IN, ZOOM_RENAME)
    c["share_qs"].change(None, [c["share_qs"]], [c["share_url"]], js=SHARE_JS, queue=False,
                         api_visibility="private")
    demo.load(None, None, [c["share_url"]], js="() => window.location.href", queue=False, api_visibility="private")

    export = c["export"].click(n.fn(ui_trained.with_weights(export_files)),
                               n.ins(*CONTROL_FIELDS, "text", "separator", "trained", "state"),
                               n.outs("files", "export_dir", "status"), api_name="export_click",
                               api_visibility="undocumented")  # API clients: the documented /export below
    # Gradio has copied the file into its cache (bounded by delete_cache): drop our temporary copy
    export.then(cleanup_export, [c["export_dir"]], None, api_name="export_cleanup",
                api_visibility="private", queue=False)

    async def sweep_fn(data, progress=gr.Progress()):
        values, args = n.split(data)
        return n.back(await run_sweep_cancellable(values, args["lengths"], args["mode"], args["state"],
                                                          progress, args.get("sweep_axis")))

    run = c["run"].click(sweep_fn, n.ins(*CONTROL_FIELDS, "lengths", "mode", "sweep_axis", "state"),
                         n.outs("sweep", "sweep_md", "state"), api_name="run_sweep", api_visibility="undocumented",
                         concurrency_id="sweep", concurrency_limit=1)
    c["stop"].click(None, None, None, cancels=[run], api_name="stop_sweep", api_visibility="undocumented",
                    queue=False)
    gr.api(ui_api.api_analyze, api_name="analyze", concurrency_id="compute")
    gr.api(ui_api.api_gradients, api_name="gradients", concurrency_id="compute")
    gr.api(ui_compare.api_compare, api_name="compare_ab", concurrency_id="compute")
    gr.api(ui_api.api_export, api_name="export", concurrency_id="compute")
    gr.api(ui_api.api_benchmark, api_name="benchmark", concurrency_id="sweep", concurrency_limit=1)


COMPARE_IN = (*CONTROL_FIELDS, "text", "pinned")


def _wire_compare(n: Named, loaded) -> None:
    """Compare A/B: pin, recompute on the button or on opening the tab, and after a link has filled
    the controls, A and the tab (``loaded``: the load chain's attention event; ``link_fn`` read the
    link before ``SHARE_JS`` rewrites the address bar)."""
    c = n.c
    compare = dict(fn=n.fn(ui_compare.refresh_compare), inputs=n.ins(*COMPARE_IN), outputs=n.outs(*ui_compare.OUTPUTS),
                   show_progress="minimal", api_visibility="undocumented", concurrency_id="compute")
    c["pin"].click(n.fn(ui_compare.pin_config), n.ins(*CONTROL_FIELDS, "text"), n.outs("pinned"),
                   api_name="pin_config", api_visibility="undocumented").then(api_name="compare_after_pin", **compare)
    c["compare_run"].click(api_name="compare", **compare)
    c["compare_tab"].select(api_name="compare_on_open", **compare)
    loaded.then(api_name="compare_from_link", **compare)
    ui_compare.wire_ab_sweep(n, CONTROL_FIELDS)
