"""Figures that say what they show: the grid's picks, size and clipped colour scale; the
memory in Transformer-XL's pattern panel; sweep failures on their own curve; coinciding curves; the
LSH error; and legends that never sit on an axis title, over every figure builder of explorer.figures."""

from types import SimpleNamespace

import numpy as np
import pytest

from explorer.analysis import attention_maps, gradient_norms, kv_cache_bytes
from explorer.app.controls.grid_pick import MAX_GRID, grid_from_params, grid_query, parse_pick, with_grid
from explorer.app.controls.share import DEFAULT_TEXT
from explorer.figures import stacks as plots_encdec
from explorer.figures import training as plots_train
from explorer.figures import views as plots_views
from explorer.figures.attention import PANEL_MAX, attention_grid, attention_stats, grid_height, quantise
from explorer.figures.base import LEGEND_ROW, TITLE_BAND, legend_rows
from explorer.figures.gradients import gradient_figure
from explorer.figures.latency import kv_cache_figure, sweep_figure
from explorer.runtime.presets import preset_config
from models import ConfigError, ModelConfig

SMALL = dict(n_layers=3, d_model=32, n_heads=4)


def _maps(att, tokens=None):
    n_l, n_h, L, Lk = att.shape
    tokens = tokens or [chr(97 + i % 26) for i in range(L)]
    return SimpleNamespace(attention=att, tokens=tokens, key_tokens=tokens, config={"attention": "test"})


# ---------------------------------------------------------------------------- the grid
def test_picked_layers_and_heads_are_the_panels_drawn():
    maps = attention_maps(ModelConfig(**SMALL), "hello world")
    fig = attention_grid(maps, [0, 2], [1, 3])
    assert [t.meta for t in fig.data] == [(0, 1), (0, 3), (2, 1), (2, 3)]
    step = fig.layout.meta["p_step"]
    for t in fig.data:
        layer, head = t.meta
        np.testing.assert_array_equal(np.asarray(t.z), quantise(maps.attention[layer, head], step))
    assert "layers 0, 2 of 3" in fig.layout.title.text and "heads 1, 3 of 4" in fig.layout.title.text
    assert fig.layout.xaxis3.title.text == "head 1" and fig.layout.yaxis3.title.text == "layer 2"


@pytest.mark.parametrize(
    "spec, n, expected",
    [
        ("all", 12, list(range(8))),
        ("", 3, [0, 1, 2]),
        (None, 3, [0, 1, 2]),
        (" 2 ", 4, [2]),
        ("0-2,5", 8, [0, 1, 2, 5]),
        ("5, 1-2, 1", 8, [1, 2, 5]),
        ("0-11", 12, list(range(8))),
        ("ALL", 2, [0, 1]),
    ],
)
def test_parse_pick_accepts_indices_ranges_and_lists(spec, n, expected):
    assert parse_pick(spec, n) == expected and len(parse_pick(spec, n)) <= MAX_GRID


@pytest.mark.parametrize("spec", ["4", "3-1", "a", "0;1", "-1", "1e3", "0-", "0" * 65, "<script>", "1,,2"])
def test_bad_picks_name_the_box_and_the_valid_forms(spec):
    with pytest.raises(ConfigError) as info:
        parse_pick(spec, 4, "Layers shown")
    assert info.value.field == "Layers shown" and "0-3" in str(info.value) and len(str(info.value)) < 300


def test_a_kept_pick_follows_a_smaller_model_when_not_strict():
    assert parse_pick("1-5", 3, strict=False) == [1, 2] and parse_pick("6", 4, strict=False) == [0, 1, 2, 3]
    with pytest.raises(ConfigError):
        parse_pick("x", 4, strict=False)


