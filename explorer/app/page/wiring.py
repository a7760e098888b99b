"""The page's events: which user action runs which handler, with which inputs, in which queue slot.

Handlers are wired by name (``explorer.app.controls.events.Components``): control values reach a handler
under their ``ModelConfig`` field names, everything else under its component's name.

One user action is a bounded number of requests: controls act on *commit* (a dropdown when its list
closes after a pick, a checkbox on ``input``, a number or text box on Enter / leaving the box), never
on ``change``, so values the app itself writes (a preset, a link, an upload) cannot fire more events.
A commit runs one chain: the attention grid (the first answer, kept small, which also writes the
controls, the status line and the share link), then one request per stage of
``explorer.app.tabs.contract.STAGES``, each running the steps every registered tab has in that stage;
a commit that changes nothing redraws nothing. The "Weights" switch runs the same chain with the
session's trained weights; a preset, link, upload, reset or undo fills the controls, then runs the same
chain once. Each tab wires its own events and endpoints (``Tab.wire``). Interactive work shares the
"compute" slots; sweeps and exports are heavy jobs (``explorer.app.server.jobs``): wired with no Gradio
concurrency limit, so they never wait in the queue every event shares, admitted in their own family
(one per visitor, "busy" when full), run at low priority, their slot freed within one module's run
when stopped or abandoned.
"""

from __future__ import annotations

import gradio as gr

from explorer.app import tabs as registry
from explorer.app.api import endpoints as api
from explorer.app.api.export import cleanup_export, export_files, export_inputs
from explorer.app.controls import checkpoint_door, train_source
from explorer.app.controls import history as undo_history
from explorer.app.controls import weights as weights_switch
from explorer.app.controls.committed import committing, from_committed
from explorer.app.controls.events import QUIET, Components, picked
from explorer.app.controls.fields import CONTROL_FIELDS, without_checkpoint
from explorer.app.controls.schedule_chips import chips_html
from explorer.app.controls.share_js import SHARE_JS
from explorer.app.controls.sources import FILL, apply_preset, load_from_url, upload_config
from explorer.app.page.fit_js import FIT_JS
from explorer.app.page.keyboard_js import KEYBOARD_JS
from explorer.app.page.phone_js import PHONE_JS
from explorer.app.page.render_once_js import RENDER_ONCE_JS
from explorer.app.server import sessions
from explorer.app.server.jobs import run_job
from explorer.app.server.messages import problem, warn
from explorer.app.tabs.attention import FIGURES, refresh_attention
from explorer.app.tabs.contract import STAGES, Page
from models import ConfigError

# A step of the redraw chain that runs in the page only: it resolves after the next frame, so the
# browser draws the grid before it starts the next event (each event's bookkeeping in Gradio's page
# costs a few hundred ms of the main thread on a page of this size, and would otherwise come first).
PAINT_JS = "() => new Promise((done) => requestAnimationFrame(() => setTimeout(() => done([]), 0)))"
# Presentation mode and the collapsible control column are pure page state (a class on <body>, styled
# by assets/style.css): no request, nothing kept on the server; Plotly re-measures after the switch.
PRESENT_JS = (
    "() => { document.body.classList.toggle('presentation'); "
    "setTimeout(() => window.dispatchEvent(new Event('resize')), 120); }"
)
COLLAPSE_JS = (
    "() => { document.body.classList.toggle('controls-hidden'); "
    "setTimeout(() => window.dispatchEvent(new Event('resize')), 120); }"
)

ATTENTION_IN = (
    *CONTROL_FIELDS,
    "text",
    "separator",
    "trained",
    "weights",
    "state",
    "history",
    "grid_layers",
    "grid_heads",
    "train_synced",
    "ckpt_extra",
)
ATTENTION_OUT = (
    *CONTROL_FIELDS,
    *FIGURES,
    "status",
    "share_qs",
    "preset",
    "state",
    "committed",
    "separator",
    "sweep_axis",
    "text",
    "weights",
    "trained",
    "history",
    "weights_md",
    "weights_show",
    *train_source.OUTPUTS,
)
FILL_OUT = (*CONTROL_FIELDS, *FILL)
# and the tabs' link_outputs
LINK_OUT = (*FILL_OUT, "tabs", "open_tab", "grid_layers", "grid_heads", "weights", "ckpt_extra")
WEIGHTS_IN = weights_switch.WEIGHTS_IN


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


def stage_steps(stage: str) -> list:
    """The registered tabs' steps of ``stage``, in the registry's order."""
    return [step for tab in registry.TABS for step in tab.steps if step.stage == stage]


