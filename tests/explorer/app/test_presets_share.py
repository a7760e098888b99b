"""Figures carry the results' numbers; presets validate; share links round-trip and never raise."""

import math
import re
import sys

import numpy as np
import plotly.graph_objects as go
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from explorer.analysis import attention_maps, kv_cache_bytes
from explorer.app.controls.share import DEFAULT_TEXT, from_query, to_query
from explorer.figures import base as plots
from explorer.figures import readings as report
from explorer.figures.attention import attention_grid, attention_stats
from explorer.figures.gradients import gradient_figure
from explorer.figures.latency import fitted_slope, kv_cache_figure, sweep_figure
from explorer.runtime.configs import app_config
from explorer.runtime.limits import parse_lengths
from explorer.runtime.presets import CUSTOM, available, matching_preset, preset_config
from models import ConfigError, ModelConfig

SMALL = dict(n_layers=2, d_model=32, n_heads=2)
REQUIRED_PRESETS = [
    "Vanilla Transformer (2017)",
    "BERT (2018)",
    "GPT-2 (2019)",
    "T5 (2020)",
    "Sparse Transformer (2019)",
    "Longformer (2020)",
    "BigBird (2020)",
    "LLaMA (2023)",
    "Llama-2-70B (GQA)",
    "Mistral 7B (2023)",
    "BLOOM (2022)",
]


def test_plots_module_does_not_import_torch():
    import subprocess

    code = "import sys, explorer.figures.base, explorer.figures.readings; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_attention_grid_shows_the_maps_with_disallowed_pairs_blank():
    maps = attention_maps(ModelConfig(attention="sliding_window", window=2, **SMALL), "abcdef")
    fig = attention_grid(maps)
    assert isinstance(fig, go.Figure) and len(fig.data) == 2 * 2
    z = np.asarray(fig.data[3].z, dtype=float)  # layer 1, head 1
    ref = maps.attention[1, 1]
    step = fig.layout.meta["p_step"]  # cells travel as colour levels: level * step ~ probability
    shown = (ref > 0) & (ref <= fig.layout.meta["p_max"])
    np.testing.assert_allclose(z[shown] * step, ref[shown], atol=step)
    assert (z[ref == 0] == 0).all() and (z[ref > 0] >= 1).all()
    assert list(fig.data[0].y) == [f"{i} {t}" for i, t in enumerate(maps.tokens)]
    stats = attention_stats(maps)
    np.testing.assert_array_equal(np.asarray(stats.data[0].z), maps.mask.astype(np.uint8))


def test_gradient_figure_overlays_placements_on_log_axes():
    results = {
        "post": {"attn_out": [1.0, 2.0], "ffn_out": [1.0, 1.0], "residual": [3.0, 2.0]},
        "rezero": {"attn_out": [0.0, 0.0], "ffn_out": [0.0, 0.0], "residual": [1.0, 1.0]},
    }
    fig = gradient_figure(results, "post")
    assert fig.layout.yaxis.type == "log" and fig.layout.yaxis3.type == "log"
    post = [t for t in fig.data if t.legendgroup == "post"]
    assert len(post) == 3 and post[0].line.width > [t for t in fig.data if t.legendgroup == "rezero"][0].line.width
    reading = report.gradient_reading(results, "post")
    assert "post 2.00×" in reading and "rezero exactly 0" in reading


def test_sweep_figure_fits_slopes_and_marks_failures():
    recs = [
        {"seq_len": n, "ms": 0.5 * n**2, "peak_bytes": 100 * n, "backend": "sdpa (cpu)", "status": "ok", "reason": ""}
        for n in (64, 128, 256)
    ]
    recs.append(
        {"seq_len": 512, "ms": None, "peak_bytes": None, "backend": "sdpa (cpu)", "status": "oom", "reason": "too big"}
    )
    assert fitted_slope(recs, "ms") == pytest.approx(2.0)
    assert fitted_slope(recs, "peak_bytes") == pytest.approx(1.0)
    fig = sweep_figure(recs, None, "full")
    names = [t.name for t in fig.data]
    assert "full (slope 2.00)" in names and "O(L)" in names and "O(L²)" in names
    marked = [t for t in fig.data if t.text is not None and "OOM" in t.text]
    assert marked and list(marked[0].x) == [512]
    assert "sdpa (cpu)" in fig.layout.title.text


