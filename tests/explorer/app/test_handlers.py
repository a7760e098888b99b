"""Every UI handler and API function, called directly (no server): good input draws, bad input
warns (escaped, truncated) and keeps the last figures (``gr.skip()``), never a traceback.
Handlers take control values by field name and return ``{output name: value}``."""

import asyncio
import html
import json
import os
from types import SimpleNamespace

import gradio as gr
import plotly.graph_objects as go
import plotly.io as pio
import pytest

from explorer.app.api import endpoints as ui_api
from explorer.app.api.export import cleanup_export, export_files
from explorer.app.controls.fields import (
    CONTROL_FIELDS,
    FIELD_DIGEST_CHARS,
    choice_marks,
    config_values,
    control_ui,
    values_to_config,
    visibility_updates,
)
from explorer.app.controls.share import DEFAULT_TEXT
from explorer.app.controls.sources import FILL, apply_preset, load_from_url, upload_config
from explorer.app.controls.state import new_state
from explorer.app.page.wiring import stage_handler
from explorer.app.server.messages import MESSAGE_CHARS
from explorer.app.tabs import attention as h
from explorer.app.tabs.latency import run_sweep
from explorer.runtime.presets import CUSTOM
from models import ConfigError, ModelConfig, registries
from models.config import CATEGORIES

# the chain's analysis stage as the page runs it: the Gradients, Model and Latency (KV cache) tabs' steps
analysis_stage = stage_handler("analysis")


SMALL = ModelConfig(n_layers=2, d_model=32, n_heads=2)


def as_figure(value) -> go.Figure:
    """A figure a handler sent: a ``go.Figure``, or the memoised JSON Gradio's Plot sends (``PlotData``)."""
    return value if isinstance(value, go.Figure) else pio.from_json(value.plot)


def _values(cfg=SMALL, **kw):
    return {**config_values(cfg), **kw}


def _is_skip(x):
    return x == gr.skip() or (isinstance(x, dict) and x.get("__type__") == "update" and len(x) == 1)


def _filled(out) -> ModelConfig:
    return values_to_config({n: out[n]["value"] for n in CONTROL_FIELDS})


def test_control_values_round_trip_by_name_with_zero_as_none():
    cfg = ModelConfig(n_kv_heads=None, d_ff=None, softcap=None)
    vals = config_values(cfg)
    assert vals["n_kv_heads"] == 0 and set(vals) == set(CONTROL_FIELDS)
    assert values_to_config(vals) == cfg
    cfg2 = ModelConfig(n_kv_heads=2, softcap=30.0)
    assert values_to_config(config_values(cfg2)) == cfg2
    assert values_to_config({"attention": "strided", "stride": 8.0}) == ModelConfig(attention="strided", stride=8)


def test_a_fraction_in_a_whole_number_field_is_refused_not_rounded():
    with pytest.raises(ConfigError, match="n_layers=3.5.*whole number in \\[1, 12\\]"):
        values_to_config(_values(n_layers=3.5))
    with pytest.raises(ConfigError, match="controls"):
        values_to_config({"no_such_field": 1})
    with pytest.raises(ConfigError, match="controls"):
        values_to_config(["full", 4])  # positional lists are gone


def test_visibility_follows_the_chosen_variants_and_categories_never_hide():
    def shown(**choice):
        vals = {c: choice.get(c, getattr(ModelConfig(), c)) for c in CATEGORIES}
        return {n for n, u in visibility_updates(vals).items() if u["visible"]}

    assert "window" in shown(attention="sliding_window") and "window" not in shown(attention="full")
    assert "norm" in shown(norm_placement="pre") and {"attention", "n_layers", "causal", "seed"} <= shown()
    # the mission's pre-LN / post-LN choice is visible whatever the layer structure
    for layer in ("standard", "reversible", "universal", "gated", "early_exit"):
        for placement in ("pre", "post", "none"):
            assert {"norm_placement", "norm"} <= shown(layer=layer, norm_placement=placement)
    # ... and a norm no variant reads says so
    ups = visibility_updates({"norm_placement": "none", "layer": "standard"})
    assert "not used" in ups["norm"]["info"]
    assert ups["norm_placement"]["info"] == registries()["norm_placement"]["none"].summary  # the selection explained