def stage_handler(stage: str, on_load: bool = False):
    """``run(values, weights=None, **named) -> {name: value}``: every registered tab's step of ``stage`` called
    in turn with the request's weights source, their outputs merged (``named``: component values by name).
    On the page's load (``on_load``) a step marked ``on_load`` is handed no ``state``, so it draws even
    though the grid drew nothing new."""
    steps = stage_steps(stage)

    def run(values, weights=None, **named):
        out = {}
        for step in steps:
            args = {step.rename.get(n, n): named[n] for n in _inputs(step, on_load) if n in named}
            out.update(step.fn(values, weights=weights, **args))
        return out

    return run


def _inputs(step, on_load: bool) -> tuple:
    return tuple(n for n in step.inputs if not (on_load and step.on_load and n == "state"))


def stage_event(ui: Components, stage: str, on_load: bool) -> dict:
    """One request for ``stage`` (``stage_handler``), its weights source resolved once for every step."""
    steps = stage_steps(stage)
    names = tuple(dict.fromkeys(n for step in steps for n in _inputs(step, on_load)))
    outputs = tuple(dict.fromkeys(n for step in steps for n in step.outputs))
    return dict(
        fn=ui.handler(from_committed(weights_switch.with_weights(stage_handler(stage, on_load)))),
        inputs=ui.inputs("committed", *names, *WEIGHTS_IN),
        outputs=ui.outputs(*outputs),
        show_progress="minimal" if stage == "detail" else "hidden",
        show_progress_on=ui.outputs(*(steps[0].progress_on or steps[0].outputs[:1])),
        concurrency_id="compute",
        **QUIET,
    )


def redraw_chain(ui: Components, first, name: str, on_load: bool = False):
    """Chain the grid, then every stage of the registered tabs, after ``first`` (an event that filled the
    controls, or a list of commit triggers). Each stage skips when the grid event drew nothing new
    (``state["fresh"]``), except, on the page's load (``on_load``), the steps marked ``on_load`` (the
    zoomed head is not part of the pre-rendered page)."""
    filled = not isinstance(first, list)

    def attention(values, history=None, state=None, train_synced=None, **kw):  # the first answer: the grid,
        state = sessions.page_state(state, loading=name == "load")  # an expired session: redraw everything
        out = refresh_attention(values, state=state, keep_status=filled, stats=False, **kw)
        return {
            **out,
            "history": undo_history.record(without_checkpoint(values), out, history),  # undo, and the
            **train_source.follow(without_checkpoint(values), train_synced),
        }  # Train tab's model when the
        # controls changed

    grid_event = dict(
        fn=ui.handler(committing(weights_switch.attention_with_weights(attention))),
        inputs=ui.inputs(*ATTENTION_IN),
        outputs=ui.outputs(*ATTENTION_OUT),
        show_progress="minimal",
        show_progress_on=ui.outputs("grid"),
        api_name=f"{name}_attention",
        concurrency_id="compute",
        **QUIET,
    )
    drawn = gr.on(first, trigger_mode="always_last", **grid_event) if not filled else first.then(**grid_event)
    # the rest of the Attention tab (statistics, zoomed head) follows the grid once it is painted, then the
    # other tabs' stages
    event = drawn.then(None, None, None, js=PAINT_JS, queue=False, api_visibility="private")
    for stage in STAGES:
        if stage_steps(stage):
            event = event.then(api_name=f"{name}_{stage}", **stage_event(ui, stage, on_load))
    return drawn


def wire(demo, controls: dict, by_name: dict) -> None:
    """Connect every event of the page (``controls``: the config controls; ``by_name``: every component)."""
    ui = Components(by_name)
    redraw_chain(ui, commit_events(controls, ui["text"], ui["separator"]), "refresh")
    loaded = wire_sources(demo, ui)
    wire_page(demo, ui)
    page = Page(demo, ui, loaded)
    for tab in registry.TABS:  # each tab's own events and endpoints
        if tab.wire is not None:
            tab.wire(page)
    wire_api()


def link_tab(request: gr.Request | None) -> dict:
    """A link's ``tab`` -> the tab opened (an id no registered tab has changes nothing), and what each tab
    sets from its own parameters in this event (``Tab.from_link``)."""
    params = dict(request.query_params) if request is not None and request.query_params else {}
    opened = params.get("tab") in registry.ids()
    out = {
        "tabs": gr.Tabs(selected=params["tab"]) if opened else gr.skip(),
        "open_tab": params["tab"] if opened else registry.ids()[0],  # a page opens on the first tab
    }
    for tab in registry.TABS:
        if tab.from_link is not None:
            out.update(tab.from_link(request))
    return out


def open_tab_of(evt: gr.SelectData) -> str | None:
    """The id of the tab a click on the tab bar opened (Gradio's select data carries it; a tab opened by an
    event, not a click, leaves the last value: a costly tab then draws while hidden, never the reverse)."""
    data = getattr(evt, "_data", None) or {}
    value = data.get("id")
    return value if value in registry.ids() else None


