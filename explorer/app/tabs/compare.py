"""The "Compare A/B" tab: pin the configuration on screen as A, change the controls (B), see both.

A lives in a per-session ``gr.State`` (its config dict only, a few hundred bytes). The tab shows
what differs (fields, parameters, FLOPs per token), the attention maps of A and B side by side on
the same text, and their gradient norms overlaid. Its share link carries B (the controls), A
(``pin=``, itself a share query) and the active tab (``tab=compare``); opening it restores both.
Both configs read the same text with the same separator. Handlers take values by name and return
``{name: value}``; a bad config warns and skips. ``/compare_ab`` (``explorer.app.api.endpoints``) serves the same
comparison to API clients.
"""

from __future__ import annotations

from types import SimpleNamespace
from urllib.parse import parse_qsl

import gradio as gr

from explorer.analysis import config_diff, latency_memory_sweep
from explorer.analysis.compare import compare_pair
from explorer.analysis.cost.sweep import sweep_axes
from explorer.analysis.source import CHECKPOINT, WeightsSource, drawn_for
from explorer.app.controls import weights as weights_switch
from explorer.app.controls.events import QUIET
from explorer.app.controls.fields import CONTROL_FIELDS, current_config
from explorer.app.controls.share import compare_query, from_query
from explorer.app.controls.share_js import SHARE_JS
from explorer.app.controls.state import drawn_config, read_state
from explorer.app.server.jobs import run_job
from explorer.app.server.messages import problem, warn
from explorer.app.tabs.contract import Page, Tab
from explorer.app.tabs.parts.stacks import FIXED_LEN
from explorer.figures.attention import attention_grid
from explorer.figures.compare import ab_sweep_figure, gradient_compare_figure
from explorer.figures.readings import ab_sweep_reading, diff_markdown
from explorer.runtime.configs import app_config
from explorer.runtime.limits import MAX_SWEEP_LEN, SWEEP_BUDGET_S, parse_lengths
from explorer.runtime.text import as_text
from explorer.runtime.untrusted import shown, shown_html
from models import ConfigError, ModelConfig
from models.config import CATEGORIES

OUTPUTS = ("compare_md", "grid_a", "grid_b", "compare_grad", "compare_qs")
AB_LENGTHS = "128,256,512,1024"
AB_OUTPUTS = ("ab_sweep", "ab_md", "state")


def pin_button() -> gr.Button:
    """The pin button, placed by the caller where it is always visible (above the tabs)."""
    return gr.Button("Pin as A (compare)", variant="primary", size="sm", elem_id="pin-a", scale=0, min_width=160)


def build_compare_tab() -> SimpleNamespace:
    """The tab's components (inside the caller's ``gr.Tabs``)."""
    with gr.Tab("Compare A/B", id="compare", elem_id="compare-tab") as tab:
        with gr.Row():
            refresh = gr.Button("Compare A with the controls now (B)", elem_id="compare-run", scale=0, min_width=260)
        md = gr.Markdown(
            "Press **Pin as A** (top right) to keep the configuration on screen as A, then change the controls "
            "and open this tab again: B is whatever the controls show.",
            elem_id="compare-reading",
        )
        with gr.Row(equal_height=False):
            grid_a = gr.Plot(None, label="A (pinned): attention maps", elem_id="compare-grid-a")
            grid_b = gr.Plot(None, label="B (now): attention maps", elem_id="compare-grid-b")
        grad = gr.Plot(None, label="Gradient norms, A vs B", elem_id="compare-grad")
        with gr.Row():
            ab_lengths = gr.Textbox(
                AB_LENGTHS,
                label=f"A/B sweep: sequence lengths (comma-separated, up to {MAX_SWEEP_LEN})",
                elem_id="ab-lengths",
            )
            ab_mode = gr.Radio(["forward", "forward_backward"], value="forward", label="Measure", elem_id="ab-mode")
            with gr.Column(min_width=140):
                ab_run = gr.Button("Run A/B sweep", variant="primary", elem_id="ab-run")
                ab_stop = gr.Button("Stop", variant="stop", size="sm", elem_id="ab-stop")
        ab_md = gr.Markdown(
            "Press **Run A/B sweep** to time A and B over the same lengths on this machine.", elem_id="ab-reading"
        )
        ab_sweep = gr.Plot(None, label="Latency and memory, A vs B", elem_id="ab-sweep")
        # the server writes the comparison's query (hidden); the page's share script turns it into
        # the full link in the visible box and puts it in the address bar
        link = gr.Textbox(
            "", label="Share link (A, B and this tab)", elem_id="compare-link", buttons=["copy"], interactive=False
        )
        link_qs = gr.Textbox("", visible=False, elem_id="compare-qs")
    return SimpleNamespace(
        tab=tab,
        refresh=refresh,
        md=md,
        grid_a=grid_a,
        grid_b=grid_b,
        grad=grad,
        link=link,
        link_qs=link_qs,
        ab=dict(ab_lengths=ab_lengths, ab_mode=ab_mode, ab_run=ab_run, ab_stop=ab_stop, ab_md=ab_md, ab_sweep=ab_sweep),
    )


