"""The Attention tab's handlers: the grid of maps, its statistics, the reading and the share link.

A handler takes ``values`` (``{ModelConfig field: control value}``) and named arguments and returns
``{output name: value}`` (``explorer.app.page.wiring`` maps names to components). Failures warn (the
message names the field, escaped and truncated) and return ``gr.skip()`` for the figures, so the last
good figures stay on screen and no traceback reaches the page.

``draw_grid`` is the one place that draws the grid and writes the share link of what it shows (the
config, the text the model read, its separator, the picked layers / heads): a control's commit and a
change of "Layers shown" / "Heads shown" both go through it. ``weights``: the session's trained
weights, used for the config they belong to only (``explorer.analysis.source.drawn_for``): the request's
``explorer.analysis.source.WeightsSource`` (resolved once by ``explorer.app.controls.weights``), whose config the
handlers draw.
"""

from __future__ import annotations

import functools

import gradio as gr

from explorer.analysis import attention_maps
from explorer.analysis.maps.figure_memo import figure_json
from explorer.analysis.source import drawn_for
from explorer.app.controls import weights as weights_switch
from explorer.app.controls.events import QUIET, picked
from explorer.app.controls.fields import CONTROL_FIELDS, adjust_causal, control_outputs, current_config, preset_update
from explorer.app.controls.grid_pick import FIELDS, normalise, parse_pick, with_grid
from explorer.app.controls.share import checkpoint_query, to_query
from explorer.app.controls.state import drawn_config, drawn_digest, read_state
from explorer.app.server.gradio_compat import plot_data
from explorer.app.server.messages import problem, text_notice, warn
from explorer.app.tabs.contract import Landing, Page, Step, Tab
from explorer.app.tabs.parts import grid as grid_pickers
from explorer.app.tabs.parts import stack_zoom as stack_zoom_box
from explorer.app.tabs.parts import stacks
from explorer.app.tabs.parts import zoom as zoom_box
from explorer.figures.attention import attention_grid, attention_stats
from explorer.figures.readings import head_table, maps_line
from explorer.figures.stacks import extra_grid
from explorer.figures.zoom import head_figure
from explorer.runtime.limits import MAX_TEXT_BYTES
from explorer.runtime.presets import matching_preset
from explorer.runtime.text import as_text, model_input, paired_text
from models import ModelConfig

FIGURES = ("grid", "stats", "maps_md", "heads_md", *stacks.FIGURES)


def grid_figure(maps, grid_layers=None, grid_heads=None, strict: bool = False):
    """The attention grid of the picked layers and heads (``explorer.app.controls.grid_pick``; ConfigError if
    malformed, or with ``strict`` out of range; otherwise indices the config lacks are dropped and
    the title says what is shown)."""
    n_l, n_h = maps.attention.shape[:2]
    return attention_grid(
        maps,
        parse_pick(grid_layers, n_l, FIELDS["grid_layers"], strict),
        parse_pick(grid_heads, n_h, FIELDS["grid_heads"], strict),
    )


def attention_outputs(
    cfg: ModelConfig, text: str, separator=None, grid_layers=None, grid_heads=None, weights=None
) -> tuple:
    """(grid, statistics, reading line, head table) of ``cfg`` on ``text``: the first paint of the page."""
    maps = attention_maps(cfg, text, separator=separator, weights=drawn_for(weights, cfg))
    return (grid_figure(maps, grid_layers, grid_heads), attention_stats(maps), *readings(maps))


def readings(maps) -> tuple:
    """(the line over the grid, the head table under it) of ``maps``: the grid comes before the table, so it
    is on the first screen."""
    summary = maps.summary()
    return maps_line(summary, MAX_TEXT_BYTES), head_table(summary.get("heads"), summary.get("head_rules"))


