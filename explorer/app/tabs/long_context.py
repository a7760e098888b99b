"""The Long context tab and the ``/long_context`` endpoint: pooled maps, loss and statistics at thousands of tokens.

The visitor picks a length, a text (held out, with a long-range repeat, or pasted) and what to draw beside
the model as trained (a 64-key window, the window with sinks, or the controls' own surgery); "Draw" runs
``explorer.analysis.long_context.view`` on the weights on screen (the request's ``WeightsSource``, resolved
once by ``explorer.app.controls.weights.with_weights``) as a heavy job of the ``long_context`` family
(``explorer.app.server.jobs``: one per visitor, low priority, a progress bar per layer, Stop or a closed page
ends it within one module). Opening the tab draws its default scene once per session: the controls'
model at 2048 tokens (16x the default bundle's trained length) beside the same weights under a 64-key
window. The last results are memoised by weights, config and inputs (``_RESULTS``), so the zoom (a
layer, head and cell picked under the grid) computes only its rows. The share link adds ``lc_len``,
``lc_src`` and ``tab=long_context`` to the page's link; the CSV holds the pooled maps at full resolution.
"""

import hashlib
import io

import gradio as gr
import numpy as np

from explorer.analysis.long_context import view as lc
from explorer.analysis.long_context.text import MAX_PASTED_BYTES, SOURCES
from explorer.analysis.long_context.zoom import zoom as cell_zoom
from explorer.app.controls import weights as weights_switch
from explorer.app.controls.click_js import click_to_pick
from explorer.app.controls.fields import CONTROL_FIELDS
from explorer.app.server.api_types import LongContextResult
from explorer.app.server.calls import call, request_source
from explorer.app.server.gradio_compat import cache_file
from explorer.app.server.jobs import run_job
from explorer.app.server.messages import problem, refused, warn
from explorer.app.tabs.contract import Page, Tab
from explorer.app.tabs.parts.tab_tail import build_tail, wire_link
from explorer.figures.long_context import coarsen, loss_figure, pooled_grid, stats_figure, zoom_figure
from explorer.runtime import cost
from explorer.runtime.cache import ByteLRU
from explorer.runtime.numbers import whole_number
from explorer.runtime.stopping import Abandoned
from explorer.runtime.tokens import token_label
from models import ConfigError

SOURCE_LABELS = [
    ("held-out documentation", "heldout"),
    ("a paragraph repeated 3k tokens later", "repeat"),
    ("your text (below)", "pasted"),
]
CHANGE_LABELS = [(lc.CHANGE_NAMES[k], k) for k in lc.CHANGES]
OUTPUTS = ("lc_grid", "lc_loss", "lc_stats", "lc_zoom", "lc_md", "lc_csv", "lc_layer", "lc_head", "lc_qs", "lc_drawn")
INPUTS = ("lc_length", "lc_source", "lc_text", "lc_change", "lc_side", "lc_layer", "lc_head", "lc_qcell", "lc_kcell")
API_CELLS = 64  # the API's default cells per side of each map (at most the computed 256)
_RESULTS = ByteLRU(max_entries=2)  # (weights, config, inputs) -> LongContext: the zoom reuses the last draw