def test_picks_go_into_the_link_and_come_back_validated():
    assert grid_query("all", "") == "" and grid_query(" 0 - 3 ", "2") == "grid_layers=0-3&grid_heads=2"
    assert with_grid("attention=lsh", "1", None) == "attention=lsh&grid_layers=1"
    assert with_grid("", "1", "2") == "grid_layers=1&grid_heads=2"
    picks, notice = grid_from_params({"grid_layers": "0-3", "grid_heads": "1,2", "attention": "lsh"})
    assert picks == {"grid_layers": "0-3", "grid_heads": "1,2"} and notice is None
    picks, notice = grid_from_params({"grid_layers": "<b>x</b>", "grid_heads": "9" * 500})
    assert picks == {"grid_layers": "all", "grid_heads": "all"}
    assert "Layers shown and Heads shown" in notice and "<b>" not in notice


def test_grid_height_fits_a_720p_screen_and_panels_shrink_with_rows():
    heights = [grid_height(r) for r in range(1, MAX_GRID + 1)]
    assert all(h <= 640 for h, _ in heights)  # + tab bar and reading: within 720 px (browser test checks)
    panels = [p for _, p in heights]
    assert panels == sorted(panels, reverse=True) and panels[0] == PANEL_MAX and panels[-1] >= 40
    maps = attention_maps(ModelConfig(n_layers=8, n_heads=8, d_model=64), "hi there")
    assert attention_grid(maps).layout.height == grid_height(8)[0]


def test_a_clipped_colour_scale_says_so():
    rng = np.random.default_rng(0)
    att = rng.uniform(0.01, 0.2, size=(1, 2, 10, 10))
    att[0, 0, 0, 0] = 0.9  # one probability far above the 99th percentile
    fig = attention_grid(_maps(att))
    p99 = float(np.quantile(att, 0.99))
    assert fig.layout.meta["p_max"] == pytest.approx(p99) and fig.layout.meta["clipped"]
    assert f"clipped at<br>p99 = {p99:.2g}" in fig.layout.coloraxis.colorbar.title.text
    assert "(max 0.9)" in fig.layout.coloraxis.colorbar.title.text
    assert f"p ≥ {p99:.3g} (clipped)" in fig.data[0].hovertemplate
    flat = np.full((1, 1, 4, 4), 0.25)  # nothing above the 99th percentile: no claim of clipping
    fig = attention_grid(_maps(flat))
    assert "clipped" not in fig.layout.coloraxis.colorbar.title.text and not fig.layout.meta["clipped"]


# ---------------------------------------------------------------------------- stats panel with memory
def test_transformer_xl_pattern_panel_shows_the_memory_the_maps_show():
    text = "The quick brown fox jumps over the lazy dog. Attention is all you need; sparse attention is cheaper."
    maps = attention_maps(preset_config("Transformer-XL (2019)"), text)  # longer than a segment: memory shows
    support = (np.nan_to_num(maps.attention) > 0).any(axis=(0, 1))
    assert not np.array_equal(support, maps.mask)  # the case: the plain causal pattern is not what is drawn
    fig = attention_stats(maps)
    np.testing.assert_array_equal(np.asarray(fig.data[0].z), support.astype(np.uint8))
    assert f"{100 * support.mean():.1f}%" in fig.layout.title.text and "memory 'xl'" in fig.layout.title.text
    plain = attention_maps(ModelConfig(**SMALL), "hello world")  # no memory: the pattern itself
    np.testing.assert_array_equal(np.asarray(attention_stats(plain).data[0].z), plain.mask.astype(np.uint8))


# ---------------------------------------------------------------------------- sweep failures, coincidences
def _rec(L, status="ok", ms=None, peak=None):
    return {
        "seq_len": L,
        "status": status,
        "ms": ms,
        "peak_bytes": peak,
        "backend": "torch-cpu",
        "reason": "" if status == "ok" else f"{status} at L={L}",
        "mode": "forward",
    }


