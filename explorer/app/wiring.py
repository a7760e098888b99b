"""The app's events: which user action runs which handler, with which inputs, in which queue slot.

Handlers are wired by name: each event's inputs are a *set* of components, Gradio passes them as one
dict, ``Components.handler`` turns it into ``{name: value}`` (control values under their
``ModelConfig`` field names) and maps the handler's ``{name: value}`` result back to components.

One user action is a bounded number of requests: controls act on *commit* (a dropdown when its list
closes after a pick, a checkbox on ``input``, a number or text box on Enter / leaving the box), never
on ``change``, so values the app itself writes (a preset, a link, an upload) cannot fire more events.
A commit runs one chain: attention grid (the first answer, kept small) -> statistics and zoomed head
-> variant views -> gradients / model card; a commit that changes nothing redraws nothing. The
"Weights" switch runs the same chain with the session's trained weights; a preset, link, upload,
reset or undo fills the controls, then runs the same chain once. Interactive work shares the
"compute" slots; sweeps and exports are heavy jobs (``explorer.app.jobs``): wired with no Gradio
concurrency limit, so they never wait in the queue every event shares, admitted in their own family
(one per visitor, "busy" when full), run at low priority, their slot freed within one module's run
when stopped or abandoned.
"""
from __future__ import annotations

import gradio as gr

from explorer.app import api, checkpoint_door, sessions
from explorer.app import history as undo_history
from explorer.app import weights as weights_switch
from explorer.app.controls import CONTROL_FIELDS, without_checkpoint
from explorer.app.export import cleanup_export, export_files
from explorer.app.fit_js import FIT_JS
from explorer.app.jobs import run_job
from explorer.app.messages import problem, warn
from explorer.app.keyboard_js import KEYBOARD_JS
from explorer.app.phone_js import PHONE_JS
from explorer.app.render_once_js import RENDER_ONCE_JS
from explorer.app.share_js import SHARE_JS
from explorer.app.sources import FILL, apply_preset, load_from_url, upload_config
from explorer.app.state import read_state
from explorer.app.tabs import compare, grid, stack_zoom, train_source, views, zoom
from explorer.app.tabs import long_context as long_context_tab
from explorer.app.tabs import why as why_tab
from explorer.app.tabs import surgery as surgery_tab
from explorer.app.tabs.analysis import ANALYSIS, refresh_analysis
from explorer.app.tabs.attention import FIGURES, refresh_attention, refresh_stats
from explorer.app.tabs.latency import run_sweep_job
from explorer.runtime.load import LOAD
from models import ConfigError

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

ATTENTION_IN = (*CONTROL_FIELDS, "text", "separator", "trained", "weights", "state", "history", "grid_layers",
                "grid_heads", "train_synced")
ATTENTION_OUT = (*CONTROL_FIELDS, *FIGURES, "status", "share_qs", "preset", "state", "separator", "sweep_axis", "text",
                 "weights", "trained", "history", "weights_md", "weights_show", *train_source.OUTPUTS)
DETAIL_IN = (*CONTROL_FIELDS, "text", "separator", "zoom_layer", "zoom_head", "trained", "weights", "state")
VIEWS_IN = (*CONTROL_FIELDS, "text", "separator", "views_layer", "views_head", "trained", "weights", "state")
ANALYSIS_IN = (*CONTROL_FIELDS, "text", "trained", "weights", "state")
ZOOM_IN = (*CONTROL_FIELDS, "text", "separator", "zoom_layer", "zoom_head", "trained", "weights")
SURGERY_IN = (*CONTROL_FIELDS, "text", "separator", "trained", "weights", "state")
COMPARE_IN = (*CONTROL_FIELDS, "text", "separator", "pinned", "weights", "trained")
FILL_OUT = (*CONTROL_FIELDS, *FILL)
VIEWS_RENAME = {"views_layer": "layer", "views_head": "head"}
ZOOM_RENAME = {"zoom_layer": "layer", "zoom_head": "head"}
QUIET = dict(api_visibility="undocumented")  # UI events: callable, not listed in the API page