def build_long_context_tab() -> dict:
    """The tab's components by name (inside the caller's ``gr.Tabs``)."""
    out = {}
    with gr.Tab("Long context", id="long_context") as out["lc_tab"]:
        out["lc_md"] = gr.Markdown(
            "Opening this tab draws the controls' model at 2048 tokens beside the same "
            "weights under a 64-key sliding window.",
            elem_id="lc-reading",
        )
        with gr.Row():
            out["lc_length"] = gr.Radio(
                [str(n) for n in lc.allowed_lengths()],
                value=str(lc.DEFAULT_LENGTH),
                label="Length (tokens)",
                elem_id="lc-length",
            )
            out["lc_source"] = gr.Radio(SOURCE_LABELS, value="heldout", label="Text", elem_id="lc-source")
            out["lc_change"] = gr.Radio(
                CHANGE_LABELS, value="window", label="Beside the model as trained", elem_id="lc-change"
            )
            with gr.Column(min_width=120):
                out["lc_run"] = gr.Button("Draw", variant="primary", elem_id="lc-run")
                out["lc_stop"] = gr.Button("Stop", variant="stop", size="sm", elem_id="lc-stop")
        out["lc_text"] = gr.Textbox(
            "",
            lines=2,
            max_length=MAX_PASTED_BYTES,
            elem_id="lc-text",
            label=f"Your text (source 'your text'; up to {MAX_PASTED_BYTES // 1024} KB)",
        )
        out["lc_side"] = gr.Radio(
            [("as trained", 0), ("after the change", 1)], value=0, label="Grid of", elem_id="lc-side"
        )
        out["lc_grid"] = gr.Plot(None, label="Pooled attention maps", elem_id="lc-grid")
        out["lc_loss"] = gr.Plot(None, label="Per-token loss", elem_id="lc-loss")
        with gr.Row():
            out["lc_layer"] = gr.Dropdown([0], value=0, label="Layer", elem_id="lc-layer", min_width=90)
            out["lc_head"] = gr.Dropdown([0], value=0, label="Head (zoom)", elem_id="lc-head", min_width=90)
            out["lc_qcell"] = gr.Number(-1, label="Query cell (-1: the last)", precision=0, elem_id="lc-qcell")
            out["lc_kcell"] = gr.Number(
                -1, label="Key cell (-1: the row's strongest off the diagonal)", precision=0, elem_id="lc-kcell"
            )
            out["lc_zoom_go"] = gr.Button("Zoom / redraw", size="sm", elem_id="lc-zoom-go")
        out["lc_click_go"] = gr.Button("zoom", elem_id="lc-click-go", elem_classes="offscreen", size="sm")
        out["lc_stats"] = gr.Plot(None, label="Per-head statistics", elem_id="lc-stats")
        out["lc_zoom"] = gr.Plot(None, label="Exact token-level map of one cell", elem_id="lc-zoom")
        out.update(build_tail("lc", "Pooled maps (CSV)"))
    return out


def _key(src, length, source, text, change) -> tuple:
    w = src.weights
    return (
        w.digest if w is not None else "initial",
        src.config.to_json(),
        str(length),
        source,
        hashlib.sha256(str(text or "").encode("utf-8", "replace")).hexdigest() if source == "pasted" else "",
        change,
    )


def compute(src, length, source, text, change, should_stop=None, progress=None):
    """The memoised ``long_context`` result of these inputs (a miss: its predicted compute checked first, two
    forward passes at ``length`` tokens, refused by name past a heavy job's budget)."""

    def run():
        n = lc.check_length(length)
        cost.charge(src.config, [(2, n, 1)], f"The long-context view at {n} tokens", heavy=True, kind="long context")
        return lc.long_context(src, length, source, text, change, should_stop=should_stop, progress=progress)

    return _RESULTS.get(_key(src, length, source, text, change), run)


def labels_of(result, tokenizer) -> list:
    if tokenizer is None:
        return [token_label(b) for b in result.passage.ids]
    return [str(i) for i in result.passage.ids]


def reading(result) -> str:
    means = [(s.name, float(np.nanmean(s.loss))) for s in result.sides if s.loss is not None]
    t = result.trained_length
    past = ""
    if t and result.sides[0].loss is not None and t < result.length:
        inside = float(np.mean(result.sides[0].loss[: t - 1]))
        beyond = float(np.mean(result.sides[0].loss[t - 1 :]))
        past = (
            f" As trained, the loss is **{inside:.2f}** nats per {result.unit} within the trained length ({t}) and "
            f"**{beyond:.2f}** past it."
        )
    loss = "; ".join(f"{n}: **{m:.3f}**" for n, m in means)
    notes = " ".join(f"_{n}._" for n in result.notes + [x for s in result.sides for x in s.notes])
    return (
        f"**{result.length} {result.unit}s** of {result.passage.source} text, {result.origin}. Mean next-"
        f"{result.unit} loss: {loss}.{past} Maps by {result.sides[0].method} ({result.sides[0].backend}); "
        f"{result.seconds:.1f} s, {result.predicted_bytes / 2**20:.0f} MiB reserved. One figure as PNG: "
        f"the camera button in its toolbar. {notes}"
    )


