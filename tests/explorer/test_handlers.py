"""Every UI handler and API function, called directly (no server): good input draws, bad input
warns and keeps the last figures (``gr.skip()``), never a traceback."""
import json
from types import SimpleNamespace

import gradio as gr
import plotly.graph_objects as go
import pytest

from explorer import ui_handlers as h
from explorer.presets import CUSTOM
from explorer.share import DEFAULT_TEXT
from explorer.ui_controls import CONTROL_FIELDS, config_values, values_to_config, visibility_updates
from models import ModelConfig
from models.config import CATEGORIES

SMALL = ModelConfig(n_layers=2, d_model=32, n_heads=2)


def _values(cfg=SMALL):
    return config_values(cfg)


def _is_skip(x):
    return x == gr.skip() or (isinstance(x, dict) and x.get("__type__") == "update" and len(x) == 1)


def test_control_values_round_trip_with_zero_as_none():
    cfg = ModelConfig(n_kv_heads=None, d_ff=None, softcap=None)
    vals = config_values(cfg)
    assert vals[CONTROL_FIELDS.index("n_kv_heads")] == 0
    assert values_to_config(vals) == cfg
    cfg2 = ModelConfig(n_kv_heads=2, softcap=30.0)
    assert values_to_config(config_values(cfg2)) == cfg2


def test_visibility_follows_the_chosen_variants():
    def shown(**choice):
        vals = [choice.get(c, getattr(ModelConfig(), c)) for c in CATEGORIES]
        return {n for n, u in zip(CONTROL_FIELDS, visibility_updates(*vals)) if u["visible"]}
    assert "window" in shown(attention="sliding_window") and "window" not in shown(attention="full")
    assert "norm" in shown(norm_placement="pre") and "norm" not in shown(norm_placement="rezero")
    assert {"attention", "n_layers", "causal", "seed"} <= shown()


def test_refresh_attention_draws_and_shares():
    out = h.refresh_attention(_values(), "hello", h.new_state())
    grid, stats, reading, status, qs, preset, state = out
    assert isinstance(grid, go.Figure) and isinstance(stats, go.Figure)
    assert "5 byte tokens" in reading and preset == CUSTOM
    assert "n_layers=2" in qs and "text=hello" in qs
    assert json.loads(state["config"])["n_layers"] == 2


def test_refresh_attention_bad_config_keeps_figures():
    vals = _values()
    vals[CONTROL_FIELDS.index("attention")] = "fixed"
    vals[CONTROL_FIELDS.index("n_summary")] = 20  # > stride = 16
    state = h.new_state()
    out = h.refresh_attention(vals, "hello", state)
    assert all(_is_skip(x) for x in out[:3]) and "n_summary" in out[3] and out[-1] is state
    vals[CONTROL_FIELDS.index("n_summary")] = 1
    vals[CONTROL_FIELDS.index("n_layers")] = 99  # past the explorer's limit
    assert "n_layers" in h.refresh_attention(vals, "x", state)[3]
    assert all(_is_skip(x) for x in h.refresh_analysis(vals, "x"))


def test_refresh_analysis_outputs():
    grad, reading, card, kv, cfg_json = h.refresh_analysis(_values(), "hello")
    assert isinstance(grad, go.Figure) and isinstance(kv, go.Figure)
    assert "last layer ÷ first layer" in reading and "rezero exactly 0" in reading
    assert "parameters" in card and json.loads(cfg_json) == SMALL.to_dict()


def test_apply_preset_fills_every_control():
    out = h.apply_preset("Mistral 7B (2023)")
    assert len(out) == len(CONTROL_FIELDS) + 3
    vals = [u["value"] for u in out[:len(CONTROL_FIELDS)]]
    cfg = values_to_config(vals)
    assert cfg.attention == "sliding_window" and cfg.n_kv_heads == 2 and out[-2] == "Mistral 7B (2023)"
    assert all(_is_skip(x) for x in h.apply_preset(CUSTOM))