def test_a_failure_sits_on_the_curve_of_the_attention_that_failed():
    cur = [_rec(128, ms=1.0, peak=2**20), _rec(256, ms=2.0, peak=2**21), _rec(1024, "timeout")]
    base = [_rec(128, ms=1.0, peak=2**20), _rec(256, ms=4.0, peak=2**22), _rec(512, "oom")]
    fig = sweep_figure(cur, base, "sliding_window")
    lines = {t.name: t for t in fig.data if t.mode == "lines+markers" and t.xaxis == "x"}
    marks = {t.name: t for t in fig.data if t.mode == "markers+text" and t.xaxis == "x"}
    assert set(marks) == {"sliding_window: TIMEOUT", "full (baseline): OOM"}
    cur_line = next(t for n, t in lines.items() if n.startswith("sliding_window"))
    base_line = next(t for n, t in lines.items() if n.startswith("full"))
    t_mark, o_mark = marks["sliding_window: TIMEOUT"], marks["full (baseline): OOM"]
    assert t_mark.marker.color == cur_line.line.color and o_mark.marker.color == base_line.line.color
    assert t_mark.legendgroup == "sliding_window" and list(t_mark.text) == ["TIMEOUT"]
    # on the curve's own extension: log-log slope 1 from (256, 2 ms) to 1024 -> 8 ms; slope 2 for full
    assert list(t_mark.x) == [1024] and t_mark.y[0] == pytest.approx(2.0 * (1024 / 256) ** 1)
    assert list(o_mark.x) == [512] and o_mark.y[0] == pytest.approx(4.0 * (512 / 256) ** 2)
    assert "sliding_window" in t_mark.hovertemplate and t_mark.customdata[0][0] == "TIMEOUT"
    assert "timeout at L=1024" in t_mark.customdata[0][1]


def test_the_sweep_says_why_there_is_one_curve_or_two_that_coincide():
    cur = [_rec(128, ms=1.0, peak=2**20), _rec(256, ms=4.0, peak=2**22)]
    assert "no full curve: this config is its own baseline" in sweep_figure(cur, None, "full").layout.title.text
    near = [_rec(128, ms=1.02, peak=2**20), _rec(256, ms=3.9, peak=2**22)]
    assert "the two curves coincide" in sweep_figure(cur, near, "sliding_window").layout.title.text
    apart = [_rec(128, ms=1.0, peak=2**20), _rec(256, ms=8.0, peak=2**22)]
    assert "coincide" not in sweep_figure(cur, apart, "sliding_window").layout.title.text


def test_gradient_figure_says_which_curves_coincide_and_why_zeros():
    a = {"attn_out": [1.0, 2.0], "ffn_out": [1.0, 1.5], "residual": [3.0, 2.0]}
    results = {
        "pre": a,
        "sandwich": {**a, "residual": [5.0, 1.0]},
        "rezero": {"attn_out": [0.0, 0.0], "ffn_out": [0.0, 0.0], "residual": [1.0, 1.0]},
    }
    title = gradient_figure(results, "pre").layout.title.text
    assert "pre = sandwich coincide in attention out-proj" in title and "FFN out-proj (identical" in title
    assert "layer input" not in title.split("rezero")[0]  # their residual norms differ
    assert "rezero is exactly 0 in attention out-proj and FFN out-proj" in title and "α starts at 0" in title
    apart = {"pre": a, "post": {k: [2 * v for v in vs] for k, vs in a.items()}}
    assert "<sup>" not in gradient_figure(apart, "pre").layout.title.text


def test_kv_figure_says_when_current_is_mha():
    kv = kv_cache_bytes(ModelConfig(n_heads=4), [128, 256])
    assert "current = MHA: the curves coincide" in kv_cache_figure(kv).layout.title.text
    kv = kv_cache_bytes(ModelConfig(n_heads=4, n_kv_heads=2), [128, 256])
    assert "coincide" not in kv_cache_figure(kv).layout.title.text