def csv_bytes(result) -> bytes:
    """The pooled maps at full resolution: one row per (side, layer, head, query cell), a column per key cell."""
    buf = io.StringIO()
    s0 = result.sides[0]
    n_k = s0.mass.shape[-1]
    buf.write("side,layer,head,query_cell,query_start," + ",".join(f"key_{j * s0.block_k}" for j in range(n_k)) + "\n")
    for s in result.sides:
        for layer in range(s.mass.shape[0]):
            for head in range(s.mass.shape[1]):
                for a, row in enumerate(s.mass[layer, head]):
                    buf.write(
                        f"{s.name},{s.layers[layer]},{head},{a},{a * s.block_q},"
                        + ",".join(f"{v:.4g}" for v in row)
                        + "\n"
                    )
    return buf.getvalue().encode()


def _cell(value):
    """A cell picker's value: None (the default cell) for an empty box or a negative number."""
    if value in (None, ""):
        return None
    v = whole_number(value, "cell", what="a whole number (negative: the default cell)")
    return None if v < 0 else v


def _zoom_or_none(result, side, layer, head, q_cell, k_cell, tokenizer):
    z = cell_zoom(result, side, layer, head, _cell(q_cell), _cell(k_cell))
    return zoom_figure(z, labels_of(result, tokenizer))


def draw(
    values,
    weights=None,
    lc_length=None,
    lc_source="heldout",
    lc_text="",
    lc_change="window",
    lc_side=0,
    lc_layer=0,
    lc_head=0,
    lc_qcell=None,
    lc_kcell=None,
    should_stop=None,
    progress=None,
    **_kw,
) -> dict:
    """-> every output of the tab for these inputs (``weights``: the request's WeightsSource)."""
    if weights is None:
        raise ConfigError("weights", "none", "a config the controls can draw (see the status line)")
    result = compute(weights, lc_length or lc.DEFAULT_LENGTH, lc_source, lc_text, lc_change, should_stop, progress)
    side = min(int(lc_side or 0), len(result.sides) - 1)
    n_l, n_h = result.sides[0].mass.shape[:2]
    layer, head = min(int(lc_layer or 0), n_l - 1), min(int(lc_head or 0), n_h - 1)
    try:
        zoomed = _zoom_or_none(result, side, layer, head, lc_qcell, lc_kcell, weights.tokenizer)
    except ConfigError as exc:
        zoomed, note = None, problem(exc)
    else:
        note = ""
    csv = cache_file(csv_bytes(result), f"long_context_{result.length}_{result.passage.source}.csv")["path"]
    return {
        "lc_grid": pooled_grid(result, side),
        "lc_loss": loss_figure(result),
        "lc_stats": stats_figure(result, layer),
        "lc_zoom": zoomed,
        "lc_md": reading(result) + (f" Zoom: {note}" if note else ""),
        "lc_csv": csv,
        "lc_layer": gr.update(choices=list(range(n_l)), value=layer),
        "lc_head": gr.update(choices=list(range(n_h)), value=head),
        "lc_qs": f"lc_len={result.length if lc_source != 'pasted' else lc_length}&lc_src={lc_source}&tab=long_context",
        "lc_drawn": True,
    }


# Runs once per page: a click on a panel of the grid keeps [layer, head, query cell, key cell] (the trace's
# meta and the clicked cell's start positions over the computed block, ``pooled_grid``'s layout meta) and
# presses the hidden button, whose client-side step (PICK_JS) writes them into the pickers before the zoom runs.
CLICK_JS = click_to_pick(
    ["lc-grid"],
    "(gd.layout && gd.layout.meta) ? [Number(m[0]), Number(m[1]), "
    "Math.floor(Number(pt.y) / (gd.layout.meta.block_q / gd.layout.meta.factor)), "
    "Math.floor(Number(pt.x) / (gd.layout.meta.block_k / gd.layout.meta.factor))] : null",
    store="__lcPick",
    button_id="lc-click-go",
)
PICK_JS = """(layer, head, q, k) => {
  const p = window.__lcPick; window.__lcPick = null;
  const box = document.querySelector('#lc-zoom');
  if (p && box) box.scrollIntoView({behavior: 'smooth', block: 'nearest'});
  return p || [layer, head, q, k];
}"""