def share_query(cfg: ModelConfig, text: str, separator, picks, w=None, loaded=None) -> str:
    """The share link's query string of what the grid shows (config, text, separator, picks); for a
    checkpoint's weights, its id and the controls' changes to its config (``w``: the weights drawn for
    ``cfg``, checked by the caller; ``loaded``: the request's loaded checkpoint, which gives the config as
    trained, else looked up by the weights' id)."""
    if w is not None and w.checkpoint:
        from explorer.analysis.weights import checkpoints

        used = model_input(cfg, text, separator, tokenizer=w.tokenizer).text
        base = checkpoints.load(loaded or w.checkpoint).config
        return with_grid(checkpoint_query(w.checkpoint, base, cfg, used, separator), *picks)
    return with_grid(to_query(cfg, text, preset_of(cfg), separator), *picks)


def draw_grid(cfg: ModelConfig, text: str, separator, picks, w=None, loaded=None, strict: bool = False) -> tuple:
    """``(grid as sent, share query)``: the grid of the picked layers / heads, memoised per config,
    text, weights and pick (``figure_memo``: a config drawn before costs no Plotly work); ``w``: the weights
    drawn for ``cfg``, checked by the caller once per event (``drawn_for``), ``loaded`` the request's
    checkpoint; ``strict`` refuses picks the model does not have (ConfigError naming the box) instead of
    dropping them."""
    layers, heads = picks
    if strict:
        grid_figure(attention_maps(cfg, text, separator=separator, weights=w), layers, heads, strict=True)
    grid = plot_data(
        figure_json(
            f"grid:{normalise(layers)}:{normalise(heads)}",
            lambda maps: grid_figure(maps, layers, heads),
            cfg,
            text,
            separator,
            w,
        )
    )
    return grid, share_query(cfg, text, separator, picks, w, loaded)


def refresh_attention(
    values: dict,
    text,
    state,
    keep_status: bool = False,
    separator=None,
    grid_layers=None,
    grid_heads=None,
    stats: bool = True,
    weights=None,
) -> dict:
    """-> grid, stats, maps_md (the line over the grid), heads_md (the head table under it), status, share_qs, preset,
    state and every control's update.

    Incompatible causal settings are adjusted (and said); a commit that leaves the config and the
    used text unchanged redraws nothing; the grid shows the picked ``grid_layers`` / ``grid_heads``
    (carried in the share link). ``keep_status``: after a preset / link / upload filled the
    controls, leave its status line unless there is something new to say. ``stats=False``: the
    statistics figure is left to ``refresh_stats`` (the app sends the grid first, the rest follows)."""
    out = _refresh(values, as_text(text), read_state(state), separator, (grid_layers, grid_heads), stats, weights)
    if keep_status and out.get("status") == "":
        out["status"] = gr.skip()
    return out


def _refresh(values: dict, text: str, state: dict, separator, picks, with_stats: bool, weights) -> dict:
    values, note = adjust_causal(dict(values))
    controls, sig = control_outputs(values, state)
    if note:  # the flipped box, with its look when that changed too
        controls["causal"] = {**controls["causal"], "value": values["causal"]}
    unchanged = {**{k: gr.skip() for k in FIGURES}, "share_qs": gr.skip(), "preset": gr.skip()}
    # the separator box and the sweep's axis follow the architecture whatever happens next (a missing
    # separator is the error the user must be able to fix)
    controls.update(stacks.box_updates(values.get("architecture")))
    arch = values.get("architecture")
    try:
        cfg = current_config(values) if note else drawn_config(values, weights)  # adjusted: not what was resolved
        if arch != state.get("arch"):  # just switched to an encoder-decoder: give the text its separator
            text, paired = paired_text(cfg, text, separator)
            if paired:
                controls["text"] = text
                note = f"{note} {paired}".strip()
        w = drawn_for(weights, cfg)  # the one weights check of the event, passed down
        drawn = drawn_digest(cfg, text, separator, picks, w)
        if drawn == state["drawn"]:
            return {
                **controls,
                **unchanged,
                "status": note or notice(text, w),
                "state": {**state, "fresh": False, "ui": sig, "arch": arch},
            }
        grid, link = draw_grid(cfg, text, separator, picks, w, _loaded(weights))
        maps = attention_maps(cfg, text, separator=separator, weights=w)
        stats = plot_data(figure_json("stats", attention_stats, cfg, text, separator, w)) if with_stats else gr.skip()
        extra = stacks.attention_updates(cfg, text, separator, w)
    except Exception as exc:  # ConfigError and anything else: warn, keep the last good figures
        return {
            **controls,
            **unchanged,
            "status": warn(problem(exc)),
            "state": {**state, "fresh": False, "ui": sig, "arch": arch},
        }
    return {
        **controls,
        **extra,
        "grid": grid,
        "stats": stats,
        **dict(zip(("maps_md", "heads_md"), readings(maps))),
        "status": note or notice(text, w),
        "share_qs": link,
        "preset": preset_update(preset_of(cfg)),
        "state": {**state, "drawn": drawn, "fresh": True, "ui": sig, "arch": arch},
    }