def side_weights(weights=None):
    """``cfg -> TrainedWeights or None``: what each side is drawn with for the request's weights source
    (``WeightsSource.for_other``: the same choice for A's config: its bundle, your run when it belongs to it,
    the initial weights); a bare record draws a side only when it belongs to its config, None the initial
    weights."""
    if isinstance(weights, WeightsSource):
        return weights.for_other
    return lambda cfg: drawn_for(weights, cfg)


def pin_config(values: dict, text=None) -> dict:
    """-> ``{"pinned": A's config dict}``; a bad config warns and pins nothing."""
    try:
        return {"pinned": current_config(values).to_dict()}
    except Exception as exc:
        warn(problem(exc))
        return {"pinned": gr.skip()}


def _source(record) -> str:
    return record.source if record is not None else "initial weights"


def compare_outputs(a: ModelConfig, b: ModelConfig, text: str, separator=None, weights_for=None) -> dict:
    """The tab's figures and reading for A and B on the same text and separator; ``weights_for(cfg)``: the
    weights each side is drawn with (the page's Weights choice; None: initial weights)."""
    text = as_text(text)
    wa, wb = (weights_for(a), weights_for(b)) if weights_for is not None else (None, None)
    pair = compare_pair(a, b, text, separator, wa, wb)  # one GPU call for both sides
    (maps_a, maps_b), (grad_a, grad_b) = pair["maps"], pair["gradients"]
    md = diff_markdown(config_diff(a, b), *pair["summaries"])
    drawn = f"\n\nWeights: A {shown(_source(wa))}; B {shown(_source(wb))}."
    return {
        "compare_md": md + "\n\nBoth maps are drawn on the same input text; each has its own colour scale." + drawn,
        "grid_a": attention_grid(maps_a, narrow=True),
        "grid_b": attention_grid(maps_b, narrow=True),
        "compare_grad": gradient_compare_figure(grad_a, grad_b),
        "compare_qs": compare_query(a, b, text, separator),
    }


def refresh_compare(values: dict, text, pinned, separator=None, weights=None) -> dict:
    """A (pinned) vs B (the controls) -> the tab's outputs, each side drawn with the page's Weights choice
    (``weights``: the request's ``WeightsSource``, ``explorer.app.controls.weights.with_weights``); nothing pinned ->
    a hint."""
    if not pinned:
        return {
            "compare_md": "Nothing pinned yet: press **Pin as A** (top right) first.",
            **{k: gr.skip() for k in OUTPUTS if k != "compare_md"},
        }
    if isinstance(weights, WeightsSource) and weights.kind == CHECKPOINT:
        return {
            "compare_md": "Compare A/B draws the catalogue's models (bundled, initial or your run). For a "
            "pretrained checkpoint, the Surgery tab compares a change with the checkpoint as "
            "trained: its difference view and perplexity on your text.",
            **{k: gr.skip() for k in OUTPUTS if k != "compare_md"},
        }
    try:
        a = app_config(pinned)
        return compare_outputs(a, drawn_config(values, weights), text, separator, side_weights(weights))
    except Exception as exc:
        return {"compare_md": warn(problem(exc)), **{k: gr.skip() for k in OUTPUTS if k != "compare_md"}}


def ab_label(cfg: ModelConfig, other: ModelConfig) -> str:
    """A short name for one side of the A/B sweep: its attention, plus up to two other choices it
    differs in (a parameter such as ``window`` only when no choice differs)."""
    diff = config_diff(cfg, other)
    choices = [(k, va) for k, va, _ in diff if k in (*CATEGORIES, "causal")]
    diff = [(k, va) for k, va in (choices or [(k, va) for k, va, _ in diff]) if k != "attention"][:2]
    return cfg.attention + (" (" + ", ".join(f"{k}={v}" for k, v in diff) + ")" if diff else "")