def from_link(request: gr.Request) -> dict:
    """A link's ``lc_len`` / ``lc_src`` -> the pickers (anything not offered is ignored)."""
    params = dict(request.query_params) if request is not None else {}
    out = {"lc_length": gr.skip(), "lc_source": gr.skip()}
    if params.get("lc_len") in [str(n) for n in lc.allowed_lengths()]:
        out["lc_length"] = params["lc_len"]
    if params.get("lc_src") in SOURCES:
        out["lc_source"] = params["lc_src"]
    return out


def wire(page: Page) -> None:
    """The tab's events and the ``/long_context`` endpoint."""
    demo, ui = page.demo, page.ui
    names = (*CONTROL_FIELDS, "trained", "weights", *INPUTS)

    async def drawn(data, request, progress, first_only: bool):
        values, named = ui.split(data)
        if first_only and named.get("lc_drawn"):
            return ui.back({k: gr.skip() for k in OUTPUTS})
        trained, choice = named.pop("trained", None), named.pop("weights", None)
        named.pop("lc_drawn", None)

        def work(should_stop):
            return weights_switch.with_weights(draw)(
                values, trained=trained, weights=choice, should_stop=should_stop, progress=progress, **named
            )

        try:
            return ui.back(await run_job("long_context", request, work))
        except Abandoned:
            return ui.back({**{k: gr.skip() for k in OUTPUTS}, "lc_md": "⏹ Stopped: nothing new drawn."})
        except Exception as exc:  # ConfigError (a bad pick, the budget, busy) and anything else: say it
            return ui.back({**{k: gr.skip() for k in OUTPUTS}, "lc_md": warn(problem(exc))})

    async def run_fn(data, request: gr.Request, progress=gr.Progress()):
        return await drawn(data, request, progress, False)

    async def open_fn(data, request: gr.Request, progress=gr.Progress()):  # the tab opened: its first scene once
        return await drawn(data, request, progress, True)

    inputs, outputs = ui.inputs(*names), ui.outputs(*OUTPUTS)
    spinner = dict(show_progress_on=ui.outputs("lc_grid", "lc_loss"))  # not one spinner on each of ten outputs
    run = ui["lc_run"].click(
        run_fn,
        inputs,
        outputs,
        api_name="long_context_draw",
        concurrency_limit=None,
        api_visibility="undocumented",
        **spinner,
    )
    redraw = gr.on(
        [ui["lc_zoom_go"].click, ui["lc_side"].input],
        run_fn,
        inputs,
        outputs,
        concurrency_limit=None,
        api_name="long_context_zoom",
        api_visibility="undocumented",
        **spinner,
    )
    opened = ui["lc_tab"].select(
        open_fn,
        ui.inputs(*names, "lc_drawn"),
        outputs,
        concurrency_limit=None,
        api_name="long_context_open",
        api_visibility="undocumented",
        **spinner,
    )
    demo.load(None, None, None, js=CLICK_JS, queue=False, api_visibility="private")
    picks = ui.outputs("lc_layer", "lc_head", "lc_qcell", "lc_kcell")
    clicked = (
        ui["lc_click_go"]
        .click(None, picks, picks, js=PICK_JS, queue=False, api_visibility="private")
        .then(
            run_fn,
            inputs,
            outputs,
            concurrency_limit=None,
            api_name="long_context_click",
            api_visibility="undocumented",
            **spinner,
        )
    )
    ui["lc_stop"].click(None, None, None, cancels=[run, redraw, opened, clicked], queue=False, api_visibility="private")
    wire_link(ui, "lc")

    def link_fn(request: gr.Request):
        return ui.back(from_link(request))

    demo.load(link_fn, None, ui.outputs("lc_length", "lc_source"), queue=False, api_visibility="private")
    gr.api(api_long_context, api_name="long_context", concurrency_limit=None)


def _json(a) -> list:
    """``a`` rounded to 6 decimals as nested lists, NaN as null."""
    arr = np.round(np.asarray(a, dtype=np.float64), 6)
    obj = arr.astype(object)
    obj[np.isnan(arr)] = None
    return obj.tolist()