def test_refresh_attention_draws_shares_and_keeps_a_tiny_state():
    out = h.refresh_attention(_values(), "hello", new_state())
    assert isinstance(as_figure(out["grid"]), go.Figure) and isinstance(as_figure(out["stats"]), go.Figure)
    assert "5 byte tokens" in out["maps_md"] and out["preset"]["value"] == CUSTOM
    assert "n_layers=2" in out["share_qs"] and "text=hello" in out["share_qs"]
    state = out["state"]
    assert state["fresh"] and set(state) == {"drawn", "fresh", "ui", "sweep", "arch"}
    # no text, no config, no figure in the session state: two digests and a short one per control
    assert len(json.dumps(state)) < 150 + len(CONTROL_FIELDS) * FIELD_DIGEST_CHARS
    again = h.refresh_attention(_values(), "hello", state)  # a commit that changes nothing
    assert all(_is_skip(again[k]) for k in (*h.FIGURES, "share_qs")) and not again["state"]["fresh"]
    assert all(_is_skip(again[n]) for n in CONTROL_FIELDS)  # controls not re-sent either
    assert all(_is_skip(x) for x in analysis_stage(_values(), text="hello", state=again["state"]).values())


def test_long_text_is_used_up_to_256_bytes_and_only_that_goes_into_the_link():
    for text in ("a" * 65_000, "中" * 8_000):
        out = h.refresh_attention(_values(), text, new_state())
        assert len(out["share_qs"]) < 1000 and "256 are used" in out["status"]
        assert "256 byte tokens" in out["maps_md"] or "255 byte tokens" in out["maps_md"]


def test_refresh_attention_bad_config_keeps_figures_and_escapes_the_echo():
    state = new_state()
    out = h.refresh_attention(_values(attention="fixed", n_summary=20), "hello", state)  # n_summary > stride
    assert all(_is_skip(out[k]) for k in h.FIGURES) and "n\\_summary" in out["status"]
    assert out["state"]["drawn"] == state["drawn"]
    out = h.refresh_attention(_values(n_layers=99), "x", state)
    assert "n\\_layers" in out["status"]
    assert all(_is_skip(x) for x in analysis_stage(_values(n_layers=99), text="x").values())


@pytest.mark.parametrize(
    "hostile",
    [
        '<a href="https://evil.example">Click here to re-authenticate</a>',
        '<img src="https://evil.example/x.png">',
        "[click](https://evil.example)",
    ],
)
def test_echoed_values_are_inert_text(hostile):
    out = h.refresh_attention(_values(attention=hostile), "x", new_state())
    status = out["status"]
    assert "<a" not in status and "<img" not in status and "](" not in status and "https://" not in status
    assert html.unescape(status).replace("\\", "").count("evil") == 1  # shown, as text


def test_a_huge_echoed_value_is_truncated():
    out = h.refresh_attention(_values(attention="x" * 10_000_000), "x", new_state())
    status = out["status"]  # the echo is cut to 120 characters; the valid keys are listed whole (they grow with
    # the catalogue), so the bound is the message's own, whatever the value's size
    assert "characters in all" in status and "x" * 121 not in status and len(status) < 2 * MESSAGE_CHARS


def test_linformer_while_causal_unticks_causal_and_says_so():
    out = h.refresh_attention(_values(attention="linformer", position="learned"), "hello", new_state())
    assert out["causal"]["value"] is False and "Causal unticked" in out["status"]
    assert as_figure(out["grid"]).data
    labels = dict((k, lab) for lab, k in choice_marks(_values())["attention"])
    assert labels["linformer"] == "linformer (needs causal off)" and labels["full"] == "full"


def test_analysis_stage_outputs():
    out = analysis_stage(_values(), text="hello")
    assert isinstance(out["grad"], go.Figure) and isinstance(out["kv"], go.Figure)
    assert "last layer ÷ first layer" in out["grad_md"] and "rezero exactly 0" in out["grad_md"]
    assert "parameters" in out["model_md"] and "one-time costs" in out["model_md"]
    assert json.loads(out["config_code"]) == SMALL.to_dict()