def test_kv_figure_has_current_mha_mqa():
    kv = kv_cache_bytes(ModelConfig(n_heads=4, n_kv_heads=2), [128, 256])
    fig = kv_cache_figure(kv)
    ys = {t.name.split(" ")[0]: list(t.y) for t in fig.data}
    assert ys["MHA"][0] == pytest.approx(2 * ys["current"][0]) and ys["MQA"][0] == pytest.approx(ys["current"][0] / 2)


@pytest.mark.parametrize("name", REQUIRED_PRESETS)
def test_required_presets_validate_and_are_offered(name):
    cfg = app_config(preset_config(name))
    assert name in available()
    assert matching_preset(cfg) == name


def test_every_available_preset_round_trips_through_a_link():
    for name in available():
        cfg = preset_config(name)
        q = to_query(cfg, DEFAULT_TEXT, name)
        assert q == "preset=" + __import__("urllib.parse").parse.quote_plus(name)
        got, text, preset, notice = from_query(dict(__import__("urllib.parse").parse.parse_qsl(q)))
        assert got == cfg and preset == name and notice is None and text == DEFAULT_TEXT


def test_custom_config_and_text_round_trip():
    from urllib.parse import parse_qsl

    cfg = ModelConfig(attention="bigbird", n_random=1, n_kv_heads=2, causal=False, softcap=30.0)
    q = to_query(cfg, "héllo & bye=1")
    got, text, preset, notice = from_query(dict(parse_qsl(q)))
    assert got == cfg and text == "héllo & bye=1" and preset == CUSTOM and notice is None


@pytest.mark.parametrize(
    "params",
    [
        {"attention": "nonsense"},
        {"n_layers": "1e9"},
        {"n_layers": "100"},
        {"bogus": "1"},
        {"window": "-3", "attention": "sliding_window"},
        {"preset": "GPT-7"},
        {"causal": "maybe"},
        {"text": "x" * 5000},
        {"d_model": "<script>alert(1)</script>"},
    ],
)
def test_hostile_links_keep_their_valid_fields_with_a_notice(params):
    cfg, text, preset, notice = from_query(params)
    assert notice
    if "text" not in params:
        kept = {k: v for k, v in params.items() if k == "attention" and v == "sliding_window"}
        assert cfg == ModelConfig(**kept) and text == DEFAULT_TEXT and preset == CUSTOM


def test_one_bad_field_keeps_the_rest_of_the_link():
    """A bad ``seed`` no longer throws away a valid ``text`` and ``attention``: the notice names the
    refused fields (and only those), everything else of the link is used."""
    params = {"seed": "x", "bogus": "1", "attention": "sliding_window", "window": "32", "text": "hello there"}
    cfg, text, preset, notice = from_query(params)
    assert (cfg.attention, cfg.window, cfg.seed) == ("sliding_window", 32, ModelConfig().seed)
    assert text == "hello there" and preset == CUSTOM
    assert "seed=" in notice and "bogus=" in notice and "window=" not in notice and "attention=" not in notice
    assert "kept" in notice and "defaults" not in notice
    cfg, _, preset, notice = from_query({"preset": "GPT-7", "n_layers": "3"})  # an unknown preset: the defaults' base
    assert preset == CUSTOM and cfg == ModelConfig(n_layers=3) and "preset=" in notice


def test_long_text_in_link_is_cut_and_foreign_keys_ignored():
    cfg, text, _, notice = from_query({"text": "é" * 300, "__sign": "jwt", "__theme": "dark", "view": "api"})
    assert len(text.encode()) <= 256 and "cut" in notice
    assert from_query({"__sign": "x"}) == (ModelConfig(), DEFAULT_TEXT, CUSTOM, None)