def _sweep_one(cfg: ModelConfig, lengths: list, mode: str, progress, should_stop) -> list:
    axis = dict(seq2seq_axis="both", fixed_len=FIXED_LEN) if sweep_axes(cfg) else {}
    return latency_memory_sweep(
        cfg, lengths, mode, time_budget_s=SWEEP_BUDGET_S, should_stop=should_stop, progress=progress, **axis
    )


def run_ab_sweep(values: dict, pinned, lengths, mode, state, progress=None, should_stop=None) -> dict:
    """Time A (pinned) and B (the controls) over the same lengths -> the overlaid figure, the reading
    and the session state with the records (``ab_sweep``: the export's A/B figure and CSV rows)."""
    state = read_state(state)
    if not pinned:
        return {
            "ab_sweep": gr.skip(),
            "ab_md": "Nothing pinned yet: press **Pin as A** (top right) first.",
            "state": state,
        }
    try:
        a, b = app_config(pinned), current_config(values)
        lens = parse_lengths(lengths)
        if mode not in ("forward", "forward_backward"):
            raise ConfigError("mode", mode, "'forward' or 'forward_backward'")

        def part(lo, side):
            if progress is None:
                return None
            return lambda frac, msg: progress(lo + 0.5 * frac, desc=f"{side}: {msg}")

        rec_a = _sweep_one(a, lens, mode, part(0.0, "A"), should_stop)
        rec_b = _sweep_one(b, lens, mode, part(0.5, "B"), should_stop)
    except Exception as exc:
        return {"ab_sweep": gr.skip(), "ab_md": warn(problem(exc)), "state": state}
    name_a, name_b = ab_label(a, b), ab_label(b, a)
    reading = ab_sweep_reading(rec_a, rec_b, name_a, name_b)
    if any(r["status"] == "cancelled" for r in rec_a + rec_b):
        reading = "⏹ A/B sweep stopped: the lengths it did not reach are marked CANCELLED. " + reading
    return {
        "ab_sweep": ab_sweep_figure(rec_a, rec_b, name_a, name_b),
        "ab_md": reading,
        "state": {**state, "ab_sweep": {"a": rec_a, "b": rec_b, "name_a": name_a, "name_b": name_b}},
    }


async def run_ab_sweep_job(values: dict, pinned, lengths, mode, state, progress=None, request=None) -> dict:
    """``run_ab_sweep`` as a heavy job of the sweep family (``explorer.app.server.jobs``), stopped between two
    modules when the event is cancelled or its client leaves; a busy server answers with a message."""
    try:
        return await run_job(
            "sweep",
            request,
            lambda should_stop: run_ab_sweep(values, pinned, lengths, mode, state, progress, should_stop),
        )
    except ConfigError as exc:
        return {"ab_sweep": gr.skip(), "ab_md": warn(problem(exc)), "state": read_state(state)}


AB_IN = ("pinned", "ab_lengths", "ab_mode", "state")


def wire_ab_sweep(ui, control_fields) -> None:
    """The Run A/B sweep and Stop buttons (``ui``: ``explorer.app.controls.events.Components``); a sweep-family job."""

    async def ab_fn(data, request: gr.Request, progress=gr.Progress()):
        values, named = ui.split(data)
        return ui.back(
            await run_ab_sweep_job(
                values, named["pinned"], named["ab_lengths"], named["ab_mode"], named["state"], progress, request
            )
        )

    # a heavy job: admitted by explorer.app.server.jobs (never waits in Gradio's shared queue)
    run = ui["ab_run"].click(
        ab_fn,
        ui.inputs(*control_fields, *AB_IN),
        ui.outputs(*AB_OUTPUTS),
        api_name="run_ab_sweep",
        api_visibility="undocumented",
        concurrency_limit=None,
    )
    ui["ab_stop"].click(
        None, None, None, cancels=[run], api_name="stop_ab_sweep", api_visibility="undocumented", queue=False
    )