def link_outputs() -> tuple:
    return (*LINK_OUT, *dict.fromkeys(n for tab in registry.TABS for n in tab.link_outputs))


def wire_sources(demo, ui: Components):
    """What fills every control at once, each followed by one redraw chain: a preset, the page's link
    (on load), reset, undo, an uploaded config, and the weights switch. Returns the load chain's grid event."""

    def preset_fn(data):
        return ui.back(weights_switch.after_fill(apply_preset(data[ui["preset"]]), data[ui["weights"]]))

    redraw_chain(
        ui,
        picked(ui["preset"])(
            preset_fn,
            {ui["preset"], ui["weights"]},
            ui.outputs(*FILL_OUT, "weights"),
            show_progress_on=ui.outputs("status"),
            api_name="preset",
            queue=False,
            **QUIET,
        ),
        "preset",
    )

    def link_fn(request: gr.Request):  # a link also carries the tab to open and the tabs' own (Compare's A)
        filled = weights_switch.with_trained_preset(
            load_from_url(request, registry.link_params())
        )  # "Trained: ...": its bundle
        return ui.back({**filled, **link_tab(request)})

    # on load the figures of the default page are already drawn (grid, statistics, the Gradients,
    # Latency and Model tabs): the chain redraws only for a link (state["drawn"] differs), except the
    # zoomed head, which every load draws
    loaded = redraw_chain(
        ui,
        demo.load(
            link_fn,
            None,
            ui.outputs(*link_outputs()),
            show_progress_on=ui.outputs("status"),
            api_name="load_link",
            **QUIET,
        ),
        "load",
        on_load=True,
    )

    # Back / Forward: the address bar holds an earlier committed link (explorer.app.controls.share_js); it is
    # read again as on load, and its figures drawn, without reloading the page
    def back_fn(request: gr.Request):
        return ui.back({**undo_history.from_address(request, registry.link_params()), **link_tab(request)})

    redraw_chain(
        ui,
        ui["url_back"].click(
            back_fn,
            None,
            ui.outputs(*link_outputs()),
            show_progress_on=ui.outputs("status"),
            api_name="back_link",
            **QUIET,
        ),
        "back",
        on_load=True,
    )

    def reset_fn(data):
        return ui.back(weights_switch.after_fill(undo_history.reset(), data[ui["weights"]]))

    redraw_chain(
        ui,
        ui["reset"].click(
            reset_fn,
            {ui["weights"]},
            ui.outputs(*FILL_OUT, "weights"),
            show_progress_on=ui.outputs("status"),
            api_name="reset",
            queue=False,
            **QUIET,
        ),
        "reset",
    )

    def undo_fn(data):  # the controls too: Undo right after Reset, before its redraw recorded the defaults
        values, named = ui.split(data)
        return ui.back(weights_switch.after_fill(undo_history.undo(named["history"], values), named["weights"]))

    redraw_chain(
        ui,
        ui["undo"].click(
            undo_fn,
            ui.inputs(*CONTROL_FIELDS, "history", "weights"),
            ui.outputs(*FILL_OUT, "history", "weights"),
            show_progress_on=ui.outputs("status"),
            api_name="undo",
            queue=False,
            **QUIET,
        ),
        "undo",
    )

    def upload_fn(data):
        return ui.back(weights_switch.after_fill(upload_config(data[ui["upload"]]), data[ui["weights"]]))

    redraw_chain(
        ui,
        ui["upload"].upload(
            upload_fn,
            {ui["upload"], ui["weights"]},
            ui.outputs(*FILL_OUT, "weights"),
            show_progress_on=ui.outputs("status"),
            api_name="upload_config",
            **QUIET,
        ),
        "upload",
    )
    # the weights switch: snapshot (or drop) the trained weights, then redraw every tab once
    switched = ui["weights"].input(
        ui.handler(weights_switch.switch),
        ui.inputs(*CONTROL_FIELDS, "weights", "train_state", "state"),
        ui.outputs(*weights_switch.SWITCH_OUT),
        show_progress_on=ui.outputs("status"),
        api_name="weights_switch",
        concurrency_id="compute",
        **QUIET,
    )
    redraw_chain(ui, switched, "weights")
    # "a model trained with this pattern exists: show it": the explicit switch to that bundle, then one redraw
    showing = ui["weights_show"].click(
        ui.handler(weights_switch.show_trained),
        ui.inputs(*CONTROL_FIELDS, "weights", "state"),
        ui.outputs(*weights_switch.SHOW_OUT),
        show_progress_on=ui.outputs("status"),
        api_name="show_trained",
        concurrency_id="compute",
        **QUIET,
    )
    redraw_chain(ui, showing, "show_trained")
    # a checkpoint opened by name or uploaded: the Weights choice and every control set, then one redraw
    opened = ui["ckpt_open"].click(
        ui.handler(checkpoint_door.open_named),
        ui.inputs(*CONTROL_FIELDS, "ckpt_id", "ckpt_extra", "state"),
        ui.outputs(*checkpoint_door.OUT),
        show_progress_on=ui.outputs("status"),
        api_name="open_checkpoint",
        concurrency_id="compute",
        **QUIET,
    )
    redraw_chain(ui, opened, "checkpoint")
    uploaded = ui["ckpt_upload"].upload(
        ui.handler(checkpoint_door.open_upload),
        ui.inputs(*CONTROL_FIELDS, "ckpt_upload", "ckpt_extra", "state"),
        ui.outputs(*checkpoint_door.OUT),
        show_progress_on=ui.outputs("status"),
        api_name="upload_checkpoint",
        concurrency_id="compute",
        **QUIET,
    )
    redraw_chain(ui, uploaded, "checkpoint_upload")
    return loaded