def test_apply_preset_fills_every_control():
    out = apply_preset("Mistral 7B (2023)")
    assert set(out) == {*CONTROL_FIELDS, *FILL} and set(FILL) == {"text", "separator", "preset", "status"}
    cfg = _filled(out)
    assert cfg.attention == "sliding_window" and cfg.n_kv_heads == 2 and out["preset"] == "Mistral 7B (2023)"
    assert all(set(out[n]) == {"__type__", "value"} for n in CONTROL_FIELDS)  # values only: no extra copies
    assert all(_is_skip(x) for x in apply_preset(CUSTOM).values())


def test_load_from_url_restores_or_falls_back_with_an_escaped_notice():
    req = SimpleNamespace(query_params={"attention": "strided", "stride": "8", "text": "abc"})
    out = load_from_url(req)
    cfg = _filled(out)
    assert cfg.attention == "strided" and cfg.stride == 8 and out["text"] == "abc"
    bad = load_from_url(SimpleNamespace(query_params={"n_layers": "999999"}))
    # a refused field is named and dropped; the rest of the link (here nothing) is kept
    assert _filled(bad) == ModelConfig() and "n\\_layers" in bad["status"] and "rest of the link" in bad["status"]
    hostile = load_from_url(SimpleNamespace(query_params={"attention": "<a href=https://evil.example>x</a>"}))
    assert "<a" not in hostile["status"] and "&lt;a" in hostile["status"]
    assert all(_is_skip(x) for x in load_from_url(SimpleNamespace(query_params={})).values())


def test_upload_config(tmp_path):
    good = tmp_path / "c.json"
    good.write_text(json.dumps({"attention": "longformer", "n_global": 3}))
    assert _filled(upload_config(str(good))).n_global == 3
    deep = "[" * 100_000 + "]" * 100_000
    for content, needle in (
        ("{nope", "valid JSON"),
        (json.dumps({"unknown_field": 1}), "unknown\\_field"),
        (json.dumps([1, 2]), "JSON object"),
        ('{"seed": ' + "9" * 5000 + "}", "number"),
        (deep[:90_000], "nesting"),
        ("x" * 200_000, "bytes"),
    ):
        bad = tmp_path / "b.json"
        bad.write_text(content)
        res = upload_config(str(bad))
        assert all(_is_skip(res[n]) for n in CONTROL_FIELDS) and "⚠️" in res["status"], content[:20]
        assert needle in res["status"], (needle, res["status"])
        assert "Could not compute" not in res["status"]
    assert "file" in upload_config(12)["status"]  # a wrong-typed input gets a message


def test_export_writes_one_zip_with_an_offline_page_and_cleanup_leaves_nothing(tmp_path, monkeypatch):
    import sys
    import zipfile

    monkeypatch.setitem(sys.modules, "kaleido", None)  # PNGs: tests/explorer/export/test_archive.py
    state = run_sweep(_values(), "16,32", "forward", new_state())["state"]
    out = export_files(_values(), "hello", state)
    path, folder = out["files"]["value"], out["export_dir"]
    assert os.path.dirname(path) == folder and os.path.basename(path).endswith(".zip")
    with zipfile.ZipFile(path) as zf:
        assert sorted(zf.namelist()) == ["README.txt", "config.json", "figures.html", "sweep.csv"]
        assert ModelConfig.from_dict(json.loads(zf.read("config.json"))) == SMALL
        page = zf.read("figures.html").decode()
    assert page.count("Plotly.newPlot") >= 5 and '<script src="https://cdn.plot.ly' not in page  # offline
    assert page.count("* plotly.js v") == 1 and len(page) < 8_000_000  # one copy of plotly.js for all figures
    cleanup_export(folder)
    assert not os.path.exists(folder)
    cleanup_export(str(tmp_path))  # never deletes a folder it did not make
    assert tmp_path.exists()


