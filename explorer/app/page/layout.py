"""The Gradio app's page: controls on the left, the figures' tabs on the right (events: ``wiring.py``).

``build_app()`` computes the default config's figures first (the page paints without a request),
creates every widget under a name, and hands the names to ``wiring.wire``. The controls are generated
from ``ModelConfig``'s fields and the registries (``explorer.app.controls.fields``), so a registered variant
brings its own. The queue is bounded (a full queue answers "busy") and the concurrency slots come from
``explorer.runtime.settings``.
"""

from __future__ import annotations

from pathlib import Path

import gradio as gr
from starlette.middleware import Middleware

from explorer.app import tabs as registry
from explorer.app.api.export import cleanup_export
from explorer.app.controls.checkpoint_door import build_door
from explorer.app.controls.fields import (
    CONTROL_FIELDS,
    MODERN_FIELDS,
    SIZE_FIELDS,
    choice_marks,
    config_values,
    make_control,
    unused_categories,
    visible_fields,
)
from explorer.app.controls.schedule_chips import chips_html
from explorer.app.controls.share_js import LONG_LINK_HEAD
from explorer.app.controls.state import new_state
from explorer.app.controls.weights import BUNDLED, SHARE_NOTE, SHOW_TRAINED, all_choices, chosen, weights_line
from explorer.app.page.transport import PAGE_DELIVERY
from explorer.app.page.wiring import wire
from explorer.app.server import request_limits, scheduling, sessions
from explorer.app.server.gradio_compat import shorten_errors
from explorer.app.server.request_limits import RequestLimits
from explorer.app.tabs.contract import Landing
from explorer.app.tabs.parts import stacks
from explorer.runtime import settings
from explorer.runtime.device import configure_threads, device_label, on_cpu
from explorer.runtime.limits import MAX_TEXT_BYTES
from explorer.runtime.presets import CUSTOM, PRESET_INFO, available
from explorer.runtime.text import DEFAULT_TEXT
from models import ModelConfig
from models.config import CATEGORIES

ASSETS = Path(__file__).resolve().parents[3] / "assets"  # explorer/app/page/layout.py -> the repository
# Help text (the controls' info lines, the .hint notes, the header's line) and placeholders: the Soft
# theme's slate-400 reads at 2.45-2.56:1 on its light backgrounds; slate-600 reaches 7.2:1 (WCAG AA
# asks >= 4.5:1). The labels' indigo-500 on indigo-100 reads at 3.6:1; indigo-700 at 6.3:1. Dark mode
# (Gradio follows the OS preference) keeps its own: slate-400 (5.7-7.5:1), white labels on indigo-600.
THEME = gr.themes.Soft(
    primary_hue="indigo",
    secondary_hue="sky",
    neutral_hue="slate",
    font=["DejaVu Sans", "Inter", "system-ui", "sans-serif"],
).set(
    body_text_color_subdued="*neutral_600",
    body_text_color_subdued_dark="*neutral_400",
    input_placeholder_color="*neutral_600",
    input_placeholder_color_dark="*neutral_400",
    block_label_text_color="*primary_700",
    block_title_text_color="*primary_700",
)
SESSIONS = 200  # sessions kept in all: bounds Gradio's per-session copies. Past it (and past
# EXPLORER_SESSIONS_PER_CLIENT of one address), the least recently used session
# of the address holding the most goes (explorer.app.server.request_limits); besides,
# a session idle for EXPLORER_SESSION_TTL s (1 h) expires
MAX_TEXT_CHARS = 4096  # the text box refuses more (only the first 256 bytes are used anyway)
# uploads: config JSON (refused above 100 kB by its handler) and the Train tab's trained models
LAUNCH_OPTIONS = {
    "theme": THEME,
    "css_paths": [ASSETS / "style.css"],
    "max_file_size": "24mb",
    "head": LONG_LINK_HEAD,
    "state_session_capacity": SESSIONS,
    "show_error": True,
    # bodies, uploads, queue places and sessions bounded per request and per client address;
    # compression outside the limits: it compresses answers they have already cut, and they
    # read answers (an upload's paths, an error's fields) uncompressed
    "app_kwargs": {"middleware": [PAGE_DELIVERY, Middleware(RequestLimits)]},
}
ERROR_CHARS = 600  # Gradio's error messages (its validation quotes a refused value whole) cut to this
DELETE_CACHE = (300, 900)  # every 5 min, delete served files (exports) older than 15 min