@settings(max_examples=60, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(
            ["attention", "n_layers", "window", "text", "preset", "x", "seed", "causal", "d_model", "n_kv_heads"]
        ),
        st.text(max_size=30),
        max_size=5,
    )
)
def test_any_link_gives_its_config_or_its_valid_fields_with_a_notice_naming_the_refused(params):
    """Whatever a link holds, ``from_query`` returns a config that, written back into a link, reads
    back the same. Used as is (no notice): the text and preset are the link's. Refused in part: the
    notice names a field of the link it refused (an unexpected exception would give the catch-all
    notice, which names no field) and the link's text is kept; every field the notice does not name
    holds the link's value as the config reads it."""
    from urllib.parse import parse_qsl

    cfg, text, preset, notice = from_query(params)
    again = dict(parse_qsl(to_query(cfg, text, preset), keep_blank_values=True))
    assert from_query(again) == (cfg, text, preset, None)
    if notice is None:
        assert text == params.get("text", DEFAULT_TEXT) and preset == params.get("preset", CUSTOM)
    else:
        assert any(re.search(rf"\b{key}=", notice) for key in params), notice
        if "defaults" in notice:  # refused for a reason no single field explains: the defaults
            assert (cfg, text, preset) == (ModelConfig(), DEFAULT_TEXT, CUSTOM)
            return
        assert text == params.get("text", DEFAULT_TEXT)
        named = {key for key in params if re.search(rf"\b{key}=", notice)}
        kept = {k: v for k, v in params.items() if k not in named | {"text", "preset"}}
        base = preset_config(preset).to_dict() if preset != CUSTOM else ModelConfig().to_dict()
        assert cfg == app_config({**base, **kept})


def test_limits():
    with pytest.raises(ConfigError, match="n_layers"):
        app_config(ModelConfig(n_layers=13))
    assert parse_lengths(" 256,128;128 ") == [128, 256]
    for bad in ("", "a,b", "0", "100000", ",".join(["8"] * 9)):
        with pytest.raises(ConfigError):
            parse_lengths(bad)


def test_human_bytes():
    assert plots.human_bytes(512) == "512 B" and plots.human_bytes(3 * 2**20) == "3.0 MiB"
    assert plots.human_bytes(None) == "-" and plots.human_bytes(math.inf) == "-"


@settings(max_examples=40, deadline=None)
@given(st.text(min_size=0, max_size=3000))
def test_a_link_holds_only_the_used_text_and_stays_short(text):
    from urllib.parse import parse_qsl

    from explorer.app.controls.share import MAX_QUERY_CHARS, clip_text

    q = to_query(ModelConfig(attention="bigbird", n_random=3, seed=7), text)
    assert len(q) <= MAX_QUERY_CHARS
    used = clip_text(text)
    assert len(used.encode("utf-8")) <= 256 and text.startswith(used)
    got = dict(parse_qsl(q, keep_blank_values=True)).get("text", DEFAULT_TEXT)
    assert got == (used if used != DEFAULT_TEXT else DEFAULT_TEXT)


def test_long_link_texts_are_clipped_to_whole_characters():
    from explorer.app.controls.share import clip_text

    assert clip_text("中" * 8000) == "中" * 85  # 85 * 3 = 255 bytes: the 86th would cut a character
    assert len(to_query(ModelConfig(), "a" * 65_000)) < 300


def test_sweep_reading_says_what_ran_how_it_was_timed_and_when_it_was_loaded():
    rec = {
        "seq_len": 64,
        "ms": 2.0,
        "peak_bytes": 1000,
        "backend": "torch-cpu block-sparse",
        "status": "ok",
        "reason": "",
        "timer": "perf_counter",
        "dtype": "float32",
        "threads": 1,
        "others": 0,
    }
    quiet = report.sweep_reading([rec, {**rec, "seq_len": 128, "ms": 4.0}], None, "sliding_window")
    assert "`torch-cpu block-sparse`" in quiet and "excluded" in quiet and "layout" in quiet
    assert "inflated" not in quiet
    loaded = report.sweep_reading([rec, {**rec, "seq_len": 128, "others": 2}], None, "sliding_window")
    assert "1 of these measurements" in loaded and "up to 2" in loaded
    cuda = report.timing_method([{**rec, "timer": "CUDA events", "dtype": "bfloat16"}])
    assert "CUDA events" in cuda and "bf16" in cuda


def test_lessons_come_first_and_say_what_to_look_at():
    from explorer.app.controls.sources import apply_preset
    from explorer.runtime.presets import LESSONS

    names = available()
    assert names[: len(LESSONS)] == list(LESSONS)  # found first, not among the last of 50-odd entries
    for name, (about, _, _) in LESSONS.items():
        out = apply_preset(name)
        said = __import__("html").unescape(out["status"].replace("\\", ""))  # escaped as Markdown and HTML
        assert out["preset"] == name and name in said and about in said
    assert apply_preset(names[len(LESSONS)])["status"] == ""  # a named architecture fills the controls quietly