def as_json(result, cells: int = API_CELLS) -> dict:
    """What ``/long_context`` answers (``cells``: cells per side of each map, merged by whole factors)."""
    centres, loss_bins = result.loss_bins()
    _, stat_bins = result.stats_bins()
    sides = []
    for s, lb, sb in zip(result.sides, loss_bins, stat_bins):
        f = -(-max(s.mass.shape[-2:]) // cells)
        sides.append(
            {
                "name": s.name,
                "config": s.config.to_dict(),
                "backend": s.backend,
                "method": s.method,
                "block_q": s.block_q * f,
                "block_k": s.block_k * f,
                "layers": s.layers,
                "maps": _json(coarsen(s.mass, f, result.length, s.block_q)),
                "mean_loss": None if s.loss is None else round(float(np.nanmean(s.loss)), 6),
                "loss_bins": None if lb is None else _json(lb),
                "stats_bins": {k: _json(v) for k, v in sb.items()},
                "notes": s.notes,
            }
        )
    return {
        "length": result.length,
        "unit": result.unit,
        "source": result.passage.source,
        "trained_length": result.trained_length,
        "repeat": None if result.passage.repeat is None else list(result.passage.repeat),
        "origin": result.origin,
        "bin_centres": _json(centres),
        "sides": sides,
        "notes": result.notes,
        "predicted_bytes": result.predicted_bytes,
        "seconds": round(result.seconds, 3),
    }


async def api_long_context(
    config_json: str = "",
    length: str = "2048",
    source: str = "heldout",
    text: str = "",
    change: str = "window",
    weights: str = "bundled",
    cells: int = API_CELLS,
    request: gr.Request = None,
) -> LongContextResult:
    """Pooled attention maps, per-head statistics and per-token loss at ``length`` tokens (one of 1024, 2048,
    4096, 8192, 16384, at most the server's cap): the model as trained beside ``change`` (``window``: a
    64-key sliding window, ``window_sinks``: the window and 4 sinks, ``controls``: ``config_json``'s own
    surgery) on ``source`` (``heldout``, ``repeat``: a paragraph repeated 3072 tokens later, ``pasted``:
    ``text``, at most 64 KB). ``weights`` as ``/analyze`` takes it. ``cells``: cells per side of each map
    (1 to 256; merged by whole factors). Maps are ``[layer][head][query cell][key cell]`` masses (a
    query block's cells sum to 1); bins are means over 64 equal position ranges."""
    try:  # refused before the job is admitted: a bad field costs no slot
        lc.check_length(length)
        cells = whole_number(cells, "cells", 1, 256, what="an integer in [1, 256]")
    except ConfigError as exc:
        raise refused(exc) from None

    def work(should_stop):
        def run():
            src = request_source(config_json, weights)
            result = compute(src, length, source, text, change, should_stop=should_stop)
            return {**as_json(result, cells), "weights": src.used()}

        return call(run)

    try:
        return await run_job("long_context", request, work)
    except gr.Error:
        raise
    except Exception as exc:
        raise refused(exc) from None


EXPORT_INPUTS = ("lc_length", "lc_source", "lc_text", "lc_change", "lc_side", "lc_layer", "lc_drawn")


def export(scene) -> list:
    """The view as the visitor last drew it (its length, text and change; the memoised result when it is
    still held, else drawn again within the memory pool): the pooled grid, the per-token loss and the
    statistics. Nothing when the tab was never drawn in this session (and for an API export)."""
    x = scene.extra
    if not x.get("lc_drawn") or scene.weights is None:
        return []
    result = compute(
        scene.weights,
        x.get("lc_length") or lc.DEFAULT_LENGTH,
        x.get("lc_source") or "heldout",
        x.get("lc_text") or "",
        x.get("lc_change") or "window",
    )
    side = min(int(x.get("lc_side") or 0), len(result.sides) - 1)
    layer = min(int(x.get("lc_layer") or 0), result.sides[0].mass.shape[0] - 1)
    return [
        (
            f"Long context: {result.length} {result.unit}s of {result.passage.source} text",
            [
                ("long-context-maps", pooled_grid(result, side)),
                ("long-context-loss", loss_figure(result)),
                ("long-context-stats", stats_figure(result, layer)),
            ],
        )
    ]


TAB = Tab(
    "long_context",
    lambda landing: build_long_context_tab(),
    wire=wire,
    export=export,
    export_inputs=EXPORT_INPUTS,
    link=("lc_len", "lc_src"),
)