def header() -> str:
    return (
        f"<div id='app-header'><h1>Transformer Family Explorer</h1>"
        f"<p>Assemble a transformer from the catalogue and see what each choice does: attention maps, "
        f"head labels on a trained model, gradient norms, and latency / memory measured on this machine.</p>"
        f"<span class='device-badge'>running on {device_label()}</span></div>"
    )


def build_app() -> gr.Blocks:
    configure_threads()
    cfg = ModelConfig()
    values = {name: getattr(cfg, name) for name in CONTROL_FIELDS}  # the controls as the page opens
    weights = chosen(values, BUNDLED, None)  # the bundled model when one serves the default config
    landing = Landing(cfg, DEFAULT_TEXT, weights)  # every tab's first paint is drawn from it, before any request
    # analytics off: no telemetry calls from an offline host (and Gradio 6.31 crashes comparing a
    # theme whose font list mixes names and Font objects with its built-in themes when it is on).
    with gr.Blocks(
        title="Transformer Family Explorer", fill_width=True, analytics_enabled=False, delete_cache=DELETE_CACHE
    ) as demo:
        # the queue first: Gradio rebuilds its server app (and the page config) on every queue() call,
        # which costs least while the page is empty; the settings are read when an event is queued
        demo.queue(max_size=settings.queue_size(), default_concurrency_limit=settings.compute_slots())
        comps = {
            # per-session values: no time_to_live of the main state's own (it goes with its session:
            # explorer.app.server.sessions expires idle sessions, and an expired page redraws everything)
            "state": gr.State(new_state(cfg, DEFAULT_TEXT, weights)),
            "export_dir": gr.State(None, time_to_live=600, delete_callback=cleanup_export),
            "trained": gr.State(None, time_to_live=3600),  # the Train tab's snapshot (analysis.weights)
            "pinned": gr.State(None),  # the config pinned as A (Compare A/B)
            "history": gr.State([cfg.to_dict()]),  # configs drawn so far, for Undo
            "committed": gr.State(config_values(cfg)),  # the controls the last grid was drawn with: the
            # chain's later stages read them (controls.committed)
            "open_tab": gr.State(None),  # the tab the visitor has open (None: unknown, as for an API client):
        }  # a costly tab's step of the chain draws only while its tab is open (page.wiring.open_tab_of)
        gr.HTML(header())
        with gr.Row(elem_id="view-buttons"):
            comps["reset"] = gr.Button("Reset to defaults", size="sm", elem_id="reset", scale=0, min_width=150)
            comps["undo"] = gr.Button("Undo", size="sm", elem_id="undo", scale=0, min_width=90)
            for tab in registry.TABS:  # a tab's buttons that stay visible above the tabs (Compare's "Pin as A")
                if tab.toolbar is not None:
                    comps.update(tab.toolbar())
            comps["present"] = gr.Button(
                "Presentation mode", size="sm", elem_id="present-toggle", scale=0, min_width=160
            )
            comps["collapse"] = gr.Button(
                "Hide / show controls", size="sm", elem_id="controls-toggle", scale=0, min_width=160
            )
        with gr.Row(equal_height=False):
            with gr.Column(scale=1, min_width=330, elem_id="controls"):
                controls = control_column(cfg, comps, weights_line(values, BUNDLED, weights, DEFAULT_TEXT))
            with gr.Column(scale=3, min_width=320, elem_id="figures"):
                # "wrap": every tab one tap away on a phone or in presentation mode (Gradio's default
                # hides the tabs that do not fit behind a "..." menu)
                with gr.Tabs(elem_id="tabs", overflow_behavior="wrap") as comps["tabs"], on_cpu():
                    # at start-up: no GPU call, no CUDA before the server forks (ZeroGPU)
                    comps.update(figure_tabs(landing))
        clash = set(controls) & set(comps)
        assert not clash, f"component names shadow ModelConfig fields: {clash}"
        wire(demo, controls, {**controls, **comps})
    sessions.start_expiry(demo)  # idle sessions (Gradio's copies of their outputs) expire
    request_limits.start_sweeper(demo)  # unclaimed uploads are deleted after EXPLORER_UPLOAD_TTL s
    shorten_errors(ERROR_CHARS)
    scheduling.install(demo)  # per-address turns in the queue; launch's self-check waits for a busy server
    return demo