class Components:
    """Components by name; ``handler(fn)`` adapts ``fn(values, **named) -> {name: value}``
    (``values``: the control values by field name) to Gradio's dict-in / dict-out convention."""

    def __init__(self, by_name: dict):
        self.by_name = by_name
        self.names = {comp: name for name, comp in by_name.items()}

    def __getitem__(self, name: str):
        return self.by_name[name]

    def inputs(self, *names) -> set:
        return {self.by_name[name] for name in names}

    def outputs(self, *names) -> list:
        return [self.by_name[name] for name in names]

    def split(self, data: dict) -> tuple:
        """Gradio's ``{component: value}`` -> ``(control values by field, other values by name)``."""
        named = {self.names[comp]: value for comp, value in data.items()}
        return {name: named.pop(name) for name in CONTROL_FIELDS if name in named}, named

    def back(self, out: dict) -> dict:
        return {self.by_name[name]: value for name, value in out.items()}

    def handler(self, fn, rename: dict | None = None):
        rename = rename or {}

        def run(data: dict):
            values, named = self.split(data)
            with LOAD.busy():
                return self.back(fn(values, **{rename.get(k, k): v for k, v in named.items()}))
        return run


def picked(dropdown: gr.Dropdown):
    """The event of a user's pick in ``dropdown``. Gradio 6.31's dropdown fires ``input`` twice for
    one pick with the mouse (on the option, then again from the blur that closes the list), which
    ran every redraw twice; its ``blur`` fires once per pick, mouse or keyboard (and ``input``
    fired on every blur anyway, so nothing that committed before is lost)."""
    return dropdown.blur


def commit_events(controls: dict, text, separator) -> list:
    """The events that mean "the user committed a value": never ``change`` (programmatic writes fire it)."""
    events = []
    for comp in controls.values():
        if isinstance(comp, gr.Dropdown):
            events.append(picked(comp))
        elif isinstance(comp, gr.Checkbox):
            events.append(comp.input)
        else:  # number and text boxes: Enter or leaving the box
            events += [comp.submit, comp.blur]
    return events + [text.blur, text.submit, separator.blur, separator.submit]


def detail(values, text, layer=0, head=0, separator=None, state=None, weights=None) -> dict:
    """The statistics figure and the zoomed head, after the grid; skipped like the grid was."""
    if state is not None and not read_state(state)["fresh"]:
        return {name: gr.skip() for name in ("stats", *zoom.OUTPUTS)}
    return {**refresh_stats(values, text, None, separator, weights),
            **zoom.refresh_zoom(values, text, layer, head, separator, weights)}


def redraw_chain(ui: Components, first, name: str, detail_state: bool = True):
    """Chain attention -> detail -> views -> analysis after ``first`` (an event that filled the
    controls, or a list of commit triggers). Each event after the grid skips when the grid event drew
    nothing new (``state["fresh"]``); with ``detail_state=False`` the statistics and zoomed head are
    drawn anyway (the page load: the zoomed head is not part of the pre-rendered page)."""
    filled = not isinstance(first, list)

    def attention(values, history=None, state=None, train_synced=None, **kw):  # the first answer: the grid,
        state = sessions.page_state(state, loading=name == "load")  # an expired session: redraw everything
        out = refresh_attention(values, state=state, keep_status=filled, stats=False, **kw)
        return {**out, "history": undo_history.record(without_checkpoint(values), out, history),  # undo, and the
                **train_source.follow(without_checkpoint(values), train_synced)}  # Train tab's model when the
                                                                                   # controls changed

    grid_event = dict(fn=ui.handler(weights_switch.attention_with_weights(attention)),
                      inputs=ui.inputs(*ATTENTION_IN), outputs=ui.outputs(*ATTENTION_OUT), show_progress="minimal",
                      show_progress_on=ui.outputs("grid"), api_name=f"{name}_attention", concurrency_id="compute",
                      **QUIET)
    drawn = gr.on(first, trigger_mode="always_last", **grid_event) if not filled else first.then(**grid_event)
    detail_in = DETAIL_IN if detail_state else DETAIL_IN[:-1]
    # the rest of the Attention tab (statistics, zoomed head) follows the grid once it is painted,
    # then the other tabs
    painted = drawn.then(None, None, None, js=PAINT_JS, queue=False, api_visibility="private")
    details = painted.then(ui.handler(weights_switch.with_weights(detail), ZOOM_RENAME), ui.inputs(*detail_in),
                           ui.outputs("stats", *zoom.OUTPUTS), show_progress="minimal",
                           show_progress_on=ui.outputs("stats", "zoom"), api_name=f"{name}_detail",
                           concurrency_id="compute", **QUIET)
    viewed = details.then(ui.handler(weights_switch.with_weights(views.refresh_views), VIEWS_RENAME),
                          ui.inputs(*VIEWS_IN), ui.outputs(*views.OUTPUTS), show_progress="hidden",
                          show_progress_on=ui.outputs("views_md"), api_name=f"{name}_views", concurrency_id="compute",
                          **QUIET)
    analysed = viewed.then(ui.handler(weights_switch.with_weights(refresh_analysis)), ui.inputs(*ANALYSIS_IN),
                           ui.outputs(*ANALYSIS), show_progress="hidden", show_progress_on=ui.outputs("grad"),
                           api_name=f"{name}_analysis", concurrency_id="compute", **QUIET)
    analysed.then(ui.handler(weights_switch.with_weights(surgery_tab.refresh_surgery)), ui.inputs(*SURGERY_IN),
                  ui.outputs(*surgery_tab.OUTPUTS), show_progress="hidden", show_progress_on=ui.outputs("surgery_md"),
                  api_name=f"{name}_surgery", concurrency_id="compute", **QUIET)
    return drawn