def pinned_from_url(request: gr.Request | None) -> dict:
    """A link's ``pin`` (a share query of A) -> ``{"pinned": dict or None}``. A malformed ``pin`` pins nothing
    and says so in a warning (``from_query`` never raises)."""
    params = dict(request.query_params) if request is not None else {}
    out = {"pinned": gr.skip()}
    if "pin" in params:
        cfg, _, _, notice = from_query(_parse(params["pin"]))
        out["pinned"] = None if notice else cfg.to_dict()
        if notice:  # said, not dropped silently
            gr.Warning(shown_html(f"The link's pinned A (pin) was not used, nothing is pinned: {notice}"))
    return out


def _parse(query: str) -> dict:
    return dict(parse_qsl(str(query)[:4000], keep_blank_values=True))


# ---------------------------------------------------------------------------- the tab (explorer.app.tabs.contract)
COMPARE_IN = (*CONTROL_FIELDS, "text", "separator", "pinned", "weights", "trained")


def toolbar() -> dict:
    return {"pin": pin_button()}


def build(landing) -> dict:
    compare = build_compare_tab()
    return {
        "compare_tab": compare.tab,
        "compare_run": compare.refresh,
        "compare_md": compare.md,
        "grid_a": compare.grid_a,
        "grid_b": compare.grid_b,
        "compare_grad": compare.grad,
        "compare_link": compare.link,
        "compare_qs": compare.link_qs,
        **compare.ab,
    }


def wire(page: Page) -> None:
    """Pin, recompute on the button or on opening the tab, and after a link has filled the controls, A
    (``Page.loaded``: the load chain's attention event; the link was read before ``SHARE_JS`` rewrites the
    address bar); the comparison's own link; the A/B sweep."""
    ui = page.ui
    refresh = dict(
        fn=ui.handler(weights_switch.with_weights(refresh_compare)),
        inputs=ui.inputs(*COMPARE_IN),
        outputs=ui.outputs(*OUTPUTS),
        show_progress="minimal",
        concurrency_id="compute",
        **QUIET,
    )
    ui["pin"].click(
        ui.handler(pin_config), ui.inputs(*CONTROL_FIELDS, "text"), ui.outputs("pinned"), api_name="pin_config", **QUIET
    ).then(api_name="compare_after_pin", **refresh)
    ui["compare_run"].click(api_name="compare", **refresh)
    ui["compare_tab"].select(api_name="compare_on_open", **refresh)
    linked = page.loaded.then(api_name="compare_from_link", **refresh)
    # once a link is read, the address bar and the Share box hold what is shown: the link's normalised
    # form, or the plain address when the link was refused (never the refused query)
    linked.then(None, [ui["share_qs"]], [ui["share_url"]], js=SHARE_JS, queue=False, api_visibility="private")
    # the comparison's full link, and the address bar in step with it (as the main share link)
    ui["compare_qs"].change(
        None, [ui["compare_qs"]], [ui["compare_link"]], js=SHARE_JS, queue=False, api_visibility="private"
    )
    wire_ab_sweep(ui, CONTROL_FIELDS)


def export(scene) -> list:
    """A (pinned) against B (the controls), drawn as the tab draws them for the page's Weights choice (a
    checkpoint has no Compare), and the session's A/B sweep."""
    sections = []
    weights = scene.weights
    if scene.pinned and not (isinstance(weights, WeightsSource) and weights.kind == CHECKPOINT):
        out = compare_outputs(app_config(scene.pinned), scene.cfg, scene.text, scene.separator, side_weights(weights))
        sections.append(
            (
                "Compare A (pinned) / B (the controls)",
                [
                    ("compare-a", out["grid_a"]),
                    ("compare-b", out["grid_b"]),
                    ("compare-gradients", out["compare_grad"]),
                ],
            )
        )
    ab = scene.session.get("ab_sweep")
    if ab:
        fig = ab_sweep_figure(ab["a"], ab["b"], ab["name_a"], ab["name_b"])
        sections.append(("A/B: latency and memory vs sequence length", [("ab-latency-memory", fig)]))
    return sections


def export_sweeps(session: dict) -> list:
    ab = session.get("ab_sweep")
    return [("A", ab["name_a"], ab["a"]), ("B", ab["name_b"], ab["b"])] if ab else []


TAB = Tab(
    "compare",
    build,
    wire=wire,
    export=export,
    export_sweeps=export_sweeps,
    link=("pin",),
    from_link=pinned_from_url,
    link_outputs=("pinned",),
    toolbar=toolbar,
)