# ---------------------------------------------------------------------------- LSH error
def test_lsh_max_error_is_explained_with_the_rows_outside_the_bucket():
    eff = np.array([[[[1.0, 0.0], [0.0, 1.0]]]])  # row 1: all on key 1
    exact = np.array([[[[1.0, 0.0], [1.0, 0.0]]]])  # row 1: all on key 0, which the bucket does not hold
    view = SimpleNamespace(effective=eff, exact=exact, max_error=np.abs(eff - exact).max(axis=(2, 3)), mechanism="lsh")
    note = " ".join(plots_views.error_note(view))
    assert "outside the query's bucket (1 of 2 rows here)" in note and "LSH at initialisation" in note
    view.effective = np.array([[[[1.0, 0.0], [0.6, 0.4]]]])
    view.max_error = np.abs(view.effective - exact).max(axis=(2, 3))
    assert plots_views.error_note(view) == []  # max |error| 0.4: nothing to explain
    maps = attention_maps(ModelConfig(attention="lsh", **SMALL), DEFAULT_TEXT)
    reading = plots_views.views_reading(maps.views)
    approx = maps.views.items["approximation"]
    if approx.max_error.max() >= 0.5:
        assert "outside the query's bucket" in reading
        fig = plots_views.approximation_figure(
            approx, maps.tokens, *np.unravel_index(approx.max_error.argmax(), approx.max_error.shape)
        )
        title = " ".join(fig.layout.title.text.replace("<sup>", "").replace("</sup>", "").split("<br>"))
        assert "outside the query's bucket" in title  # the small print is wrapped into lines


# ---------------------------------------------------------------------------- legends
def _view_figures():
    cfgs = [
        dict(attention="lsh"),
        dict(attention="adaptive_span"),
        dict(memory="xl", segment_len=16, mem_len=16),
        dict(ffn="moe"),
        dict(attention="realformer"),
        dict(ffn="pkm"),
        dict(layer="funnel"),
        dict(attention="sinkhorn"),
        dict(attention="probsparse"),
        dict(attention="talking_heads"),
        dict(layer="early_exit"),
        dict(act=True, layer="universal"),
    ]
    figs = {}
    for extra in cfgs:
        try:
            maps = attention_maps(ModelConfig(**{**SMALL, **extra}), DEFAULT_TEXT[:60])
        except ConfigError:
            continue
        figs.update({f"{extra}:{k}": f for k, f in plots_views.view_figures(maps.views).items()})
    return figs


def _all_figures():
    figs = _view_figures()
    results = {
        p: gradient_norms(ModelConfig(norm_placement=p, **SMALL), seq_len=16, batch=2)
        for p in ("pre", "post", "rezero")
    }
    figs["gradient"] = gradient_figure(results, "pre")
    recs = [_rec(128, ms=1.0, peak=2**20), _rec(256, ms=2.0, peak=2**21), _rec(512, "oom")]
    figs["sweep"] = sweep_figure(recs, recs, "sliding_window")
    figs["kv"] = kv_cache_figure(kv_cache_bytes(ModelConfig(n_heads=4, n_kv_heads=2), [128, 256]))
    figs["encdec_grad"] = plots_encdec.stack_gradient_figure(
        {
            "stack": ["encoder", "decoder"],
            "stack_layer": [0, 0],
            "attn_out": [1.0, 2.0],
            "ffn_out": [1.0, 0.5],
            "residual": [2.0, 1.0],
            "cross_out": [None, 0.3],
            "norm_placement": "pre",
        }
    )
    hist = [
        {"step": s, "train_loss": 2.0 / (s + 1), "heldout_loss": 2.1 / (s + 1), "heldout_acc": 0.1 * s}
        for s in range(3)
    ]
    figs["train_curves"] = plots_train.curves_figure(hist)
    figs["train_grad"] = plots_train.grad_figure(
        {"attn_out": [1.0, 0.5], "ffn_out": [0.7, 0.2], "residual": [2.0, 1.0]}
    )
    curve = [{"step": 0, "loss": 5.0}, {"step": 10, "loss": 3.0}]
    figs["repro_warmup"] = plots_train.repro_figure(
        {
            "name": "warmup",
            "rows": [
                {"norm_placement": p, "warmup": w, "curve": curve} for p in ("pre", "post") for w in (True, False)
            ],
        }
    )
    figs["repro_extrapolation"] = plots_train.repro_figure(
        {
            "name": "extrapolation",
            "settings": {"train_len": 64, "eval_tokens": 32},
            "rows": [{"position": p, "eval_len": n, "loss": 2.0} for p in ("rope", "alibi") for n in (64, 128)],
        }
    )
    return figs