def wire(demo, controls: dict, by_name: dict) -> None:
    """Connect every event of the page (``controls``: the config controls; ``by_name``: every component)."""
    ui = Components(by_name)
    redraw_chain(ui, commit_events(controls, ui["text"], ui["separator"]), "refresh")
    wire_sources(demo, ui)
    wire_tabs(demo, ui)
    long_context_tab.wire(demo, ui)  # its events and the /long_context endpoint
    why_tab.wire(demo, ui)  # its events and the /logit_lens, /attribution, /ablation, /patching, /circuits endpoints
    wire_api()


def wire_sources(demo, ui: Components) -> None:
    """What fills every control at once, each followed by one redraw chain: a preset, the page's link
    (on load), reset, undo, an uploaded config, and the weights switch."""
    def preset_fn(data):
        return ui.back(weights_switch.after_fill(apply_preset(data[ui["preset"]]), data[ui["weights"]]))

    redraw_chain(ui, picked(ui["preset"])(preset_fn, {ui["preset"], ui["weights"]}, ui.outputs(*FILL_OUT, "weights"),
                                          show_progress_on=ui.outputs("status"), api_name="preset", queue=False,
                                          **QUIET), "preset")

    def link_fn(request: gr.Request):  # a comparison link also carries A and the tab to open
        filled = weights_switch.with_trained_preset(load_from_url(request))  # a "Trained: ..." link: its bundle
        return ui.back({**filled, **compare.pinned_from_url(request)})

    # on load the figures of the default page are already drawn (grid, statistics, the Gradients,
    # Latency and Model tabs): the chain redraws only for a link (state["drawn"] differs), except the
    # zoomed head, which every load draws
    loaded = redraw_chain(ui, demo.load(link_fn, None, ui.outputs(*FILL_OUT, "pinned", "tabs", "grid_layers",
                                                                  "grid_heads", "weights", "ckpt_extra"),
                                        show_progress_on=ui.outputs("status"), api_name="load_link", **QUIET),
                          "load", detail_state=False)
    wire_compare(ui, loaded)
    # Back / Forward: the address bar holds an earlier committed link (explorer.app.share_js); it is read
    # again as on load, and its figures drawn, without reloading the page
    def back_fn(request: gr.Request):
        return ui.back({**undo_history.from_address(request), **compare.pinned_from_url(request)})

    redraw_chain(ui, ui["url_back"].click(back_fn, None, ui.outputs(*FILL_OUT, "pinned", "tabs", "grid_layers",
                                                                    "grid_heads", "weights", "ckpt_extra"),
                                          show_progress_on=ui.outputs("status"), api_name="back_link", **QUIET),
                 "back", detail_state=False)
    def reset_fn(data):
        return ui.back(weights_switch.after_fill(undo_history.reset(), data[ui["weights"]]))

    redraw_chain(ui, ui["reset"].click(reset_fn, {ui["weights"]}, ui.outputs(*FILL_OUT, "weights"),
                                       show_progress_on=ui.outputs("status"), api_name="reset", queue=False, **QUIET),
                 "reset")

    def undo_fn(data):  # the controls too: Undo right after Reset, before its redraw recorded the defaults
        values, named = ui.split(data)
        return ui.back(weights_switch.after_fill(undo_history.undo(named["history"], values), named["weights"]))

    redraw_chain(ui, ui["undo"].click(undo_fn, ui.inputs(*CONTROL_FIELDS, "history", "weights"),
                                      ui.outputs(*FILL_OUT, "history", "weights"), show_progress_on=ui.outputs("status"),
                                      api_name="undo", queue=False, **QUIET), "undo")

    def upload_fn(data):
        return ui.back(weights_switch.after_fill(upload_config(data[ui["upload"]]), data[ui["weights"]]))

    redraw_chain(ui, ui["upload"].upload(upload_fn, {ui["upload"], ui["weights"]}, ui.outputs(*FILL_OUT, "weights"),
                                         show_progress_on=ui.outputs("status"), api_name="upload_config", **QUIET),
                 "upload")
    # the weights switch: snapshot (or drop) the trained weights, then redraw every tab once
    switched = ui["weights"].input(ui.handler(weights_switch.switch),
                                   ui.inputs(*CONTROL_FIELDS, "weights", "train_state", "state"),
                                   ui.outputs(*weights_switch.SWITCH_OUT), show_progress_on=ui.outputs("status"),
                                   api_name="weights_switch", concurrency_id="compute", **QUIET)
    redraw_chain(ui, switched, "weights")
    # "a model trained with this pattern exists: show it": the explicit switch to that bundle, then one redraw
    showing = ui["weights_show"].click(ui.handler(weights_switch.show_trained), ui.inputs(*CONTROL_FIELDS, "weights",
                                                                                          "state"),
                                       ui.outputs(*weights_switch.SHOW_OUT), show_progress_on=ui.outputs("status"),
                                       api_name="show_trained", concurrency_id="compute", **QUIET)
    redraw_chain(ui, showing, "show_trained")
    # a checkpoint opened by name or uploaded: the Weights choice and every control set, then one redraw
    opened = ui["ckpt_open"].click(ui.handler(checkpoint_door.open_named),
                                   ui.inputs(*CONTROL_FIELDS, "ckpt_id", "ckpt_extra", "state"),
                                   ui.outputs(*checkpoint_door.OUT), show_progress_on=ui.outputs("status"),
                                   api_name="open_checkpoint", concurrency_id="compute", **QUIET)
    redraw_chain(ui, opened, "checkpoint")
    uploaded = ui["ckpt_upload"].upload(ui.handler(checkpoint_door.open_upload),
                                        ui.inputs(*CONTROL_FIELDS, "ckpt_upload", "ckpt_extra", "state"),
                                        ui.outputs(*checkpoint_door.OUT), show_progress_on=ui.outputs("status"),
                                        api_name="upload_checkpoint", concurrency_id="compute", **QUIET)
    redraw_chain(ui, uploaded, "checkpoint_upload")