def wire_page(demo, ui: Components) -> None:
    """The page frame's own events: presentation mode, the control column, the share link, the page
    scripts, and the Export button (every registered tab's part, a heavy job of the export family)."""
    ui["present"].click(None, None, None, js=PRESENT_JS, queue=False, api_visibility="private")
    ui["collapse"].click(None, None, None, js=COLLAPSE_JS, queue=False, api_visibility="private")
    ui["share_qs"].change(None, [ui["share_qs"]], [ui["share_url"]], js=SHARE_JS, queue=False, api_visibility="private")
    for name in ("layer_schedule", "n_layers"):  # the schedule's chips follow its box and the layer count
        ui[name].change(
            chips_html,
            ui.outputs("layer_schedule", "n_layers"),  # a list: the values in this order
            ui.outputs("schedule_chips"),
            queue=False,
            show_progress="hidden",
            show_progress_on=ui.outputs("status"),  # no new loading-status target (the page updates each one)
            api_visibility="private",
        )
    demo.load(None, None, [ui["share_url"]], js="() => window.location.href", queue=False, api_visibility="private")
    demo.load(None, None, None, js=FIT_JS, queue=False, api_visibility="private")  # figures fit when shown
    demo.load(None, None, None, js=RENDER_ONCE_JS, queue=False, api_visibility="private")  # one draw per update
    demo.load(None, None, None, js=KEYBOARD_JS, queue=False, api_visibility="private")  # Enter keeps focus
    demo.load(None, None, None, js=PHONE_JS, queue=False, api_visibility="private")  # phone and projected layouts
    ui["tabs"].select(  # a State holds no loading status: the grid's own target, and none shown
        open_tab_of,
        None,
        ui.outputs("open_tab"),
        queue=False,
        show_progress="hidden",
        show_progress_on=ui.outputs("grid"),
        api_visibility="private",
    )
    export_handler = ui.handler(weights_switch.with_weights(export_files))

    async def export_fn(data, request: gr.Request):
        try:
            return await run_job("export", request, lambda _should_stop: export_handler(data))
        except ConfigError as exc:  # busy: this visitor's other job, or the export slot taken
            return ui.back({"files": gr.skip(), "export_dir": gr.skip(), "status": warn(problem(exc))})

    exported = ui["export"].click(
        export_fn,
        ui.inputs(*CONTROL_FIELDS, *export_inputs(), *WEIGHTS_IN),
        ui.outputs("files", "export_dir", "status"),
        api_name="export_click",
        concurrency_limit=None,
        **QUIET,
    )  # API clients: the documented /export
    # Gradio has copied the file into its cache (bounded by delete_cache): drop our temporary copy (a session
    # whose clean-up never ran has it deleted by its next export, and explorer.app.api.export bounds them all)
    exported.then(
        cleanup_export, [ui["export_dir"]], None, api_name="export_cleanup", api_visibility="private", queue=False
    )


def wire_api() -> None:
    """The documented endpoints (``explorer.app.api.endpoints``), in the same slots or families as the UI's work."""
    gr.api(api.api_analyze, api_name="analyze", concurrency_id="compute")
    gr.api(api.api_gradients, api_name="gradients", concurrency_id="compute")
    gr.api(api.api_compare, api_name="compare_ab", concurrency_id="compute")
    gr.api(
        api.api_export, api_name="export", concurrency_limit=None
    )  # heavy jobs: admitted by explorer.app.server.jobs
    gr.api(api.api_benchmark, api_name="benchmark", concurrency_limit=None)