def test_every_legend_sits_clear_of_the_axis_titles():
    figs = _all_figures()
    assert {"gradient", "sweep", "kv", "train_curves"} <= set(figs) and any(":span" in k for k in figs)
    checked = 0
    for name, fig in figs.items():
        data = [t.to_plotly_json() for t in fig.data]
        entries = [d for d in data if d.get("showlegend", d["type"] in ("scatter", "bar")) and d.get("name")]
        if len(entries) < 2 and not any(d.get("showlegend") for d in data):
            continue  # Plotly draws no legend for a single trace
        checked += 1
        leg, lay = fig.layout.legend, fig.layout
        if leg.x is not None and leg.x >= 1.0 and leg.xanchor in (None, "left"):
            continue  # right of the plot area
        # above the plot area (axis titles are below it and left of it), under the pinned title
        assert leg.y is not None and leg.y > 1 and leg.yanchor == "bottom", f"{name}: legend at y={leg.y}"
        assert lay.title.yref == "container" and lay.title.y == 1 and lay.title.yanchor == "top", name
        above = (leg.y - 1) * (lay.height - lay.margin.t - lay.margin.b)  # px from the plot area to the legend
        assert lay.margin.t >= TITLE_BAND + legend_rows(data) * LEGEND_ROW + above - 5, f"{name}: no room"
    assert checked >= 8


def test_long_title_notes_wrap_between_clauses_and_the_band_grows():
    """Plotly clips a title at the figure's edge: a long note is broken between its clauses (each
    kept whole), and the title band grows a line for each line the note gained."""
    from explorer.figures.base import NOTE_CHARS, NOTE_LINE, legend_above

    clauses = [f"clause {i} says something about the figure" for i in range(6)]
    short = legend_above(dict(height=400, title="T<br><sup>one note</sup>"))
    lay = legend_above(dict(height=400, title="T<br><sup>" + "; ".join(clauses) + "</sup>"))
    text = lay["title"]["text"]
    lines = [line[5:-6] for line in text.split("<br>")[1:]]
    assert len(lines) > 1 and all(len(line) <= NOTE_CHARS for line in lines), lines
    assert "; ".join(lines) == "; ".join(clauses)  # same words, same order, broken only at "; "
    assert lay["margin"]["t"] - short["margin"]["t"] == (len(lines) - 1) * NOTE_LINE
    assert lay["title"]["pad"]["t"] > 12  # a title of several lines is set on its first baseline


def test_a_narrow_attention_grid_title_fits_half_a_screen():
    """A/B draws two grids side by side (about 430 px each on a 1280 px screen, some 45 characters
    of the title's size): the narrow title says the same in lines short enough for that."""
    import re

    maps = attention_maps(ModelConfig(n_layers=2, attention="sliding_window", window=4), "hello there")
    wide = attention_grid(maps).layout.title.text
    narrow = attention_grid(maps, narrow=True).layout.title.text
    lines = [re.sub(r"</?sup>", "", line) for line in narrow.split("<br>")]
    assert max(len(line) for line in lines) < max(len(re.sub(r"</?sup>", "", x)) for x in wide.split("<br>"))
    assert len(lines[0]) <= 45 and all(len(line) <= 75 for line in lines[1:]), lines  # notes are 0.7 size
    for fact in ("sliding_window", f"{len(maps.tokens)} byte tokens", "all 2 layers", "blank = not allowed"):
        assert fact in narrow and fact in wide