def test_run_sweep_records_and_bad_lengths():
    out = run_sweep(_values(), "16,32", "forward", new_state())
    assert isinstance(out["sweep"], go.Figure) and "full" in out["sweep_md"]
    assert [r["status"] for r in out["state"]["sweep"]["current"]] == ["ok", "ok"]
    assert "excluded" in out["sweep_md"] and "the kernels that ran are `sdpa (cpu)`" in out["sweep_md"]
    vals = _values(SMALL.replace(attention="sliding_window", window=8))
    state = run_sweep(vals, "16", "forward", new_state())["state"]
    assert state["sweep"]["baseline"][0]["backend"] == "sdpa (cpu)"
    assert state["sweep"]["current"][0]["backend"] == "torch-cpu block-sparse"
    out = run_sweep(_values(), "16,abc", "forward", state)
    assert _is_skip(out["sweep"]) and "seq\\_lens" in out["sweep_md"] and out["state"]["sweep"] == state["sweep"]


def test_api_functions_and_their_errors():
    cfg = json.dumps(SMALL.to_dict())
    s = ui_api.api_analyze(cfg, "hello")
    assert s["n_tokens"] == 5 and s["n_layers"] == 2 and len(s["entropy"][0]) == 2
    g = ui_api.api_gradients(cfg)
    assert g["layer"] == [0, 1] and len(g["residual"]) == 2
    assert asyncio.run(ui_api.api_benchmark(cfg, "16", "forward"))[0]["status"] == "ok"
    assert ui_api.api_analyze("", "")["n_layers"] == ModelConfig().n_layers  # empty = defaults
    for bad, needle in (
        ('{"attention": "nope"}', "attention"),
        ("{broken", "JSON"),
        ('{"n_layers": 50}', "n_layers"),
        ('{"seed": ' + "1" * 5000 + "}", "number"),
        ("[" * 5000 + "]" * 5000, "nesting"),
    ):
        with pytest.raises(gr.Error, match=needle):
            ui_api.api_gradients(bad)
    with pytest.raises(gr.Error, match="seq_lens"):
        asyncio.run(ui_api.api_benchmark(cfg, "16,x", "forward"))
    with pytest.raises(gr.Error, match="text"):
        ui_api.api_analyze(cfg, 42)


def test_text_notice():
    assert h.text_notice("short") == ""
    assert "300 bytes" in h.text_notice("x" * 300)
    assert DEFAULT_TEXT and len(DEFAULT_TEXT.encode()) <= 256


def test_a_config_matching_a_preset_is_said_not_switched():
    """Position = ALiBi on the default controls is BLOOM's config: the line under the Preset dropdown
    says so and the dropdown keeps the visitor's choice; a config matching nothing puts it on custom."""
    from explorer.app.tabs.attention import preset_of
    from explorer.runtime.configs import app_config
    from explorer.runtime.presets import matching_preset, preset_config

    name = matching_preset(preset_config("BLOOM (2022)"))
    out = h.refresh_attention({**config_values(preset_config("BLOOM (2022)"))}, "hello", new_state())
    assert preset_of(app_config(preset_config("BLOOM (2022)"))) == name == "BLOOM (2022)"
    assert "value" not in out["preset"] and out["preset"]["info"].startswith("The controls match BLOOM (2022).")
    out = h.refresh_attention(_values(), "hello", new_state())
    assert out["preset"]["value"] == CUSTOM and "match" not in out["preset"]["info"]


def test_a_commit_resends_exactly_the_controls_whose_look_changed():
    """Picking a pattern re-sends the controls whose visibility, note or choices differ (the reference:
    ``control_ui`` of the two configs compared field by field), each as ``control_ui`` makes it, and
    skips the rest, where it used to re-send every control with its whole list of choices."""
    before = _values()
    first = h.refresh_attention(before, "hello", new_state())
    after = {**before, "attention": "sliding_window"}
    out = h.refresh_attention(after, "hello", first["state"])
    old_plain, (new_ups, new_plain) = control_ui(before)[1], control_ui(after)
    changed = {n for n in CONTROL_FIELDS if old_plain.get(n) != new_plain.get(n)}
    assert changed and len(changed) < len(CONTROL_FIELDS) / 2, changed
    assert {n for n in CONTROL_FIELDS if not _is_skip(out[n])} == changed
    assert all(out[n] == new_ups[n] for n in changed)