def wire_tabs(demo, ui: Components) -> None:
    """The tabs' own events: views pickers, zoom, grid pickers, share link, export, the sweep."""
    # figures drawn while their tab was hidden have Plotly's default width: re-measure on opening it
    ui["views_tab"].select(None, None, None, js=RESIZE_JS, queue=False, api_visibility="private")

    def approximation(values, text, layer, head, separator=None, weights=None):
        return {"view_approximation": views.redraw_approximation(values, text, layer, head, separator, weights)}

    gr.on([picked(ui["views_layer"]), picked(ui["views_head"])],
          ui.handler(weights_switch.with_weights(approximation), VIEWS_RENAME), ui.inputs(*VIEWS_IN[:-1]),
          ui.outputs("view_approximation"), trigger_mode="always_last", show_progress="minimal",
          api_name="redraw_view", concurrency_id="compute", **QUIET)
    ui["surgery_train"].click(ui.handler(surgery_tab.to_train_tab), ui.inputs(*CONTROL_FIELDS),
                              ui.outputs(*surgery_tab.TRAIN_OUT), api_name="surgery_train", queue=False, **QUIET)
    ui["present"].click(None, None, None, js=PRESENT_JS, queue=False, api_visibility="private")
    ui["collapse"].click(None, None, None, js=COLLAPSE_JS, queue=False, api_visibility="private")
    gr.on([picked(ui["zoom_layer"]), picked(ui["zoom_head"])],
          ui.handler(weights_switch.with_weights(zoom.refresh_zoom), ZOOM_RENAME), ui.inputs(*ZOOM_IN),
          ui.outputs(*zoom.OUTPUTS), trigger_mode="always_last", show_progress="minimal", api_name="zoom_head",
          concurrency_id="compute", **QUIET)
    grid.wire(demo, ui, ZOOM_IN, ZOOM_RENAME)
    stack_zoom.wire(demo, ui)  # a click on a panel of the encoder-decoder's extra grids
    ui["share_qs"].change(None, [ui["share_qs"]], [ui["share_url"]], js=SHARE_JS, queue=False,
                          api_visibility="private")
    demo.load(None, None, [ui["share_url"]], js="() => window.location.href", queue=False, api_visibility="private")
    demo.load(None, None, None, js=FIT_JS, queue=False, api_visibility="private")  # figures fit when shown
    demo.load(None, None, None, js=RENDER_ONCE_JS, queue=False, api_visibility="private")  # one draw per update
    demo.load(None, None, None, js=KEYBOARD_JS, queue=False, api_visibility="private")  # Enter keeps focus
    demo.load(None, None, None, js=PHONE_JS, queue=False, api_visibility="private")  # phone and projected layouts
    export_handler = ui.handler(weights_switch.with_weights(export_files))

    async def export_fn(data, request: gr.Request):
        try:
            return await run_job("export", request, lambda _should_stop: export_handler(data))
        except ConfigError as exc:  # busy: this visitor's other job, or the export slot taken
            return ui.back({"files": gr.skip(), "export_dir": gr.skip(), "status": warn(problem(exc))})

    exported = ui["export"].click(export_fn, ui.inputs(*CONTROL_FIELDS, "text", "separator", "trained", "weights", "state",
                                                   "zoom_layer", "zoom_head", "pinned", "train_state", "export_dir"),
                                  ui.outputs("files", "export_dir", "status"), api_name="export_click",
                                  concurrency_limit=None, **QUIET)  # API clients: the documented /export
    # Gradio has copied the file into its cache (bounded by delete_cache): drop our temporary copy (a session
    # whose clean-up never ran has it deleted by its next export, and explorer.app.export bounds them all)
    exported.then(cleanup_export, [ui["export_dir"]], None, api_name="export_cleanup", api_visibility="private",
                  queue=False)

    async def sweep_fn(data, request: gr.Request, progress=gr.Progress()):
        values, named = ui.split(data)
        values = weights_switch.with_checkpoint(values, named.get("weights"))  # a checkpoint: at its sizes
        return ui.back(await run_sweep_job(values, named["lengths"], named["mode"], named["state"], progress,
                                           named.get("sweep_axis"), request))

    run = ui["run"].click(sweep_fn, ui.inputs(*CONTROL_FIELDS, "lengths", "mode", "sweep_axis", "state", "weights"),
                          ui.outputs("sweep", "sweep_md", "state"), api_name="run_sweep", concurrency_limit=None,
                          **QUIET)
    ui["stop"].click(None, None, None, cancels=[run], api_name="stop_sweep", queue=False, **QUIET)