def _loaded(weights):
    """The request's loaded checkpoint (a ``WeightsSource``'s), else None."""
    return getattr(weights, "loaded", None)


def refresh_stats(values: dict, text, state=None, separator=None, weights=None) -> dict:
    """-> the pattern and per-head statistics figure, after ``refresh_attention(stats=False)``;
    skipped when that event drew nothing new or the config is bad (it already warned)."""
    if state is not None and not read_state(state)["fresh"]:
        return {"stats": gr.skip()}
    try:
        cfg = drawn_config(values, weights)
        return {
            "stats": plot_data(
                figure_json("stats", attention_stats, cfg, as_text(text), separator, drawn_for(weights, cfg))
            )
        }
    except Exception as exc:
        problem(exc)
        return {"stats": gr.skip()}


def redraw_grid(
    values: dict, text, grid_layers=None, grid_heads=None, state=None, separator=None, weights=None
) -> dict:
    """-> the grid of the picked layers / heads, the share link, status and state (a change of the
    pickers); nothing is redrawn when the picks and config are what the grid already shows."""
    state = read_state(state)
    text = as_text(text)
    picks = (grid_layers, grid_heads)
    try:
        cfg = drawn_config(values, weights)
        w = drawn_for(weights, cfg)  # the one weights check of the event, passed down
        drawn = drawn_digest(cfg, text, separator, picks, w)
        if drawn == state["drawn"]:
            return {"grid": gr.skip(), "share_qs": gr.skip(), "status": gr.skip(), "state": gr.skip()}
        grid, link = draw_grid(cfg, text, separator, picks, w, _loaded(weights), strict=True)
    except Exception as exc:  # a bad pick (ConfigError naming the box) or config: keep the last grid
        return {"grid": gr.skip(), "share_qs": gr.skip(), "status": warn(problem(exc)), "state": gr.skip()}
    return {"grid": grid, "share_qs": link, "status": "", "state": {**state, "drawn": drawn, "fresh": False}}


def notice(text: str, weights) -> str:
    """The long-text notice of a byte model (a checkpoint's maps reading says where its tokenizer cut)."""
    return "" if weights is not None and weights.checkpoint else text_notice(text)


@functools.lru_cache(maxsize=256)
def preset_of(cfg: ModelConfig) -> str:
    """``presets.matching_preset``, memoised by the (frozen) config: it builds every preset's config."""
    return matching_preset(cfg)


# ---------------------------------------------------------------------------- the tab (explorer.app.tabs.contract)
ZOOM_IN = ("text", "separator", "zoom_layer", "zoom_head")
ZOOM_RENAME = {"zoom_layer": "layer", "zoom_head": "head"}


def build(landing: Landing) -> dict:
    """The Attention tab: the reading, the grid's pickers, the grid, its statistics, a model of several stacks'
    extra grids and their zoom, and the zoomed head; the first paint drawn here (no request)."""
    grid0, stats0, reading0, heads0 = attention_outputs(landing.cfg, landing.text, weights=landing.weights)
    out = {}
    with gr.Tab("Attention", id="attention"):
        # the first screen: one line, then the grid (its title says what it shows: no block label over it);
        # the pickers that filter it and the per-text head table come after it
        out["maps_md"] = gr.Markdown(reading0, elem_id="maps-reading")
        out["grid"] = gr.Plot(grid0, label="Attention maps", show_label=False, elem_id="attention-grid")
        pickers = grid_pickers.build_pickers()
        out.update(grid_layers=pickers.layers, grid_heads=pickers.heads, grid_zoom_go=pickers.go)
        out["heads_md"] = gr.Markdown(heads0, elem_id="head-types")
        out["stats"] = gr.Plot(stats0, label="Pattern and per-head statistics", elem_id="attention-stats")
        out.update(stacks.attention_plots())
        stack_zoom = stack_zoom_box.build_stack_zoom()
        out.update(stack_pick=stack_zoom.pick, stack_zoom_go=stack_zoom.go, stack_zoom=stack_zoom.plot)
        zoom = zoom_box.build_zoom()
        out.update(zoom_layer=zoom.layer, zoom_head=zoom.head, zoom=zoom.plot)
    return out