def test_load_from_url_restores_or_falls_back():
    req = SimpleNamespace(query_params={"attention": "strided", "stride": "8", "text": "abc"})
    out = h.load_from_url(req)
    cfg = values_to_config([u["value"] for u in out[:len(CONTROL_FIELDS)]])
    assert cfg.attention == "strided" and cfg.stride == 8 and out[len(CONTROL_FIELDS)] == "abc"
    bad = h.load_from_url(SimpleNamespace(query_params={"n_layers": "999999"}))
    assert values_to_config([u["value"] for u in bad[:len(CONTROL_FIELDS)]]) == ModelConfig()
    assert "defaults" in bad[-1]
    assert all(_is_skip(x) for x in h.load_from_url(SimpleNamespace(query_params={})))


def test_upload_config(tmp_path):
    good = tmp_path / "c.json"
    good.write_text(json.dumps({"attention": "longformer", "n_global": 3}))
    out = h.upload_config(str(good))
    assert values_to_config([u["value"] for u in out[:len(CONTROL_FIELDS)]]).n_global == 3
    for content in ("{nope", json.dumps({"unknown_field": 1}), json.dumps([1, 2])):
        bad = tmp_path / "b.json"
        bad.write_text(content)
        res = h.upload_config(str(bad))
        assert all(_is_skip(x) for x in res[:-1]) and "⚠️" in res[-1]


def test_export_writes_config_and_offline_html(tmp_path):
    state = h.new_state()
    _, _, state = h.run_sweep(_values(), "16,32", "forward", state)
    upd = h.export_files(_values(), "hello", state)
    paths = upd["value"]
    names = sorted(p.rsplit("/", 1)[-1] for p in paths)
    assert names == ["attention.html", "config.json", "gradients.html", "kv_cache.html", "latency_memory.html"]
    cfg = json.loads(open([p for p in paths if p.endswith("config.json")][0]).read())
    assert ModelConfig.from_dict(cfg) == SMALL
    html = open([p for p in paths if p.endswith("attention.html")][0]).read()
    assert "<script src=\"https://cdn.plot.ly" not in html and "Plotly.newPlot" in html and len(html) > 1_000_000


def test_run_sweep_records_and_bad_lengths():
    fig, reading, state = h.run_sweep(_values(), "16,32", "forward", h.new_state())
    assert isinstance(fig, go.Figure) and "full" in reading
    assert [r["status"] for r in state["sweep"]["current"]] == ["ok", "ok"]
    vals = _values(SMALL.replace(attention="sliding_window", window=8))
    _, _, state = h.run_sweep(vals, "16", "forward", h.new_state())
    assert state["sweep"]["baseline"][0]["backend"] == "sdpa (cpu)"
    out = h.run_sweep(_values(), "16,abc", "forward", state)
    assert _is_skip(out[0]) and "seq_lens" in out[1] and out[2] is state


def test_api_functions_and_their_errors():
    cfg = json.dumps(SMALL.to_dict())
    s = h.api_analyze(cfg, "hello")
    assert s["n_tokens"] == 5 and s["n_layers"] == 2 and len(s["entropy"][0]) == 2
    g = h.api_gradients(cfg)
    assert g["layer"] == [0, 1] and len(g["residual"]) == 2
    recs = h.api_benchmark(cfg, "16", "forward")
    assert recs[0]["status"] == "ok"
    assert h.api_analyze("", "")["n_layers"] == ModelConfig().n_layers  # empty = defaults
    for bad in ('{"attention": "nope"}', "{broken", '{"n_layers": 50}'):
        with pytest.raises(gr.Error):
            h.api_gradients(bad)
    with pytest.raises(gr.Error, match="seq_lens"):
        h.api_benchmark(cfg, "16,x", "forward")


def test_text_notice():
    assert h.text_notice("short") == ""
    assert "300 bytes" in h.text_notice("x" * 300)
    assert DEFAULT_TEXT and len(DEFAULT_TEXT.encode()) <= 256