def wire_compare(ui: Components, loaded) -> None:
    """Compare A/B: pin, recompute on the button or on opening the tab, and after a link has filled
    the controls, A and the tab (``loaded``: the load chain's attention event; the link was read
    before ``SHARE_JS`` rewrites the address bar)."""
    refresh = dict(fn=ui.handler(weights_switch.with_weights(compare.refresh_compare)), inputs=ui.inputs(*COMPARE_IN),
                   outputs=ui.outputs(*compare.OUTPUTS), show_progress="minimal", concurrency_id="compute", **QUIET)
    ui["pin"].click(ui.handler(compare.pin_config), ui.inputs(*CONTROL_FIELDS, "text"), ui.outputs("pinned"),
                    api_name="pin_config", **QUIET).then(api_name="compare_after_pin", **refresh)
    ui["compare_run"].click(api_name="compare", **refresh)
    ui["compare_tab"].select(api_name="compare_on_open", **refresh)
    linked = loaded.then(api_name="compare_from_link", **refresh)
    # once a link is read, the address bar and the Share box hold what is shown: the link's normalised
    # form, or the plain address when the link was refused (never the refused query)
    linked.then(None, [ui["share_qs"]], [ui["share_url"]], js=SHARE_JS, queue=False, api_visibility="private")
    # the comparison's full link, and the address bar in step with it (as the main share link)
    ui["compare_qs"].change(None, [ui["compare_qs"]], [ui["compare_link"]], js=SHARE_JS, queue=False,
                            api_visibility="private")
    compare.wire_ab_sweep(ui, CONTROL_FIELDS)


def wire_api() -> None:
    """The documented endpoints (``explorer.app.api``), in the same slots or families as the UI's work."""
    gr.api(api.api_analyze, api_name="analyze", concurrency_id="compute")
    gr.api(api.api_gradients, api_name="gradients", concurrency_id="compute")
    gr.api(api.api_compare, api_name="compare_ab", concurrency_id="compute")
    gr.api(api.api_export, api_name="export", concurrency_limit=None)  # heavy jobs: admitted by explorer.app.jobs
    gr.api(api.api_benchmark, api_name="benchmark", concurrency_limit=None)