def detail(values, text, layer=0, head=0, separator=None, state=None, weights=None) -> dict:
    """The statistics figure and the zoomed head, after the grid; skipped like the grid was."""
    if state is not None and not read_state(state)["fresh"]:
        return {name: gr.skip() for name in ("stats", *zoom_box.OUTPUTS)}
    return {
        **refresh_stats(values, text, None, separator, weights),
        **zoom_box.refresh_zoom(values, text, layer, head, separator, weights),
    }


def wire(page: Page) -> None:
    """The zoom's pickers, the grid's pickers and click-to-zoom, the extra grids' zoom."""
    ui = page.ui
    zoom_in = (*CONTROL_FIELDS, *ZOOM_IN, "trained", "weights")
    gr.on(
        [picked(ui["zoom_layer"]), picked(ui["zoom_head"])],
        ui.handler(weights_switch.with_weights(zoom_box.refresh_zoom), ZOOM_RENAME),
        ui.inputs(*zoom_in),
        ui.outputs(*zoom_box.OUTPUTS),
        trigger_mode="always_last",
        show_progress="minimal",
        api_name="zoom_head",
        concurrency_id="compute",
        **QUIET,
    )
    grid_pickers.wire(page.demo, ui, zoom_in, ZOOM_RENAME, redraw_grid)
    stack_zoom_box.wire(page.demo, ui)  # a click on a panel of the encoder-decoder's extra grids


def _zoomed(zoom) -> tuple:
    """The zoom pickers' values as ints (clamped to the model by ``head_figure``); bad values are layer / head 0."""
    try:
        return max(0, int(zoom[0] or 0)), max(0, int(zoom[1] or 0))
    except (TypeError, ValueError, IndexError):
        return 0, 0


def export(scene) -> list:
    """The grid, the other stacks' and cross-attention maps, the statistics and the page's zoomed head."""
    maps, cfg = scene.maps, scene.cfg
    sections = [(f"Attention maps: {cfg.attention}", [("attention-maps", attention_grid(maps))])]
    if maps.stacks:  # a model of several stacks: the other stacks' and the cross-attention maps
        stems = {
            name: ("cross-attention" if m.mask_kind == "full" else f"{m.stack}-attention")
            for name, m in maps.stacks.items()
        }
        selfs = " and ".join(m.stack for m in maps.stacks.values() if m.mask_kind != "full")
        cross = any(m.mask_kind == "full" for m in maps.stacks.values())  # none beside a parallel_hybrid's mixer
        sections.append(
            (
                f"Cross-attention and {selfs} self-attention" if cross else f"{selfs.capitalize()} maps",
                [(stems[name], extra_grid(m)) for name, m in maps.stacks.items()],
            )
        )
    sections.append(("Attention pattern and per-head statistics", [("attention-stats", attention_stats(maps))]))
    if scene.zoom is not None and any(v is not None for v in scene.zoom):  # the page's zoom (an API export has none)
        layer, head = _zoomed(scene.zoom)
        sections.append((f"Zoomed head: layer {layer}, head {head}", [("zoomed-head", head_figure(maps, layer, head))]))
    return sections


TAB = Tab(
    "attention",
    build,
    steps=(
        Step(
            "detail",
            detail,
            (*ZOOM_IN, "state"),
            ("stats", *zoom_box.OUTPUTS),
            ZOOM_RENAME,
            on_load=True,
            progress_on=("stats", "zoom"),
        ),
    ),
    wire=wire,
    export=export,
)