def control_column(cfg: ModelConfig, comps: dict, weights_md: str = "") -> dict:
    """The left column: preset, status, weights (and the line saying which are drawn), every config
    control, the text and the share box. Adds the non-config components to ``comps``; returns
    ``{field: control}``."""
    comps["preset"] = gr.Dropdown(
        [CUSTOM, *available()], value=CUSTOM, label="Preset", elem_id="preset", info=PRESET_INFO
    )
    comps["status"] = gr.Markdown("", elem_id="status")
    comps["weights"] = gr.Radio(
        all_choices(),
        value=BUNDLED,
        label="Weights",
        elem_id="weights-switch",
        info="bundled: a model trained on this CPU and shipped with the app; your run: "
        "the Train tab's model (trained on these controls); checkpoint: a pretrained "
        "model in Hugging Face's format",
    )
    comps["weights_md"] = gr.Markdown(weights_md, elem_id="weights-line")
    comps["weights_show"] = gr.Button(SHOW_TRAINED, visible=False, size="sm", elem_id="weights-show")
    build_door(comps)
    gr.Markdown(SHARE_NOTE, elem_classes="hint", elem_id="weights-note")
    controls = config_controls(cfg, choice_marks(cfg.to_dict()), comps)
    comps["text"] = gr.Textbox(
        DEFAULT_TEXT,
        lines=3,
        label=f"Input text (one token per byte, first {MAX_TEXT_BYTES} "
        "bytes; a checkpoint's own tokens; applied on leaving the box)",
        elem_id="text",
        max_length=MAX_TEXT_CHARS,
    )
    comps["separator"] = stacks.separator_box()
    with gr.Accordion("Share & export", open=True):
        comps["share_url"] = gr.Textbox(
            "", label="Share link (this configuration)", elem_id="share-url", buttons=["copy"], interactive=False
        )
        comps["share_qs"] = gr.Textbox("", visible=False, elem_id="share-qs")
        # pressed by the page's script when Back / Forward brings an earlier link (explorer.app.controls.share_js)
        comps["url_back"] = gr.Button("read the address bar", visible="hidden", elem_id="url-back")
        with gr.Row():
            comps["upload"] = gr.UploadButton("Upload config JSON", file_types=[".json"], size="sm")
            comps["export"] = gr.Button("Export zip", size="sm", elem_id="export")
        comps["files"] = gr.File(
            label="Download (zip: config JSON, a PNG per figure, sweep CSV, offline HTML page)",
            file_count="single",
            elem_id="downloads",
            visible=False,
            interactive=False,
        )
        gr.Markdown(
            "The zip's README.txt lists its files. One figure as PNG: the camera button in its "
            "toolbar (hover the figure).",
            elem_classes="hint",
        )
    return controls


def config_controls(cfg: ModelConfig, marks: dict, comps: dict | None = None) -> dict:
    """Every config control in its group -> ``{field: component}``; the schedule's chips (not a field) go into
    ``comps``."""
    choice = {cat: getattr(cfg, cat) for cat in CATEGORIES}
    shown, unused = visible_fields(choice), unused_categories(choice)
    made = {}

    def make(names):
        for name in names:
            made[name] = make_control(
                name, getattr(cfg, name), visible=name in shown, unused=name in unused, choices=marks.get(name)
            )

    with gr.Group():
        make([*CATEGORIES, "causal"])
    with gr.Accordion("Size", open=True):
        with gr.Row():
            make(SIZE_FIELDS[:2])
        with gr.Row():
            make(SIZE_FIELDS[2:])
        make(["seed"])
    with gr.Accordion("Layers and attention terms (2024-2026 families)", open=False, elem_id="modern-group"):
        make(MODERN_FIELDS[:1])
        chips = gr.HTML(chips_html(cfg.layer_schedule, cfg.n_layers), elem_id="schedule-chips")
        if comps is not None:
            comps["schedule_chips"] = chips
        make(MODERN_FIELDS[1:])
    with gr.Accordion("Variant parameters (shown when the chosen variants use them)", open=True):
        make([name for name in CONTROL_FIELDS if name not in made])
    return made


def figure_tabs(landing: Landing) -> dict:
    """Every registered tab (``explorer.app.tabs.TABS``), in order, inside the caller's ``gr.Tabs`` ->
    ``{name: component}``; a name two tabs both claim is an error at start-up."""
    out = {}
    for tab in registry.TABS:
        made = tab.build(landing)
        clash = set(made) & set(out)
        assert not clash, f"tab {tab.id!r} reuses component names: {clash}"
        out.update(made)
    return out
